"""Codecs that pick another codec by how a call region begins, and call lists behind
a literal prefix: `[{…}]` or a lone `{…}` (xLAM, Nemotron, Jamba, Apriel, Granite),
JSON or pythonic lists (LFM2), `functools[…]` (Phi-4-mini).

They hold the region's first characters until its shape is known, then hand all of
it to the chosen codec and pass its ops, verdict and state through.
"""

from __future__ import annotations

from collections.abc import Callable

from .base import CallContext, RegionCodec
from .mistral import MistralCallList, MistralCallObjects
from .pythonic import PythonicCallCodec

_WS = " \t\r\n"

# what a region's first characters say: a codec class, None (need more text)
Chooser = Callable[[str], "type[RegionCodec] | None"]


class WrappingCodec(RegionCodec):
    """A codec that hands its region to another (`_inner`) and passes through what that
    one reports: its ops, whether a call is open, its verdict and any text it gives back."""

    _inner: RegionCodec | None = None

    def marker(self, marker: str) -> bool:
        if self._inner is None:
            return False
        used = self._inner.marker(marker)
        self._pull()
        return used

    def _pull(self) -> None:
        inner = self._inner
        ops, inner.ops = inner.ops, []
        self.ops.extend(ops)
        self.in_call = inner.in_call
        if self.verdict is None:
            self.verdict = inner.verdict
        if inner.give_back:  # the inner codec ended and some of its text is the engine's
            self.give_back, inner.give_back = inner.give_back, ""


class DispatchCodec(WrappingCodec):
    """Subclass with a `choose(head)` static method: given the region's text so far
    (leading whitespace included), return the codec class, or None to wait."""

    choose: Chooser

    def __init__(self, ctx: CallContext) -> None:
        super().__init__(ctx)
        self._inner: RegionCodec | None = None
        self._head = ""

    def feed(self, text: str) -> int:
        if self._inner is not None:
            used = self._inner.feed(text)
            self._pull()
            return used
        head = self._head + text
        cls = type(self).choose(head)
        if cls is None:
            self._head = head
            return len(text)
        self._inner = cls(self.ctx)
        self._head = ""
        used = self._inner.feed(head)
        self._pull()
        # the held head was all used (a codec reads at least its opening); what it
        # did not use belongs to this text
        return max(used - (len(head) - len(text)), 0)


    def close(self, *, truncated: bool) -> None:
        if self._inner is None:
            if self._head.strip(_WS):
                # too little to know the shape: not a call
                if self.verdict is None:
                    self.verdict = False
                    return
                self.fail(
                    "the output ended at the start of the call" if truncated else "no call in the block",
                    truncated=truncated,
                )
            elif self.verdict is None:
                self.verdict = False
            return
        self._inner.close(truncated=truncated)
        self._pull()

    @property
    def idle(self) -> bool:
        return self._inner.idle if self._inner is not None else not self._head.strip(_WS)



def _first(head: str, skip: str = "") -> str | None:
    """The first character of `head` after whitespace (and `skip` characters)."""
    for c in head:
        if c not in _WS and c not in skip:
            return c
    return None


def _choose_list_or_object(head: str) -> type[RegionCodec] | None:
    c = _first(head)
    if c is None:
        return None
    return MistralCallList if c == "[" else MistralCallObjects


class JsonCallsCodec(DispatchCodec):
    """`[{"name", "arguments"}, …]`, or one `{…}` (or `{…}, {…}`) without brackets."""

    choose = staticmethod(_choose_list_or_object)


def _choose_json_or_pythonic(head: str) -> type[RegionCodec] | None:
    c = _first(head)
    if c is None:
        return None
    if c == "[":
        inner = _first(head[head.index("[") + 1 :])
        if inner is None:
            return None
        return MistralCallList if inner == "{" else PythonicCallCodec
    return MistralCallObjects if c == "{" else PythonicCallCodec


class JsonOrPythonicCodec(DispatchCodec):
    """A pythonic call list `[f(a=1), g()]`, or the same calls as a JSON list
    `[{"name", "arguments"}]` (LFM2 writes either)."""

    choose = staticmethod(_choose_json_or_pythonic)


class PrefixedCodec(WrappingCodec):
    """A literal `prefix` (e.g. Phi-4-mini's `functools`) and then what `body` reads.
    Opened by the prefix as plain text, so the region's first characters are it."""

    prefix: str
    body: type[RegionCodec]

    def __init__(self, ctx: CallContext) -> None:
        super().__init__(ctx)
        self._matched = 0
        self._inner: RegionCodec | None = None
        self._error: str | None = None

    def feed(self, text: str) -> int:
        i = 0
        if self._inner is None:
            p = self.prefix
            while i < len(text) and self._matched < len(p):
                if self._matched == 0 and text[i] in _WS:
                    i += 1
                    continue
                if text[i] != p[self._matched]:
                    self._error = f"expected {p!r}"
                    if self.verdict is None:
                        self.verdict = False
                    return len(text)
                self._matched += 1
                i += 1
            if self._matched < len(p):
                return len(text)
            self._inner = self.body(self.ctx)
            if i == len(text):
                return i
        used = self._inner.feed(text[i:])
        self._pull()
        return i + used


    def close(self, *, truncated: bool) -> None:
        if self._inner is None:
            if self.verdict is None:
                self.verdict = False
            elif self._matched:
                self.fail(
                    self._error or "the output ended inside the call", truncated=truncated and not self._error
                )
            return
        self._inner.close(truncated=truncated)
        self._pull()

    @property
    def idle(self) -> bool:
        return self._inner.idle if self._inner is not None else self._matched == 0



def prefixed_codec(name: str, prefix: str, body: type[RegionCodec]) -> type[PrefixedCodec]:
    """A codec class reading `prefix` then `body` (what a FormatSpec's `codec` takes)."""
    return type(name, (PrefixedCodec,), {"prefix": prefix, "body": body})


class RepeatedCodec(WrappingCodec):
    """Calls of `body` one after another until the region's end marker: each time
    the body codec ends itself, a new one reads what follows (OLMo 3's
    newline-separated pythonic calls)."""

    body: type[RegionCodec]

    def __init__(self, ctx: CallContext) -> None:
        super().__init__(ctx)
        self._inner = self.body(ctx)

    def feed(self, text: str) -> int:
        i = 0
        while True:
            used = self._inner.feed(text[i:])
            self._pull()
            i += used
            if i >= len(text) or self.give_back:
                return i  # all read, or the calls are over and some text goes back
            if not text[i:].strip(_WS) or self.verdict is not True:
                return i  # only whitespace left, or an undecided tentative region
            self._inner = self.body(CallContext(self.ctx.tools, opener=self.ctx.opener))


    def close(self, *, truncated: bool) -> None:
        self._inner.close(truncated=truncated)
        self._pull()

    @property
    def idle(self) -> bool:
        return self._inner.idle



def repeated_codec(name: str, body: type[RegionCodec]) -> type[RepeatedCodec]:
    return type(name, (RepeatedCodec,), {"body": body})
