"""OpenAI gpt-oss (the harmony format): messages `<|start|>ROLE<|channel|>CHANNEL
<|message|>BODY<|end|>`, `analysis` as reasoning, calls addressed `to=functions.NAME`.

The header grammar (role, channel, recipient, content type between `<|start|>`,
`<|channel|>`, `<|constrain|>` and `<|message|>`) is beyond the shared state machine,
so this family brings an Engine subclass; it reuses the engine's field sinks, call
regions (`_drain`) and diagnostics.
"""

from __future__ import annotations

from ..args.base import CallContext, Fail, RegionCodec, valid_function_name
from ..args.harmony import HarmonyArgsCodec
from ..engine import Engine, FieldSink
from ..events import Dropped
from ..lexer import Marker, Segment, Text
from ..spec import FormatSpec

START, CHANNEL, MESSAGE, CONSTRAIN = "<|start|>", "<|channel|>", "<|message|>", "<|constrain|>"
END, CALL, RETURN = "<|end|>", "<|call|>", "<|return|>"
MAX_HEADER = 512  # longer headers are malformed: the header is never re-scanned, but bounded

HEADER, BODY, SKIP, DONE = "header", "body", "skip", "done"
REASONING, CONTENT, CALLBODY, DROP = "reasoning", "content", "call", "drop"

_WS = " \t\r\n"
_ROLE_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-:=/ \t\r\n")
_FUNCTIONS = "functions."


def _maybe_role_token(tok: str, length: int) -> bool:
    """A token the output may put where the role goes (`assistant`, `to=functions.f`),
    judged on its first 10 characters and its length."""
    if length <= 9 and ("assistant".startswith(tok) or "to=".startswith(tok)):
        return True
    return tok.startswith("to=")


class HarmonyEngine(Engine):
    """The harmony message grammar over the shared engine's sinks and call regions.

    Header states: an *explicit* header follows `<|start|>` or `<|channel|>`; an
    *implicit* one is text where a header may be but no marker said so (the output's
    start, after a message end). Text there that cannot be a header is content at
    the output's start (a model answering without channels) and a reported stray
    between messages.
    """

    # the markers the header grammar reads (a harmony-like family, Muse Glimmer, sets its own;
    # NEVER stands for one it has not)
    START, CHANNEL, MESSAGE, CONSTRAIN = START, CHANNEL, MESSAGE, CONSTRAIN
    MESSAGE_ENDS = (END, CALL)  # end a message; a header follows
    RETURN = RETURN  # ends the turn (besides the format's `end` markers)


    def _start_state(self, prompt: str | None) -> None:
        self._prompt = prompt

    def __init__(self, spec: FormatSpec, **kw) -> None:
        super().__init__(spec, **kw)
        self._end_set = frozenset(spec.end)
        self._strip_set = frozenset(spec.strip)
        self._initial = True  # no message body has begun yet
        self._sink: FieldSink | None = None
        self._join = False  # the open message's first text needs a newline before it
        self._kind = ""
        self._drop: list[str] = []
        self._drop_why = ""
        self._skip: list[str] = []
        self._skip_why = ""
        self._analysis_open = False  # an analysis body was cut by a new header, not ended
        self._message_at = 0  # where the current message's body began (`<|message|>`)
        self._body_ends = frozenset((self.START, self.CHANNEL, *self.MESSAGE_ENDS, *spec.end))
        self._suspect_seg: Segment | None = None  # the body end a string took (Engine._suspect)
        self._new_header(explicit=False)
        self._from_prompt(self._prompt)

    def _from_prompt(self, prompt: str | None) -> None:
        """The prompt may end inside a message: after `<|start|>assistant` (the usual
        generation prompt), inside a header, or after `<|message|>` (a forced channel)."""
        if not prompt:
            return
        at = prompt.rfind(self.START)
        if at < 0:
            return
        tail = prompt[at + len(self.START) :]
        if any(m in tail for m in (*self.MESSAGE_ENDS, self.RETURN)):
            return
        head, sep, _body = tail.partition(self.MESSAGE)
        role, has_channel, chan = head.partition(self.CHANNEL)
        self._role = [role.replace(self.CONSTRAIN, " ")]
        self._tok, self._toklen = "", 0
        if has_channel:
            self._chan = [chan.rpartition(self.CHANNEL)[2].replace(self.CONSTRAIN, " ")]  # the last one wins
            self._explicit = True
        else:
            self._explicit = not self._role_plausible(self._role[0])
        self._hraw = [self.START + head]
        if sep:
            self._open_body()

    # ---- input ---------------------------------------------------------------------
    def segment(self, seg: Segment) -> None:
        if self._suspect is not None:
            self._suspect.append(seg)
        if isinstance(seg, Text):
            if seg.text:
                self._text(seg.text, seg.start)
        else:
            self._marker(seg)
        self._read_again()

    @property
    def holds_args(self) -> bool:
        return self._mode == BODY and self._kind == CALLBODY and not self.stream_arguments

    def take_plain(self, text: str, start: int) -> str | None:
        """Fast lane (see `Engine.take_plain`): text inside a reasoning or content body
        whose field has begun and holds no whitespace, or inside an argument string."""
        if self._mode != BODY or not text:
            return None
        kind = self._kind
        if kind == CALLBODY:
            if self._suspect is not None:
                return None  # the call's ops are held until it ends or fails
            json_text = self._region.plain(text)
            if json_text is None:
                return None
            self._raw.append(text)
            self._args(json_text)
            return "region"
        if kind == DROP:
            return None
        sink = self._sink
        if self._join or not sink.started or sink._held or text[-1] in _WS:
            return None  # a message's first text may need the newline that joins it
        return kind

    def _text(self, text: str, start: int) -> None:
        mode = self._mode
        if mode == BODY:
            self._body_text(text, start)
        elif mode == HEADER:
            self._header_text(text, start)
        elif mode == SKIP:
            self._skip.append(text)
        else:
            self._after_end.append(text)

    def _marker(self, seg: Marker) -> None:
        m = seg.text
        mode = self._mode
        if mode == DONE:
            if m not in self._end_set and m not in self._strip_set:
                self._after_end.append(m)
            return
        if not seg.known:
            self.out.append(Dropped(m, "control token this format does not use"))
            return
        if mode == BODY and self._kind == CALLBODY and self._region.marker(m):
            if m in self._body_ends and self._suspect is None and self._region.in_call:
                # A body's end taken as string text (text mode): held until the call
                # completes (it was text) or fails (the body ended here; `_suspect_ended`).
                self._suspect = []
                self._suspect_seg = seg
                self._suspect_raw = len(self._raw)
            self._raw.append(m)
            self._drain()
            return
        if m in self._strip_set:
            return
        if mode == HEADER:
            if m == self.CHANNEL:
                self._hraw.append(m)
                self._explicit = True
                self._chan = []  # a repeated channel: the last one wins (`commentary<|channel|>final`)
                return
            if m == self.CONSTRAIN:
                self._hraw.append(m)
                self._explicit = True
                self._header_add(" ", m, seg.start)
                return
            if m == self.MESSAGE:
                self._hraw.append(m)
                self._message_at = seg.start
                self._open_body()
                return
        elif mode == SKIP and m in (self.MESSAGE, self.CONSTRAIN):
            self._skip.append(m)
            if m == self.MESSAGE:
                raw, self._skip = "".join(self._skip), []
                self._begin_drop([raw], self._skip_why)
            return
        elif mode == BODY and m in (self.MESSAGE, self.CONSTRAIN):
            if self._kind == CALLBODY:
                self._raw.append(m)
            self.out.append(Dropped(m, f"{m} out of place inside a message; removed"))
            return
        # a marker that ends what came before: a message, a header, a stray
        cut_analysis = mode == BODY and self._kind == REASONING
        self._end_current(truncated=False)
        if self._rerun:
            return  # the call's body had ended at a held marker: this one is read again after it
        self._analysis_open = cut_analysis and m in (self.START, self.CHANNEL)
        if m == self.START:
            self._new_header(explicit=True)
            self._hraw.append(m)
        elif m == self.CHANNEL:  # a message with no `<|start|>`: its header starts here
            self._new_header(explicit=True)
            self._hraw.append(m)
            self._chan = []
        elif m in self.MESSAGE_ENDS:
            self._new_header(explicit=False)
        else:  # RETURN and the family's other end markers
            self._mode = DONE

    # ---- headers -------------------------------------------------------------------
    def _new_header(self, *, explicit: bool) -> None:
        self._mode = HEADER
        self._explicit = explicit
        self._role: list[str] = []
        self._chan: list[str] | None = None
        self._hraw: list[str] = []
        self._hlen = 0
        self._held: list[tuple[str, int]] = []  # the output's text of an implicit header
        self._tok = ""  # the role token being read (first 10 characters) and its length
        self._toklen = 0

    def _header_text(self, text: str, start: int) -> None:
        room = MAX_HEADER - self._hlen
        if len(text) > room:
            if room > 0:
                self._header_text(text[:room], start)
                if self._mode != HEADER:
                    self._text(text[room:], start + room)
                    return
            self._header_overflow(text[room:] if room > 0 else text, start + max(room, 0))
            return
        if not self._explicit and self._chan is None and not self._role_plausible(text):
            self._not_a_header(text, start)
            return
        self._header_add(text, text, start)

    def _header_add(self, text: str, raw: str, start: int) -> None:
        (self._role if self._chan is None else self._chan).append(text)
        if raw is text:
            self._hraw.append(text)
            self._held.append((text, start))
        self._hlen += len(text)

    def _role_plausible(self, text: str) -> bool:
        """Feed the implicit header's role text to the token check; False at the
        first character that cannot be part of `assistant to=functions.NAME`."""
        tok, n = self._tok, self._toklen
        for c in text:
            if c not in _ROLE_CHARS:
                return False
            if c in _WS:
                tok, n = "", 0
                continue
            if n < 10:
                tok += c
            n += 1
            if not _maybe_role_token(tok, n):
                return False
        self._tok, self._toklen = tok, n
        return True

    def _not_a_header(self, text: str, start: int) -> None:
        """The implicit header's text turned out to be plain text."""
        held = self._held
        if self._initial:
            self._begin_field(CONTENT)
            for t, s in held:
                self._sink.write(t, s)
            self._sink.write(text, start)
        else:
            self._mode = SKIP
            self._skip = [t for t, _ in held] + [text]
            self._skip_why = "text between messages; not shown"

    def _header_overflow(self, rest: str, start: int) -> None:
        if not self._explicit and self._chan is None:
            self._not_a_header(rest, start)
            return
        self._mode = SKIP
        self._skip = [*self._hraw, rest]
        self._skip_why = f"message header longer than {MAX_HEADER} characters; message not shown"

    def _parse_header(self) -> tuple[str | None, str | None, str | None]:
        """(role, channel, recipient); `to=X` may follow the role or the channel."""
        role = channel = recipient = None
        for tok in "".join(self._role).split():
            if tok.startswith("to="):
                recipient = tok[3:]
            elif role is None:
                role = tok
        for tok in "".join(self._chan or ()).split():
            if tok.startswith("to="):
                recipient = tok[3:]
            elif channel is None:
                channel = tok
        return role, channel, recipient

    # ---- bodies --------------------------------------------------------------------
    def _open_body(self) -> None:
        self._initial = False
        analysis_open, self._analysis_open = self._analysis_open, False
        role, channel, recipient = self._parse_header()
        raw = self._hraw
        if role not in (None, "assistant"):
            self._begin_drop(raw, f"a message from {role!r}, not the assistant; not shown")
        elif recipient is not None and recipient.startswith(_FUNCTIONS) and channel != "final":
            if analysis_open:
                # The analysis message was never ended (`<|end|>`): a call header inside
                # it is the model thinking about a call, not making one.
                why = "call header inside an unfinished analysis message; not a call"
                self.out.append(Dropped("".join(raw), why))
                self._begin_field(REASONING)
                return
            name = recipient[len(_FUNCTIONS) :]
            if not valid_function_name(name, self._tools):
                self._begin_drop(raw, f"tool call not executed: invalid function name {name!r}")
                return
            self._mode = BODY
            self._kind = CALLBODY
            self._region = HarmonyArgsCodec(CallContext(self._tools, gated=self.gated), name)
            self._raw = list(raw)
            self._drain()
        elif recipient is not None:
            self._begin_drop(
                raw, f"a message to {recipient!r} on channel {channel!r} is not a function call; not shown"
            )
        else:
            self._begin_field(REASONING if channel == "analysis" else CONTENT)

    def _begin_field(self, kind: str) -> None:
        self._initial = False
        self._mode = BODY
        self._kind = kind
        self._sink = self._reasoning if kind == REASONING else self._content
        # several analysis messages, or several visible ones (a commentary preamble, the
        # final answer): never glued. A newline goes between them unless whitespace already
        # does (written with the message's first text: a message that brings none adds none)
        self._join = self._sink.started and not self._sink._held

    def _begin_drop(self, raw: list[str], why: str) -> None:
        self._mode = BODY
        self._kind = DROP
        self._drop = list(raw)
        self._drop_why = why

    def _body_text(self, text: str, start: int) -> None:
        kind = self._kind
        if kind == CALLBODY:
            self._region.feed(text)
            self._raw.append(text)
            self._drain()
        elif kind == DROP:
            self._drop.append(text)
        else:
            if self._join and text:
                self._join = False
                if text[0] not in _WS:
                    self._sink.write("\n", start)
            self._sink.write(text, start)

    def _end_current(self, *, truncated: bool) -> None:
        """Close whatever is open: a message body, a header, a stray."""
        mode = self._mode
        if mode == BODY:
            if self._kind == CALLBODY:
                self._region.close(truncated=truncated)
                self._drain()
                self._region = None
            elif self._kind == DROP:
                self.out.append(Dropped("".join(self._drop), self._drop_why))
                self._drop = []
            self._kind = ""
            self._sink = None
        elif mode == HEADER:
            if self._explicit:
                raw = "".join(self._hraw)
                self.out.append(Dropped(raw, "message header without <|message|>; message not shown"))
                if truncated:
                    self.truncated = True
            elif self._held and "".join(t for t, _ in self._held).strip(_WS):
                if self._initial:
                    self._not_a_header("", 0)
                    self._end_current(truncated=truncated)
                    return
                self.out.append(
                    Dropped("".join(t for t, _ in self._held), "text between messages; not shown")
                )
        elif mode == SKIP:
            raw = "".join(self._skip)
            self._skip = []
            if raw.strip(_WS):
                self.out.append(Dropped(raw, self._skip_why))

    def _suspect_ended(self, region: RegionCodec) -> None:
        """The call failed after a body end it took as string text: the body ended there.
        The call is malformed; the marker and what followed it are read again."""
        rerun, self._suspect, self._suspect_ops = self._suspect, None, []
        seg, self._suspect_seg = self._suspect_seg, None
        self._raw = self._raw[: self._suspect_raw]
        self._apply([Fail(f"unterminated string: {seg.text} ended the call inside it")])
        self._region = None
        self._kind = ""  # the body is over; the marker says what comes next
        self._rerun = [seg, *rerun, *self._rerun]

    # ---- end -----------------------------------------------------------------------
    def finish(self, *, cut: bool = True) -> None:
        while self._mode != DONE:
            self._end_current(truncated=cut)
            if not self._rerun:  # else a call failed after a suspected end: read on from there
                self._mode = DONE
            self._read_again()
        self._content.finish()
        self._reasoning.finish()
        rest = "".join(self._after_end)
        if rest.strip():
            self.out.append(Dropped(rest, "text after the end of the turn"))


GPT_OSS = FormatSpec(
    name="gpt_oss",
    description="OpenAI gpt-oss (harmony channels; analysis is reasoning)",
    aliases=("gpt-oss", "gptoss", "harmony", "openai_harmony"),
    default_thinking=True,
    inner=(START, CHANNEL, MESSAGE, CONSTRAIN, END, CALL),
    end=(RETURN, "<|endoftext|>"),
    strip=("<|startoftext|>", "<|endofprompt|>"),
    template="gpt-oss/chat_template.jinja",
    reasoning_doc="the `analysis` channel",
    calls_doc="`<|start|>assistant to=functions.NAME<|channel|>commentary <|constrain|>json<|message|>{json}"
    "<|call|>`; other recipients are not calls",
    tokenizer_doc="gpt-oss",
    engine=HarmonyEngine,
)

SPECS = (GPT_OSS,)
