"""The shared streaming state machine: drives a FormatSpec over lexer segments and
emits events. Sans-I/O: `segment()` appends to `out`, `finish()` flushes."""

from __future__ import annotations

from . import shared
from .args.base import Args, CallContext, End, Fail, Junk, RegionCodec, Start
from .args.keys import FirstKeyWins, last_key_wins
from .events import Dropped, ToolCallArgsDelta, ToolCallEnd, ToolCallStart
from .lexer import Marker, Segment, Text
from .spec import FormatSpec
from .tools import typing_schemas

CONTENT, REASONING, REGION, DONE = "content", "reasoning", "region", "done"

_WS = " \t\r\n"


class FieldSink:
    """One output field. Trims the field's leading and trailing whitespace while
    streaming: trailing whitespace is held until more text follows in that field."""

    __slots__ = ("kind", "out", "started", "_held")

    def __init__(self, kind: str, out: list) -> None:
        self.kind = kind
        self.out = out
        self.started = False
        self._held: list[tuple[str, int]] = []

    def write(self, text: str, start: int) -> None:
        if not self.started:
            stripped = text.lstrip(_WS)
            start += len(text) - len(stripped)
            text = stripped
            if not text:
                return
            self.started = True
        body = text.rstrip(_WS)
        if body:
            for ws, ws_start in self._held:
                self.out.append((self.kind, ws, ws_start, ws_start + len(ws)))
            self._held.clear()
            self.out.append((self.kind, body, start, start + len(body)))
        if len(body) < len(text):
            self._held.append((text[len(body) :], start + len(body)))

    def finish(self) -> None:
        self._held.clear()


class Engine:
    def __init__(
        self,
        spec: FormatSpec,
        *,
        tools: dict,
        thinking: bool | None = None,
        prompt: str | None = None,
        stream_arguments: bool = False,
    ) -> None:
        self.spec = spec
        self.thinking = spec.default_thinking if thinking is None else bool(thinking)
        self.stream_arguments = stream_arguments
        self.out: list = []  # events, and (kind, text, start, end) for text
        self._tools = shared.once(tools, "typing_schemas", typing_schemas)  # local `$ref`s followed where a value is typed
        self._content = FieldSink("content", self.out)
        self._reasoning = FieldSink("reasoning", self.out)
        self._filter = spec.content_filter(self.thinking) if spec.content_filter else None
        self._r_filter = spec.reasoning_filter(self.thinking) if spec.reasoning_filter else None
        self._r_open = frozenset(spec.reasoning_open)
        self._r_close = frozenset(spec.reasoning_close)
        self._c_open = frozenset(spec.call_open)
        self._c_close = frozenset(spec.call_close)
        self._end = frozenset(spec.end)
        self._strip = frozenset(spec.strip)
        self._call_markers = self._c_open | self._c_close | frozenset(spec.inner)
        self._text_open = frozenset(spec.text_call_open)
        self._literal = frozenset(spec.literal_outside)
        self._start_triggers = spec.content_call_start
        self._start_held: str | None = "" if spec.content_call_start else None
        self._start_held_at = 0
        self._replay: list[tuple[str, int, bool]] | None = None  # a tentative region's input
        self._region: RegionCodec | None = None
        self._text_end = 0  # where the last text segment ended (a region's give_back ends there)
        self._region_return = CONTENT
        self._raw: list[str] = []  # region text since the last finished call, for diagnostics
        self._after_end: list[str] = []
        self._label: str | None = None  # held text that may still be the block label
        self._label_start = 0
        self._block_empty = True  # nothing but whitespace/label seen in the current block
        self._later_span = False  # inside a later reasoning span shown as content
        self._calls = 0  # calls emitted (whole mode) or started (streaming mode)
        self._call: tuple[str, str] | None = None  # the open call's id and name
        self._pending: list[str] = []  # its argument text not yet sent
        self._keys: FirstKeyWins | None = None  # streaming: drops repeated keys as they come
        self._cur: int | None = None  # streaming mode: index of the open call
        # A region end (its close marker, the turn's end) that the codec took as text inside
        # a string: the segments since, the ops held meanwhile, and where the call's raw text
        # ends. The call completing proves it text; a call that fails instead was ended there.
        self._suspect: list[Segment] | None = None
        self._suspect_ops: list = []
        self._suspect_raw = 0
        self._rerun: list[Segment] = []  # segments to read again once the region is gone
        # A call opened inside a reasoning block the model never closed: the segments since
        # its opener, and its ops, held until what follows decides (docs/policies.md). None:
        # no such call. `_thought_off`: the opener of a call that proved a thought, read
        # again as reasoning text (a later call is decided afresh).
        self._thought: list[Segment] | None = None
        self._thought_ops: list = []
        self._thought_off: Segment | None = None
        # Token mode: an opener-less `<function=…>` after content, held until the region's
        # close arrives as its token id (a call) or anything else says it was text
        self._late: list[Segment] | None = None
        self._late_off: Segment | None = None  # the opener of a hold that proved text
        # markers recognised only by their token id (set by the parser in token mode): a
        # region end among them is structural, never string text
        self.gated: frozenset[str] = frozenset()
        self.truncated = False
        self.called = False
        self._mode = CONTENT
        self._start_state(prompt)
        if self._filter is not None:
            self._filter.mark()

    # ---- start state -------------------------------------------------------------
    def _start_state(self, prompt: str | None) -> None:
        spec = self.spec
        opener = spec.prompt_opens_call
        if opener is not None and (prompt is None or prompt.rstrip(_WS).endswith(opener)):
            # tentative: output that names no recipient is content, every character kept
            self._open_region(CONTENT, tentative=True, opener=opener)
            return
        if prompt is not None and (spec.reasoning_open or spec.reasoning_close):
            last_open = max((prompt.rfind(m) for m in spec.reasoning_open), default=-1)
            last_close = max((prompt.rfind(m) for m in spec.reasoning_close), default=-1)
            if last_open > last_close:
                self._mode = REASONING
                opener = max(spec.reasoning_open, key=lambda m: prompt.rfind(m))
                tail = prompt[last_open + len(opener) :]
                if spec.reasoning_label and not tail.strip():
                    self._label = ""
                return
            if last_open >= 0 or last_close >= 0:
                return  # the prompt closed its last block: the output starts as content
        if self.thinking and spec.thinking_starts_in_reasoning:
            self._mode = REASONING

    # ---- input ---------------------------------------------------------------------
    def segment(self, seg: Segment) -> None:
        if self._late is not None and not self._after_late(seg):
            self._read_again()
            return
        if self._thought is not None and self._mode == REASONING and not self._after_thought(seg):
            self._read_again()
            return
        if self._thought is not None:
            self._thought.append(seg)
        if self._suspect is not None:
            self._suspect.append(seg)
        if isinstance(seg, Text):
            self._text_end = seg.start + len(seg.text)
            self._on_text(seg.text, seg.start)
        else:
            self._on_marker(seg)
        self._read_again()

    def _read_again(self) -> None:
        while self._rerun:
            segs, self._rerun = self._rerun, []
            for seg in segs:
                self.segment(seg)

    # ---- an opener-less call after content (token mode) ----------------------------------
    def _after_late(self, seg: Segment) -> bool:
        """`seg` follows a held `<function=…>` in content. False: held (or, at the region's
        close by its id, read as the call region it was); True: the hold ended as text."""
        if isinstance(seg, Marker) and seg.text in self._c_close and seg.text in self.gated:
            segs, self._late = self._late, None
            self.out.append(Dropped("", f"no {min(self._c_open)} before {segs[0].text}…{seg.text}: a call (repaired)"))
            self._open_region(CONTENT, opener=segs[0].text)
            self._rerun = [*segs, seg, *self._rerun]
            return False
        if isinstance(seg, Text) or (seg.text in self._call_markers and seg.text not in self._c_open):
            self._late.append(seg)
            return False
        self._late_text([seg])
        return False

    def _late_text(self, more: list[Segment]) -> None:
        """The held `<function=…>` was text: everything held is read again as content."""
        segs, self._late = self._late, None
        self._late_off = segs[0]
        self._rerun = [*segs, *more, *self._rerun]

    # ---- a call inside reasoning that was never closed ----------------------------------
    def _after_thought(self, seg: Segment, *, recorded: bool = False) -> bool:
        """`seg` follows the held call(s) of an unclosed reasoning block. False: it was
        taken here (whitespace, or a further call opening); True: read it as usual, the
        held calls having been released (the end of the turn) or turned back into
        reasoning text (anything else)."""
        keep = [] if recorded else [seg]
        if isinstance(seg, Text):
            if not seg.text.strip(_WS):
                self._thought += keep
                return False
        elif seg.text in self._c_open:
            self._thought += keep
            self._open_region(REASONING, opener=seg.text)
            return False
        elif seg.text in self._strip:  # says nothing (K2-Horizon's section tags around its calls)
            self._thought += keep
            return False
        elif seg.text in self._end:
            self._thought_release()
            return True
        elif not seg.known:
            return True  # dropped either way
        self._thought_abandon(keep)
        return False

    def _thought_release(self) -> None:
        """The calls were the model's last act: they are calls."""
        ops, self._thought_ops, self._thought = self._thought_ops, [], None
        close = self.spec.reasoning_close[0] if self.spec.reasoning_close else "the reasoning block's end"
        self._apply([Junk("", f"no {close} before the call: the reasoning ends there (repaired)"), *ops])

    def _thought_abandon(self, more: list[Segment]) -> None:
        """What followed the calls (reasoning text, `</think>`) or a call that failed shows
        they were thought about: everything since the first is read again as reasoning."""
        segs, self._thought, self._thought_ops = self._thought, None, []
        if self._region is not None:
            self._region.give_back = ""
            self._region = None
        self._raw = []
        self._forget_call()
        self._mode = REASONING
        self._thought_off = segs[0]
        self._rerun = segs + more + self._rerun

    def take_plain(self, text: str, start: int) -> str | None:
        """Fast lane for a text segment that surely just continues the open field: no
        region, label, held start or content filter is involved, the field has begun, it
        holds no whitespace, and `text` does not end in whitespace. Then `text` is taken
        as `segment(Text(text, start))` would take it, and the field's kind is returned
        ("reasoning" or "content"): the caller makes the one event. Else None, nothing
        taken. In a call region, a codec whose `plain` takes the text has added it to
        the open call's arguments: "region" is returned, and any event is in `out`.

        Once it has returned "reasoning" or "content", it takes any further such text
        the same way until the engine is fed otherwise (taking text changes nothing it
        checks): the parser's hot lane relies on that, and tells it of a run at once."""
        mode = self._mode
        if self._thought is not None or self._late is not None:
            return None  # segments are being held and recorded
        if mode == REASONING:
            if self._block_empty or self._label is not None:
                return None
            if self._r_filter is not None and not getattr(self._r_filter, "idle", False):
                return None
            sink = self._reasoning
        elif mode == CONTENT:
            if self._label is not None or self._start_held is not None:
                return None
            if self._filter is not None and not getattr(self._filter, "idle", False):
                return None
            sink = self._content
        elif mode == REGION:
            if self._replay is not None or self._suspect is not None or not text:
                return None
            json_text = self._region.plain(text)
            if json_text is None:
                return None
            self._raw.append(text)
            self._text_end = start + len(text)
            self._args(json_text)
            return mode
        else:
            return None
        if not text or not sink.started or sink._held or text[-1] in _WS:
            return None
        self._text_end = start + len(text)
        return mode

    @property
    def holds_args(self) -> bool:
        """Whether the engine is in a call region whose arguments it holds until the call ends
        (no stream_arguments): argument text `take_plain` takes there makes no event."""
        return self._mode == REGION and not self.stream_arguments

    @property
    def bare(self) -> bool:
        """Whether text of the open reasoning or content field goes straight to its
        FieldSink, no filter between: the parser's hot lane then holds back a delta's
        trailing whitespace itself, as the sink would (`StreamParser._spaced`)."""
        return (self._r_filter if self._mode == REASONING else self._filter) is None

    def _on_text(self, text: str, start: int) -> None:
        while text:
            mode = self._mode
            if mode == REGION:
                region = self._region
                used = region.feed(text)
                self._raw.append(text[:used])
                if self._replay is not None:
                    self._replay.append((text[:used], start, False))
                    if region.verdict is None and used < len(text):
                        region.verdict = False  # it ended itself undecided: not a call
                    if not self._settle():
                        if self._mode != REGION:  # rejected: the rest is content too
                            text, start = text[used:], start + used
                            continue
                        return
                if used < len(text) and region.in_call:  # a codec that forgot its call
                    region.close(truncated=False)
                self._drain()
                if self._region is not region:
                    return  # a suspected region end proved real: the text is read again
                back = region.give_back  # the tail of what it read that was not its own
                if used >= len(text) and not back:
                    return
                if self._thought is not None:  # the region ended itself after a held call
                    self._close_region()
                    if (back + text[used:]).strip(_WS):
                        self._thought_abandon([])  # more reasoning: it was a thought
                    return  # whitespace: still undecided (the segment is recorded)
                self._close_region()
                text, start = back + text[used:], start + used - len(back)
                continue
            if mode == DONE:
                self._after_end.append(text)
                return
            self._field_text(text, start)
            return

    def _on_marker(self, seg: Marker) -> None:
        m = seg.text
        mode = self._mode
        if mode == DONE:
            if m not in self._end and m not in self._strip:
                self._after_end.append(m)
            return
        if not seg.known:
            self.out.append(Dropped(m, "control token this format does not use"))
            return
        if m in self._text_open:
            # Plain text can open a call only before any content: a quoted or echoed
            # `<function=...>` in the middle of an answer stays text.
            if mode == CONTENT and self._start_held is None and not self._content.started:
                self._release_label()
                self._open_region(CONTENT, tentative=True, opener=m)
            elif mode == CONTENT and seg is not self._late_off and self._c_close & self.gated:
                # after content: a call only if it ends in the region's close by its token id
                self._late = [seg]
                return
            self._on_text(m, seg.start)
            return
        if mode == REGION:
            self._raw.append(m)
            ends = m in self._c_close or m in self._end
            if ends and m in self.gated:
                pass  # arrived as its token id: the region's end, even inside a string
            elif self._region.marker(m):
                if ends and self._suspect is None and self._thought is None and self._replay is None and self._region.in_call:
                    self._suspect = []
                    self._suspect_raw = len(self._raw)
                if self._replay is not None:
                    self._replay.append((m, seg.start, True))
                    if not self._settle():
                        return
                self._drain()
                return
            if m in self._c_close:
                self._raw.pop()
                if not self._end_region(truncated=False):
                    self._orphan(m)  # the region was not a call after all
            elif m in self._c_open:
                self._raw.pop()
                if self._raw or self._region.ops or self._region.in_call:
                    self._end_region(truncated=True)
                # else: nothing read yet (a region the prompt opened): the marker reopens it
                self._open_region(self._region_return, opener=m)
            elif m in self._end:
                # the model ended its turn: an unfinished call is malformed, not cut short
                self._raw.pop()
                self._end_region(truncated=False)
                self._mode = DONE
            elif self._region.idle:
                # between calls: the region (say a section whose end marker the model
                # skipped) ends here, and the marker means what it means outside it
                self._raw.pop()
                held = self._thought is not None
                self._end_region(truncated=False)
                if held and self._thought is None:
                    return  # the held call proved a thought: its segments, this marker too, are read again
                if self._thought is not None and self._mode == REASONING and not self._after_thought(seg, recorded=True):
                    return
                self._on_marker(seg)
            else:
                self._raw.pop()
                self.out.append(Dropped(m, "control token out of place inside a tool call"))
            return
        if mode == REASONING:
            if m in self._r_close:
                self._release_label()
                self._mode = CONTENT
                self._boundary()
            elif m in self._c_open and self.spec.calls_inside_reasoning:
                self._release_label()
                self._open_region(REASONING, opener=m)
            elif m in self._c_open and self._block_empty:
                # a call before any reasoning: the model skipped thinking (an empty block)
                self._release_label()
                self._open_region(CONTENT, opener=m)
            elif m in self._c_open and seg is not self._thought_off and not self.spec.calls_inside_reasoning:
                # Held: a call followed only by the end of the output, the end of the turn or
                # further calls is a call (the model skipped `</think>`); one followed by more
                # reasoning or by `</think>` was the model thinking about it (below).
                self._release_label()
                self._thought = [seg]
                self._open_region(REASONING, opener=m)
            elif m in self._call_markers and not self.spec.calls_inside_reasoning:
                # Every other family's documented format puts calls after the block
                # ends: a call written inside it is the model thinking about a call.
                # It is never executed; its text, markers included, stays reasoning.
                self._field_text(m, seg.start)
            elif m in self._end:
                self._release_label()
                self._mode = DONE
            elif m in self._r_open and self._block_empty:
                self._label = "" if self.spec.reasoning_label else None
            else:
                self._orphan(m)
            return
        # CONTENT
        if m in self._r_open:
            self._release_label()
            if self.spec.single_reasoning_block and self._reasoning.started:
                self._later_span = True
                self._label = "" if self.spec.reasoning_label else None
                self._label_start = seg.start + len(m)
            else:
                self._mode = REASONING
                self._block_empty = True
                self._label = "" if self.spec.reasoning_label else None
                self._label_start = seg.start + len(m)
            self._boundary()
        elif m in self._r_close and self._later_span:
            self._release_label()
            self._later_span = False
            self._boundary()
        elif m in self._c_open:
            self._release_label()
            self._open_region(CONTENT, opener=m)
        elif m in self._end:
            self._release_label()
            self._mode = DONE
        elif m in self._literal:
            self._on_text(m, seg.start)  # a call's tag outside any call: the text it spells
        else:
            self._orphan(m)
            self._boundary()

    def _orphan(self, m: str) -> None:
        if m not in self._strip:
            self.out.append(Dropped(m, f"{m} out of place; removed"))

    # ---- reasoning/content text ------------------------------------------------------
    def _field_text(self, text: str, start: int) -> None:
        if self._label is not None:
            held = self._label + text
            target = self.spec.reasoning_label + "\n"
            if target.startswith(held):
                if not self._label:
                    self._label_start = start
                self._label = held
                return
            self._label = None
            if held.startswith(target):
                cut = len(target) - (len(held) - len(text))
                start += cut
                text = text[cut:]
                if self._mode == REASONING:
                    self._block_empty = False
            else:
                text, start = held, self._label_start
        if not text:
            return
        if self._mode == REASONING:
            if text.strip(_WS):
                self._block_empty = False
            if self._r_filter is None:
                self._reasoning.write(text, start)
            else:
                for item in self._r_filter.write(text, start):
                    self._filtered(item, self._reasoning)
        elif self._start_held is not None:
            self._content_start(text, start)
        else:
            self._content_write(text, start)

    def _content_start(self, text: str, start: int) -> None:
        """The first content may open a tentative call region (FormatSpec.content_call_start)."""
        if not self._start_held:
            stripped = text.lstrip(_WS)
            start += len(text) - len(stripped)
            text = stripped
            if not text:
                return
            self._start_held_at = start
        held = self._start_held + text
        if any(t.startswith(held) and t != held for t in self._start_triggers):
            self._start_held = held
            return
        self._start_held = None
        if any(held.startswith(t) for t in self._start_triggers):
            self._open_region(CONTENT, tentative=True, opener=held)
            self._on_text(held, self._start_held_at)
        else:
            self._content_write(held, self._start_held_at)

    def _flush_start_held(self) -> None:
        held, self._start_held = self._start_held, None
        if held:
            self._content_write(held, self._start_held_at)

    def _content_write(self, text: str, start: int) -> None:
        if self._filter is None:
            self._content.write(text, start)
            return
        for item in self._filter.write(text, start):
            self._filtered(item, self._content)

    def _filtered(self, item: tuple | Dropped, sink: FieldSink) -> None:
        if isinstance(item, Dropped):
            self.out.append(item)
        elif len(item) == 2:
            sink.write(item[0], item[1])
        else:
            self.out.append(Dropped(item[0], item[2]))

    def _release_label(self) -> None:
        """A block or span ends: a label still undecided is dropped when lone, and what
        the reasoning filter holds is written (or reported)."""
        held, self._label = self._label, None
        if held and held.rstrip("\n") != self.spec.reasoning_label:
            self._field_text(held, self._label_start)
        if self._r_filter is not None and not getattr(self._r_filter, "idle", False):
            for item in self._r_filter.finish():
                self._filtered(item, self._reasoning)

    def _boundary(self) -> None:
        if self._filter is not None:
            self._filter.mark()

    # ---- tool-call regions -------------------------------------------------------------
    def _open_region(self, return_mode: str, *, tentative: bool = False, opener: str | None = None) -> None:
        if self._start_held is not None:
            self._flush_start_held()
        self._region = self.spec.codec(CallContext(self._tools, tentative=tentative, opener=opener, gated=self.gated))
        self._region_return = return_mode
        self._raw = []
        self._replay = [] if tentative else None
        self._mode = REGION

    def _settle(self) -> bool:
        """For a tentative region: True once it is surely a call (its held ops may
        go out); False while undecided, or when it is not a call, in which case its
        text has been put back into content."""
        verdict = self._region.verdict
        if verdict:
            self._replay = None
            return True
        if verdict is False:
            replay, self._replay = self._replay, None
            self._region = None
            self._raw = []
            self._mode = self._region_return
            for text, start, is_marker in replay:
                if is_marker:  # a control token never becomes content
                    self.out.append(Dropped(text, f"{text} out of place; removed"))
                else:
                    self._content_write(text, start)
        return False

    def _end_region(self, *, truncated: bool) -> bool:
        """Close the region; False when it was a tentative one that proved no call."""
        region = self._region
        region.close(truncated=truncated)
        if self._suspect is not None or self._thought is not None:
            self._drain()
            if self._region is not region:
                return True  # the region had ended at the suspected marker, or was thought
            if self._thought is not None and region.give_back.strip(_WS):
                self._thought_abandon([])  # text after the call, in the same segment
                return True
        if self._replay is not None:
            if region.verdict is None:
                region.verdict = False
            if not self._settle():
                self._boundary()
                return False
        self._drain()
        self._close_region()
        back = region.give_back  # text it held that proved not to be its own
        if back:
            self._on_text(back, self._text_end - len(back))
        return True

    def _close_region(self) -> None:
        self._region = None
        self._mode = self._region_return
        self._boundary()

    def _drain(self) -> None:
        """Turn the codec's ops into events: a call goes out whole once it ends, or
        (stream_arguments) piece by piece from its start."""
        region = self._region
        ops, region.ops = region.ops, []
        if self._thought is not None:
            self._thought_ops += ops
            if any(isinstance(op, Fail) for op in ops):
                self._thought_abandon([])
            return
        if self._suspect is not None:
            self._suspect_ops += ops
            first = next((op for op in self._suspect_ops if isinstance(op, End | Fail)), None)
            if first is None:
                return  # undecided: hold the ops
            if isinstance(first, Fail):
                self._suspect_ended(region)
                return
            ops, self._suspect_ops, self._suspect = self._suspect_ops, [], None  # it was text
        self._apply(ops)

    def _suspect_ended(self, region: RegionCodec) -> None:
        """The call failed after a region end it had taken as string text: the region
        ended there. The call is malformed; what came after is read again outside."""
        rerun, self._suspect, self._suspect_ops = self._suspect, None, []
        marker = self._raw[self._suspect_raw - 1]
        self._raw = self._raw[: self._suspect_raw]
        why = f"unterminated string: {marker} ended the call inside it"
        self._apply([Fail(why)])
        region.give_back = ""
        self._close_region()
        self._rerun = rerun + self._rerun

    def _apply(self, ops: list) -> None:
        stream = self.stream_arguments
        for op in ops:
            if isinstance(op, Start):
                self._call = (self.spec.call_id(op.native_id), op.name)
                self._keys = FirstKeyWins() if stream else None
                if stream:
                    self._cur = self._calls
                    self._calls += 1
                    self.out.append(ToolCallStart(self._cur, *self._call))
                    self._flush_args()
            elif isinstance(op, Args):
                self._args(op.json_text)
            elif isinstance(op, End) and self._call is not None:
                self.called = True
                if stream:
                    self._flush_args()
                    self.out.append(ToolCallEnd(self._cur))
                else:
                    index = self._calls
                    self._calls += 1
                    args, dropped = last_key_wins("".join(self._pending))
                    self.out.append(ToolCallStart(index, *self._call))
                    self.out.append(ToolCallArgsDelta(index, args))
                    self.out.append(ToolCallEnd(index))
                    for key, member in dropped:
                        self.out.append(Dropped(member, f"repeated argument {key!r}: the later value is kept"))
                self._forget_call()
            elif isinstance(op, Fail | End):  # an End without a Start is a codec's slip: no call
                why = op.why if isinstance(op, Fail) else "the call has no name"
                if isinstance(op, Fail) and op.truncated:
                    self.truncated = True
                if stream and self._cur is not None:
                    self.out.append(ToolCallEnd(self._cur, incomplete=True))
                self.out.append(Dropped("".join(self._raw), f"tool call not executed: {why}"))
                self._forget_call()
            elif isinstance(op, Junk):
                self.out.append(Dropped(op.raw, op.why))

    def _args(self, text: str) -> None:
        """Argument JSON of the open call: held until it ends, or (stream_arguments) sent."""
        if self._keys is not None:
            text = self._keys.feed(text)
            for key, member in self._keys.dropped:
                why = f"repeated argument {key!r}: the value already streamed is kept"
                self.out.append(Dropped(member, why))
            self._keys.dropped.clear()
        self._pending.append(text)
        if self.stream_arguments and self._cur is not None:
            self._flush_args()

    def _flush_args(self) -> None:
        if self._pending:
            self.out.append(ToolCallArgsDelta(self._cur, "".join(self._pending)))
            self._pending.clear()

    def _forget_call(self) -> None:
        self._call = None
        self._keys = None
        self._cur = None
        self._pending = []
        self._raw = []

    # ---- end -----------------------------------------------------------------------------
    def finish(self, *, cut: bool = True) -> None:
        """End of output. `cut`: it may have been cut short (max tokens) rather than
        ended by the model, so an unfinished call counts as truncated."""
        while self._mode == REGION or self._thought is not None or self._late is not None:
            if self._late is not None:
                self._late_text([])
            elif self._mode == REGION:  # a region end inside a string may open another
                self._end_region(truncated=cut)
            elif self._thought is not None:  # the calls ended the output: they are calls
                self._thought_release()
            self._read_again()
        self._flush_start_held()
        self._release_label()
        if self._filter is not None:
            for item in self._filter.finish():
                self._filtered(item, self._content)
        self._content.finish()
        self._reasoning.finish()
        rest = "".join(self._after_end)
        if rest.strip():
            self.out.append(Dropped(rest, "text after the end of the turn"))
