"""The public parsers: `StreamParser` (feed deltas, get events) and `parse` (batch).

Wires the stages: detokenizer -> stop conditions -> marker lexer -> engine, and
attaches each token's logprob to the first text it produced.
"""

from __future__ import annotations

import warnings
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from . import shared
from .engine import Engine
from .events import (
    ContentDelta,
    Event,
    Message,
    MessageBuilder,
    Piece,
    ReasoningDelta,
    TokenLogprob,
    delta_maker,
)
from .formats import registry as formats
from .lexer import GatedText, MarkerLexer, Text
from .spec import FormatSpec
from .tools import normalize_tools

_GATES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
# tokenizer -> {lexer marker-character pattern: {token id: its hot-lane text, "" if none}}
_HOT_TEXTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
# the same for the texts that end in whitespace (the hot lane holds that back, see `_spaced`)
_SPACED_TEXTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_MAKE = {"reasoning": delta_maker(ReasoningDelta), "content": delta_maker(ContentDelta)}
_WS = " \t\r\n"
# The most ids the hot lane holds for one character cut over several tokens (`_take_bytes`): UTF-8
# has at most four bytes a character, and a token at least one.
_MAX_PARKED = 4
# `_parked` while the lane holds the first bytes of a character of a call's held arguments (none of
# the fields' parts: the character goes to the arguments, `_take_bytes`)
_IN_ARGS: list[str] = []


def resolve_gates(spec: FormatSpec, tokenizer: Any) -> tuple[dict[str, int | None], tuple[GatedText, ...]]:
    """Each delimiter of the format -> the token id that gates it in this tokenizer, and
    the delimiters among them that are spelled around that one control token.

    A delimiter that is one token is gated by its id. One that is several tokens but
    contains exactly one added (control) token is gated by that token: it counts only
    when the token arrives as its id (DeepSeek V4's `<｜DSML｜tool_calls>` by `｜DSML｜`).
    Any other delimiter maps to None: it is matched as text, and a warning says so.
    """
    per_tok = _GATES.setdefault(tokenizer, {})
    if spec.name in per_tok:
        return per_tok[spec.name]
    gates: dict[str, int | None] = {}
    gated_text: list[GatedText] = []
    added = {t: i for t, i in tokenizer.added_tokens().items() if len(t) > 1 and not t.isspace()}
    for d in spec.delimiters:
        tid = tokenizer.single_token_id(d.strip())
        if tid is None:
            inside = _added_tokens_in(d, added)
            if len(inside) == 1:
                at, control = inside[0]
                tid = added[control]
                gated_text.append(GatedText(d, tid, d[:at], control, d[at + len(control) :]))
        gates[d] = tid
    missing = [d for d, tid in gates.items() if tid is None]
    if missing:
        warnings.warn(
            f"format {spec.name}: {', '.join(missing)} not single tokens of this tokenizer "
            "(nor spelled around one control token); matched as text (not gated by token id)",
            stacklevel=3,
        )
    per_tok[spec.name] = result = (gates, tuple(gated_text))
    return result


def resolve_delimiters(spec: FormatSpec, tokenizer: Any) -> dict[str, int | None]:
    """Each delimiter of the format -> the token id that gates it (see `resolve_gates`),
    or None when it is matched as text."""
    return resolve_gates(spec, tokenizer)[0]


def _added_tokens_in(text: str, added: Mapping[str, int]) -> list[tuple[int, str]]:
    """(offset, content) of each added token inside `text`, matched leftmost-longest
    without overlap, as a tokenizer splits added tokens out of text."""
    inside = [t for t in added if t in text]
    found: list[tuple[int, str]] = []
    i = 0
    while inside and i < len(text):
        hit = max((t for t in inside if text.startswith(t, i)), key=len, default=None)
        if hit is None:
            i += 1
        else:
            found.append((i, hit))
            i += len(hit)
    return found


class StreamParser:
    """Feed model output as it arrives; each call returns the events it settles.

    Text mode: `feed("...")`. Token mode (needs `tokenizer`): `feed(token_ids=[...])`,
    optionally with `logprobs` (one TokenLogprob per id); delimiters then count only
    when they arrive as their own token id.

    Ordinary text that only continues the open reasoning, content or argument string
    takes a fast lane past the pipeline's stages (see `_plain`, and `feed` for the hot
    lane); `fast_lane=False` sends everything through them, with the same result (the
    fixtures check both).
    """

    # what the compiled lane (chatsieve/_lane.c) reads and writes per token: slots, which it reaches
    # by their offsets; any other attribute is in the instance's __dict__
    __slots__ = (
        "_hot", "_hot_ids", "_hot_stops", "_hot_texts", "lane", "_hot_k", "_warm", "_parked", "_hot_held",
        "_hot_bare", "_spaced_texts", "__dict__", "__weakref__",
    )  # fmt: skip

    def __init__(
        self,
        format: str | FormatSpec,
        *,
        tools: Iterable[Mapping[str, Any]] | None = None,
        thinking: bool | None = None,
        prompt: str | None = None,
        stream_arguments: bool = False,
        tokenizer: Any = None,
        stop: str | Sequence[str] | None = None,
        stop_token_ids: Iterable[int] | None = None,
        include_stop_str_in_output: bool = False,
        fast_lane: bool = True,
        keep_logprobs: bool = True,
    ) -> None:
        self.spec = formats.get(format)
        self._fast_lane = fast_lane
        self.tokenizer = tokenizer
        self._engine = (self.spec.engine or Engine)(
            self.spec,
            tools=shared.once(tools, "normalize_tools", normalize_tools),
            thinking=thinking,
            prompt=prompt,
            stream_arguments=stream_arguments,
        )
        # keep_logprobs=False: `message.logprobs` stays None, for a caller that sends each event's
        # logprobs on as they come (a stream then holds none of them)
        self._builder = MessageBuilder(keep_logprobs=keep_logprobs)
        self._detok = None
        if tokenizer is not None:
            from .detok import Detokenizer

            self._detok = Detokenizer(tokenizer)
            self.gated, gated_text = resolve_gates(self.spec, tokenizer)
            spelled = {g.marker for g in gated_text}
            id_markers = {tid: d for d, tid in self.gated.items() if tid is not None and d not in spelled}
            text_markers = [d for d, tid in self.gated.items() if tid is None]
            text_markers += self.spec.text_call_open
            self._lexer = MarkerLexer(text_markers, id_markers, tokenizer.special_ids, gated_text)
            self._engine.gated = frozenset(d for d, tid in self.gated.items() if tid is not None)
        else:
            self.gated = {d: None for d in self.spec.delimiters}
            self._lexer = MarkerLexer(self.spec.delimiters + self.spec.text_call_open)
        if isinstance(stop, str):
            stop = [stop]
        self._stops = None
        if stop or stop_token_ids:
            from .detok import StopChecker

            self._stops = StopChecker(
                tuple(stop or ()), tuple(stop_token_ids or ()), include_stop_str_in_output
            )
        self._logprobs: deque[tuple[int, int, tuple[TokenLogprob, ...]]] = deque()
        self._pos = 0
        self._done = False
        # The hot lane (see `feed`): the builder's list of the field it appends to, or None
        self._hot: list[str] | None = None
        # ... or that list while the lane holds back whitespace (`_hot_held`; see `_spaced`)
        self._warm: list[str] | None = None
        self._hot_held: list[str] = []
        # ... or that list while the lane holds the first bytes of a character (`_take_bytes`)
        self._parked: list[str] | None = None
        self._parked_ids: list[int] = []
        self._parked_bytes = b""
        self._hot_bare = False  # whether the field's text goes straight to its FieldSink
        self._hot_make = _MAKE["content"]
        self.lane = "content"  # the kind of delta the hot lane makes: "reasoning" or "content"
        self._hot_k = 0  # deltas it took that the stages have not been told of (`_cool`)
        self._hot_ids = False  # whether it may take token ids (opened by one: nothing pending)
        self._hot_re = self._lexer.marker_chars
        self._hot_ok = fast_lane and (self._stops is None or not self._stops.has_strings)
        self._hot_stops = self._stops.stop_ids if self._stops is not None else frozenset()
        self._hot_texts: dict[int, str] = {}
        self._spaced_texts: dict[int, str] = {}
        # a byte-level vocabulary's ordinary tokens' bytes (`_take_bytes`), else None
        self._lane_bytes: Callable[[int], bytes] | None = None
        if tokenizer is not None and getattr(tokenizer, "byte_level", False):
            self._lane_bytes = tokenizer.token_bytes
            self._is_added = tokenizer.is_added
        if tokenizer is not None:
            key = self._hot_re.pattern if self._hot_re else None
            self._hot_texts = _HOT_TEXTS.setdefault(tokenizer, {}).setdefault(key, {})
            self._spaced_texts = _SPACED_TEXTS.setdefault(tokenizer, {}).setdefault(key, {})

    # ---- public ------------------------------------------------------------------------
    def feed(
        self,
        text: str | None = None,
        token_ids: Sequence[int] | None = None,
        logprobs: Sequence[TokenLogprob] | None = None,
    ) -> list[Event]:
        hot = self._hot
        if hot is not None:
            # The hot lane: the last delta took the fast lane into reasoning or content, and
            # nothing has happened since; the stages would then take any further delta
            # that has no character that can begin a marker and does not end in
            # whitespace the same way (`Engine.take_plain`), so it is taken here, and the
            # stages are told of the run at once when it ends (`_cool`). Whitespace at the
            # end of a delta is held back here as the field would hold it (`_spaced`).
            if token_ids is None:
                if text and (self._hot_re is None or self._hot_re.search(text) is None):
                    if text[-1] not in _WS:
                        hot.append(text)
                        self._hot_k += 1
                        return [self._hot_make(text)]
                    if self._hot_bare:
                        return self._spaced(hot, text)
            elif logprobs is None and len(token_ids) == 1 and self._hot_ids:
                tid = token_ids[0]
                text = self._hot_texts.get(tid)
                if text and tid not in self._hot_stops:  # (`_hot_id`, inline for speed)
                    hot.append(text)
                    self._hot_k += 1
                    return [self._hot_make(text)]
                got = self._hot_id(tid) if not text else None
                if got is not None:
                    return got
            self._cool()
        elif self._warm is not None:
            # the hot lane, holding back whitespace
            if token_ids is None:
                if text and (self._hot_re is None or self._hot_re.search(text) is None):
                    return self._spaced(self._warm, text)
            elif logprobs is None and len(token_ids) == 1:
                got = self._hot_id(token_ids[0])
                if got is not None:
                    return got
            self._cool()
        elif self._parked is not None:
            # the hot lane, holding the first bytes of a character
            if token_ids is not None and logprobs is None and len(token_ids) == 1:
                got = self._hot_id(token_ids[0])
                if got is not None:
                    return got
            self._cool()
        if self._done:
            raise ValueError("feed() after finish(): start a new StreamParser for a new output")
        if token_ids is not None:
            if self._detok is None:
                raise ValueError("token_ids need a tokenizer: StreamParser(..., tokenizer=load_tokenizer(DIR))")
            if logprobs is None and self._fast_lane:
                return self._feed_ids(token_ids)
            pieces = self._detok.feed(list(token_ids), list(logprobs) if logprobs is not None else None)
        elif text:
            events = self._plain(text, None) if self._fast_lane else None
            if events is not None:
                return events
            pieces = [Piece(text)]
        else:
            pieces = []
        return self._run(pieces)

    def take_id(self, tid: int) -> str | None:
        """`feed(token_ids=[tid])` where the hot lane takes `tid` (`_hot_id`): the same state, and
        the text of the deltas `feed` would return, joined, all of the kind `lane` names
        (``ReasoningDelta`` or ``ContentDelta``): more than one where whitespace the lane held
        back goes out before it, "" where it holds `tid`'s whitespace back. Also "" where `tid`
        only adds to the held arguments of a call (`_take_held_args`: `feed` would return no
        event). None anywhere else, nothing taken. For a caller that writes the text on without
        the delta objects (the server's stream): a stream encoder joins adjacent deltas of one
        kind into one, so the joined text is what it would write."""
        hot = self._hot
        if hot is None and self._warm is None and self._parked is None:
            return self._take_held_args(tid) if self._hot_ok else None
        if (not self._hot_ids and self._parked is not _IN_ARGS) or tid in self._hot_stops:
            return None  # (the held arguments' lane takes ids however it was opened)
        if hot is not None:
            text = self._hot_texts.get(tid)
            if text:  # (the usual id, as `feed` takes it inline)
                hot.append(text)
                self._hot_k += 1
                return text
        events = self._hot_id(tid)
        if events is None:
            return None
        return events[0].text if len(events) == 1 else "".join([e.text for e in events])

    def _take_held_args(self, tid: int) -> str | None:
        """`take_id` inside the arguments of a call that are held until it ends (no
        stream_arguments): where `feed(token_ids=[tid])` would only add `tid`'s text to them
        (the fast lane's `_plain` taking it as "region", with no event), it is taken so, and ""
        is returned (no delta); so is an id of a character cut over several (`_take_bytes`, whose
        last id adds the character). None anywhere else, nothing taken."""
        engine = self._engine
        if not engine.holds_args or self._logprobs or tid in self._hot_stops:
            return None
        text = self._detok.plain(tid) if self._detok is not None else None
        if not text:
            # the first bytes of a character cut over several ids: held as `_take_bytes` holds them,
            # where the detokenizer holds none (else they would come out before its own)
            detok = self._detok
            return "" if text is None and detok is not None and not detok.pending and self._take_bytes(tid) == [] else None
        stops = self._stops
        if stops is not None and not stops.passes(text, tid):
            return None
        lexer = self._lexer
        start = lexer.plain_start(text)
        if start is None or engine.take_plain(text, start) is None:
            return None
        lexer.took_plain(start, text)
        self._pos += len(text)
        return ""

    def finish(self, finish_reason: str | None = None) -> list[Event]:
        if self._done:
            return []
        self._cool()
        pieces = self._detok.finish() if self._detok is not None else []
        # A stop (token, string, or the engine's "stop") means the model ended the
        # output: an unfinished call is then malformed, not truncated.
        events = self._run(pieces, final=True, cut=finish_reason != "stop")
        self._done = True
        eng = self._engine
        if eng.truncated:
            reason = "length"
        elif eng.called:
            reason = "tool_calls"
        elif self.stopped:
            reason = "stop"
        else:
            reason = finish_reason or "stop"
        self._builder.finish_reason = reason
        return events

    @property
    def message(self) -> Message:
        return self._builder.message

    @property
    def finish_reason(self) -> str | None:
        return self._builder.finish_reason

    @property
    def stopped(self) -> bool:
        """A stop token or stop string ended the output."""
        return self._stops is not None and self._stops.stopped

    @property
    def stop_strings(self) -> bool:
        """Whether stop strings are matched (an output may then end inside a batch of ids)."""
        return self._stops is not None and bool(self._stops._stops)

    @property
    def stop_ids(self) -> frozenset[int]:
        """The token ids that end the output."""
        return self._hot_stops

    @property
    def stop_sequence(self) -> str | None:
        """The stop string that ended the output, if one did (not a stop token)."""
        reason = self._stops.stop_reason if self._stops is not None else None
        return reason if isinstance(reason, str) else None

    # ---- pipeline ----------------------------------------------------------------------
    def _feed_ids(self, token_ids: Sequence[int]) -> list[Event]:
        """Token ids without logprobs, each through the fast lane when it can take it."""
        detok = self._detok
        events: list[Event] = []
        for tid in token_ids:
            if self._hot is not None or self._warm is not None or self._parked is not None:
                got = self._hot_id(tid)
                if got is not None:
                    events += got
                    continue
                self._cool()
            text = detok.plain(tid)
            got = self._plain(text, tid) if text is not None else None
            events += self._run(detok.feed((tid,))) if got is None else got
        return events

    def _plain(self, text: str, token_id: int | None) -> list[Event] | None:
        """The fast lane: ordinary text (of one ordinary token `token_id`, or of a text
        delta) that only continues the open reasoning, content or argument string skips
        the pipeline's objects. The detokenizer, the stop conditions and the lexer each say
        whether they would pass the text unchanged and alone; the first that would not
        sends it the usual way (None). The engine then takes it as a segment, or by its
        own shortcut (`Engine.take_plain`). The same events and state as `_run`: the
        fixtures run every case through both."""
        if self._logprobs:
            return None
        stops = self._stops
        if stops is not None and not stops.passes(text, token_id):
            return None
        start = self._lexer.take_plain(text)
        if start is None:
            return None
        self._pos += len(text)
        engine = self._engine
        kind = engine.take_plain(text, start)
        if kind is None:
            # The lexer would have cut the text into this one segment: the engine takes it
            # the usual way (whitespace the field holds back, a label, a filter, ...).
            engine.segment(Text(text, start))
            return self._events() if engine.out else []
        if kind == "region":
            return self._events() if engine.out else []
        parts = self._builder.parts(kind)
        parts.append(text)
        make = _MAKE[kind]
        if self._hot_ok:
            self._hot, self._hot_make, self._hot_ids = parts, make, token_id is not None
            self._hot_bare, self.lane = engine.bare, kind
        return [make(text)]

    def _hot_id(self, tid: int) -> list[Event] | None:
        """The hot lane for one token id (see `feed`): its events, or None, nothing taken."""
        if (not self._hot_ids and self._parked is not _IN_ARGS) or tid in self._hot_stops:
            return None
        if self._parked is not None:
            return self._take_bytes(tid)
        text = self._hot_texts.get(tid)
        if text is None:
            # The lane's text of this id anywhere nothing is pending (the detokenizer's
            # plain text, with no marker character and no trailing whitespace), or "".
            text = self._detok.plain(tid) or ""
            if text and (text[-1] in _WS or (self._hot_re is not None and self._hot_re.search(text))):
                text = ""
            self._hot_texts[tid] = text
        hot = self._hot
        if text:
            if hot is None:
                return self._spaced(self._warm, text)
            hot.append(text)
            self._hot_k += 1
            return [self._hot_make(text)]
        if self._lane_bytes is not None and self._detok.plain(tid) is None:
            return self._take_bytes(tid)  # (a token of a character cut over several)
        if not self._hot_bare:
            return None
        text = self._spaced_texts.get(tid)
        if text is None:
            # the same for a text that ends in whitespace, or ""
            text = self._detok.plain(tid) or ""
            if not text or text[-1] not in _WS or (self._hot_re is not None and self._hot_re.search(text)):
                text = ""
            self._spaced_texts[tid] = text
        if not text:
            return None
        return self._spaced(hot if hot is not None else self._warm, text)

    def _take_bytes(self, tid: int) -> list[Event] | None:
        """The hot lane for an id of a byte-level vocabulary whose bytes end inside a character,
        or complete the one it holds (a CJK character or an emoji cut over two or three tokens):
        held, as the detokenizer holds them (no event), until the id that completes the character;
        then the text of all of them, the detokenizer's piece, is taken as the lane takes a token's
        text, or inside a call's held arguments (`_IN_ARGS`) added to them as `_take_held_args`
        adds a token's. None where the bytes are not valid UTF-8, the held ids are too many or the
        text is not the lane's (a marker character), nothing taken; `_cool` then hands the held ids
        to the detokenizer, which is then as if it had been fed them."""
        if self._lane_bytes is None or self._is_added(tid) or len(self._parked_ids) >= _MAX_PARKED:
            return None
        data = self._parked_bytes + self._lane_bytes(tid)
        parked = self._parked
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            if e.reason != "unexpected end of data" or e.end != len(data):
                return None  # (invalid: the detokenizer's replacement characters)
            if parked is None:  # the lane's first id of the character
                hot = self._hot if self._hot is not None else self._warm
                self._parked = hot if hot is not None else _IN_ARGS
                self._hot = self._warm = None
            self._parked_ids.append(tid)
            self._parked_bytes = data
            return []
        if parked is None or not text:
            return None
        if parked is _IN_ARGS:  # a character of a call's held arguments: added to them, no event
            lexer, engine = self._lexer, self._engine
            start = lexer.plain_start(text)
            if start is None or not engine.holds_args or engine.take_plain(text, start) is None:
                return None
            lexer.took_plain(start, text)
            self._pos += len(text)
            self._parked, self._parked_ids, self._parked_bytes = None, [], b""
            return []
        if (self._hot_re is not None and self._hot_re.search(text)) or (text[-1] in _WS and not self._hot_bare):
            return None  # (not the lane's text, by `_hot_id`'s rules)
        self._parked, self._parked_ids, self._parked_bytes = None, [], b""
        # back to the lane: `_spaced` takes any text as the lane would, hot or holding whitespace
        return self._spaced(parked, text)

    def _spaced(self, parts: list[str], text: str) -> list[Event]:
        """The hot lane for a delta that ends in whitespace, or follows whitespace it held
        back: what `FieldSink.write` does in a field that has begun (the lane is `bare`),
        whitespace at the end held until more text follows, each held piece its own delta. Any
        other text the lane takes it takes as the hot lane does (appended, one delta)."""
        body = text.rstrip(_WS)
        held = self._hot_held
        events: list[Event] = []
        if body:
            make = self._hot_make
            for ws in held:
                parts.append(ws)
                events.append(make(ws))
            parts.append(body)
            events.append(make(body))
            self._hot_k += len(held) + 1
            held.clear()
        if len(body) < len(text):
            held.append(text[len(body) :])
        if held:
            self._hot, self._warm = None, parts
        else:
            self._hot, self._warm = parts, None
        return events

    def _cool(self) -> None:
        """Leave the hot lane: the stages take the run of text it took as one delta of
        the fast lane, which changes their state as the deltas one by one would have, then
        the whitespace it held back, as segments, and the detokenizer the ids of a character
        it holds the first bytes of."""
        hot = self._hot if self._hot is not None else self._warm if self._warm is not None else self._parked
        k = self._hot_k
        self._hot, self._warm, self._parked, self._hot_k = None, None, None, 0
        if k:
            text = "".join(hot[-k:])
            start = self._lexer.take_plain(text)
            self._engine.take_plain(text, start)
            self._pos += len(text)
        if self._hot_held:
            held, self._hot_held = self._hot_held, []
            for ws in held:
                start = self._lexer.take_plain(ws)
                self._engine.segment(Text(ws, start))
                self._pos += len(ws)
        if self._parked_ids:  # the first bytes of a character: the detokenizer holds them now
            ids, self._parked_ids, self._parked_bytes = self._parked_ids, [], b""
            self._detok.feed(ids)  # (no piece: the character is not whole)

    def _run(self, pieces: list[Piece], final: bool = False, cut: bool = True) -> list[Event]:
        if self._stops is not None:
            pieces = self._stops.feed(pieces)
            if final:
                pieces += self._stops.finish()
        lexer, engine = self._lexer, self._engine
        for piece in pieces:
            if piece.logprobs:
                self._logprobs.append((self._pos, self._pos + len(piece.text), piece.logprobs))
            self._pos += len(piece.text)
            for seg in lexer.feed(piece):
                engine.segment(seg)
        if final:
            for seg in lexer.finish():
                engine.segment(seg)
            engine.finish(cut=cut and not self.stopped)
        return self._events()

    def _events(self) -> list[Event]:
        out = self._engine.out
        raw = out[:]
        out.clear()
        events: list[Event] = []
        for item in raw:
            if isinstance(item, tuple):
                kind, text, start, end = item
                lp = self._claim(start, end) if self._logprobs else None
                item = ReasoningDelta(text, lp) if kind == "reasoning" else ContentDelta(text, lp)
            events.append(item)
            self._builder.apply(item)
        return events

    def _claim(self, start: int, end: int) -> tuple[TokenLogprob, ...] | None:
        """Logprobs of the tokens whose text overlaps [start, end) and were not yet
        claimed; tokens wholly before `start` produced no visible text: dropped."""
        q = self._logprobs
        while q and q[0][1] <= start:
            q.popleft()
        got: list[TokenLogprob] = []
        while q and q[0][0] < end:
            got.extend(q.popleft()[2])
        return tuple(got) or None


def parse(
    text: str | None = None,
    format: str | FormatSpec | None = None,
    *,
    token_ids: Sequence[int] | None = None,
    logprobs: Sequence[TokenLogprob] | None = None,
    finish_reason: str | None = None,
    **options: Any,
) -> Message:
    """Parse a whole model output (text, or token ids with `tokenizer=`) into a Message."""
    if format is None:
        raise TypeError(f"parse() needs a format, e.g. format='gemma4'; known: {', '.join(formats.names())}")
    p = StreamParser(format, **options)
    p.feed(text, token_ids, logprobs)
    p.finish(finish_reason)
    return p.message
