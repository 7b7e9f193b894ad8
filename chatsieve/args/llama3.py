"""Runs of `{"name", "arguments"|"parameters"}` call objects with a separator:
`{…}; {…}` (Llama 3.x JSON tool calls) or `[{…}, {…}]` (Mistral before v11).

Each object is read by JsonCallCodec. Without brackets, objects are separated by the
separator (spaces around it allowed) or by a line break; anything else after an object
ends the calls, and the region ends itself there, giving back the whitespace it held
(text after a call keeps it). An object after a line break is a call only once it
names a tool (any name when no tools are given); until then it may be content, and if
it is not a call it goes back to the engine whole. With brackets the region ends after
`]`. Opened by plain text (tentative), the run is a call only once its first object
names a tool of the request -- with no tools given, never.
"""

from __future__ import annotations

from . import json_call
from .base import CallContext, RegionCodec, Start
from .pythonic import PythonicCallCodec

_WS = " \t\r\n"

# states
OPEN, FIRST, OBJECT, AFTER, NEXT, DONE = range(6)


class _CallObject(json_call.JsonCallCodec):
    """One call object that stops reading right after its closing brace."""

    until_object_end = True


class JsonCallSequence(RegionCodec):
    """Call objects separated by `sep`, optionally inside `[` `]`."""

    sep = ";"
    brackets = False
    call_object: type[json_call.JsonCallCodec] = _CallObject  # reads one object; ends at its `}`

    def __init__(self, ctx: CallContext) -> None:
        super().__init__(ctx)
        self._st = OPEN if self.brackets else FIRST
        self._obj: _CallObject | None = None
        self._error: str | None = None
        self._gap = ""  # whitespace after an object, held until what follows decides
        self._probe: list[str] | None = None  # the text of an object after a line break, undecided

    # ---- interface ---------------------------------------------------------------------
    def feed(self, text: str) -> int:
        i, n = 0, len(text)
        while i < n:
            st = self._st
            if self._error is not None:
                return n  # swallowed: reported with the failed call
            if st == DONE:
                return i
            if st == OBJECT:
                used = self._obj.feed(text[i:])
                if self._probe is not None:
                    self._probe.append(text[i : i + used])
                i += used
                self._pull()
                if self._probe is not None and self._obj.verdict is False:
                    # not a call after all: the line break and the object are content
                    self.give_back = "".join(self._probe)
                    self._probe = self._obj = None
                    self._st = DONE
                    return i
                if self._obj.complete:
                    self._obj.close(truncated=False)
                    self._pull()
                    self._obj = None
                    self._st = AFTER
                continue
            c = text[i]
            if st == AFTER and not self.brackets:
                j = i
                while j < n and text[j] in _WS:
                    j += 1
                self._gap += text[i:j]
                i = j
                if i == n:
                    break
                if text[i] == self.sep:
                    self._gap = ""
                    self._st = NEXT
                    i += 1
                elif text[i] == "{" and "\n" in self._gap:
                    self._probe = [self._gap]
                    self._gap = ""
                    self._obj = self.call_object(CallContext(self.ctx.tools, tentative=True))
                    self._st = OBJECT
                else:
                    # the calls are over; what comes next, whitespace included, is the
                    # engine's again
                    self.give_back, self._gap = self._gap, ""
                    self._st = DONE
                    return i
                continue
            if c in _WS:
                i += 1
                continue
            if st == OPEN:
                if c != "[":
                    self._err(f"expected '[' to open the call list, found {c!r}")
                    continue
                self._st = FIRST
            elif st in (FIRST, NEXT):
                if c == "{":
                    self._obj = self.call_object(CallContext(self.ctx.tools))
                    self._st = OBJECT
                    continue
                if c == "]" and self.brackets:
                    self._st = DONE
                elif st == NEXT and not self.brackets:
                    # `{…}; prose`: the separator belonged to no call; the region ends
                    self.junk(self.sep, "separator with no call after it")
                    self._st = DONE
                    return i
                else:
                    self._err(f"expected a call object, found {c!r}")
                    continue
            elif st == AFTER:
                if c == self.sep:
                    self._st = NEXT
                elif c == "]" and self.brackets:
                    self._st = DONE
                else:
                    self._err(f"expected {self.sep!r} or ']' after a call object, found {c!r}")
                    continue
            i += 1
        return n

    def marker(self, marker: str) -> bool:
        if self._st == OBJECT and self._error is None:
            if self._probe is not None and self._obj.verdict is None:
                self._drop_probe()  # a control token before it named a tool: not a call
                return False
            used = self._obj.marker(marker)
            self._pull()
            return used
        return False

    def close(self, *, truncated: bool) -> None:
        if self._probe is not None and self._obj.verdict is None:
            self._drop_probe()
        if self._st == OBJECT:
            self._obj.close(truncated=truncated)
            self._pull()
            self._obj = None
        if self._error is not None:
            self.fail(self._error)
        elif self._st == NEXT and not self.brackets:
            self.junk(self.sep, "separator with no call after it")
        elif self.brackets and self._st in (FIRST, NEXT):  # a missing `]` alone is forgiven
            self.fail("the output ended inside the call list", truncated=truncated)
        if self.verdict is None:
            self.verdict = False

    @property
    def idle(self) -> bool:
        return self._st in (OPEN, FIRST, DONE) and not self.in_call

    # ---- helpers ---------------------------------------------------------------------------
    def _drop_probe(self) -> None:
        """An object after a line break that the output's end or a control token cut
        before it named a tool: never a call; it goes back to the engine."""
        self.give_back = "".join(self._probe)
        self._probe = self._obj = None
        self._st = DONE

    def _pull(self) -> None:
        """Take over the current object's ops; decide a tentative region at its name."""
        obj = self._obj
        ops, obj.ops = obj.ops, []
        if self._probe is not None:
            if obj.verdict is not True:
                return  # nothing comes out before the name decides
            self._probe = None  # it named a tool: a call
        self.in_call = obj.in_call
        if self.verdict is None:
            for op in ops:
                name = getattr(op, "name", None)
                if name is not None:
                    # an explicit call marker (`functools[`) never depends on declared tools;
                    # a bare JSON reply (`{`, `[`) is a call only when it names one
                    opener = (self.ctx.opener or "").lstrip()
                    self.verdict = name in self.ctx.tools or opener[:1] not in ("", "{", "[")
                    break
            else:
                if obj.failed:
                    self.verdict = False
        self.ops.extend(ops)

    def _err(self, why: str) -> None:
        self._error = why
        if self.verdict is None:
            self.verdict = False


class Llama3JsonCodec(JsonCallSequence):
    """Llama 3.x: `{"name": …, "parameters": {…}}` objects separated by `;`; after
    `<|python_tag|>` also Llama 3.1's built-in tool calls, `brave_search.call(query="…")`
    (read by the pythonic codec; the tool's name loses its `.call`)."""

    sep = ";"
    brackets = False

    def __init__(self, ctx: CallContext) -> None:
        super().__init__(ctx)
        self._builtin: PythonicCallCodec | None = None

    def feed(self, text: str) -> int:
        if self._builtin is None and self._st == FIRST and self._error is None and not self.ctx.tentative:
            head = text.lstrip(_WS)[:1]
            if head.isalpha() or head == "_":
                self._builtin = PythonicCallCodec(CallContext(self.ctx.tools))
        if self._builtin is None:
            return super().feed(text)
        used = self._builtin.feed(text)
        self._pull_builtin()
        self.give_back = self._builtin.give_back
        return used

    def marker(self, marker: str) -> bool:
        if self._builtin is None:
            return super().marker(marker)
        used = self._builtin.marker(marker)
        self._pull_builtin()
        self.give_back = self._builtin.give_back
        return used

    def close(self, *, truncated: bool) -> None:
        if self._builtin is None:
            super().close(truncated=truncated)
            return
        self._builtin.close(truncated=truncated)
        self._pull_builtin()
        self.give_back = self._builtin.give_back

    def _pull_builtin(self) -> None:
        codec = self._builtin
        ops, codec.ops = codec.ops, []
        self.in_call = codec.in_call
        for op in ops:
            if isinstance(op, Start):
                op = Start(op.name.removesuffix(".call"), op.native_id)
            self.ops.append(op)
