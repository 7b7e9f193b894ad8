"""A call written as its name, a terminator, then a JSON arguments object:
Functionary v3.1's `<function=NAME>{…}` (after its prefix) and v3.2's `NAME\\n{…}`.

The region ends itself right after the object. A `content_name` (v3.2's `all`)
names no function: the region ends after the name and what follows is content.
"""

from __future__ import annotations

import re

from .base import CallContext, RegionCodec
from .json import JsonScanner

_WS = " \t\r\n"
_NAME = re.compile(r"[\w.\-:]+")
_NAME_RUN = re.compile(r"[\w.\-:]*")
_MAX_NAME = 256

NAME, ARGS_START, ARGS, DONE = range(4)


class NamedJsonCodec(RegionCodec):
    """Subclass with `terminator` (the character that ends the name) and optionally
    `content_name`."""

    terminator = ">"
    content_name: str | None = None
    # the name follows the opener directly: anything else means the opener was text
    # (the region ends there, the opener is reported, what follows is content again)
    strict_name = False

    def __init__(self, ctx: CallContext) -> None:
        super().__init__(ctx)
        self._st = NAME
        self._name: list[str] = []
        self._len = 0
        self._sc: JsonScanner | None = None
        self._error: str | None = None
        self._calls = 0

    def feed(self, text: str) -> int:
        i, n = 0, len(text)
        while i < n:
            if self._error is not None:
                return n  # swallowed: reported with the failed call
            st = self._st
            if st == DONE:
                # whitespace after the object stays in the region (a close tag may follow)
                while self._calls and i < n and text[i] in _WS:
                    i += 1
                return i
            if st == NAME and self.strict_name:
                j = _NAME_RUN.match(text, i).end()
                self._name.append(text[i:j])
                self._len += j - i
                if j == n:
                    return n
                if text[j] == self.terminator and self._len and self._len <= _MAX_NAME:
                    if self._name_done():
                        return j + 1
                    i = j + 1
                    continue
                raw = (self.ctx.opener or "") + "".join(self._name)
                self.junk(raw, f"{raw!r} is not followed by a recipient name; not a call")
                self._st = DONE
                if self.verdict is None:
                    self.verdict = False
                return j
            if st == NAME:
                j = text.find(self.terminator, i)
                part = text[i : n if j < 0 else j]
                self._name.append(part)
                self._len += len(part)
                if self._len > _MAX_NAME:
                    self._err("no valid function name")
                    continue
                if j < 0:
                    if self.verdict is None and not _NAME.fullmatch("".join(self._name).lstrip(_WS) or "x"):
                        self._err("no valid function name")
                    return n
                i = j + 1
                if self._name_done():
                    return i  # a content recipient: the rest is content
                continue
            if st == ARGS:
                i += self._sc.feed(text[i:])
                self.args(self._sc.take())
                if self._sc.error:
                    self._err(f"invalid JSON arguments: {self._sc.error}")
                elif self._sc.done:
                    self.end()
                    self._calls += 1
                    self._st = DONE
                continue
            c = text[i]  # ARGS_START
            if c in _WS:
                i += 1
            elif c == "{":
                self._sc = JsonScanner()
                self._st = ARGS
            else:
                self._err(f"the arguments are not a JSON object: found {c!r}")
        return n

    def marker(self, marker: str) -> bool:
        if self._st == ARGS and self._error is None and self._sc.in_string:
            self.feed(marker)  # a control string inside a JSON string is text
            return True
        return False

    def close(self, *, truncated: bool) -> None:
        if self._error is not None:
            self.fail(self._error)
        elif self._st in (ARGS_START, ARGS) and self.in_call:
            self.fail(
                "the output ended inside the call" if truncated else "unterminated arguments",
                truncated=truncated,
            )
        elif self._st == NAME and "".join(self._name).strip(_WS):
            if self.verdict is None:
                self.verdict = False
            else:
                self.fail("the output ended in the function name", truncated=truncated)
        if self.verdict is None:
            self.verdict = False

    @property
    def idle(self) -> bool:
        return self._st == DONE or (self._st == NAME and not "".join(self._name).strip(_WS))

    def _name_done(self) -> bool:
        """True when the name is the content recipient (the region is over)."""
        name = "".join(self._name).strip(_WS)
        if name == self.content_name:
            self._st = DONE
            if self.verdict is None:  # the recipient header the prompt asked for: consumed
                self.verdict = True
            return True
        if not _NAME.fullmatch(name):
            self._err(f"no valid function name in {name[:40]!r}")
            return False
        if self.verdict is None:  # opened by plain text: a call only for a known tool
            self.verdict = name in self.ctx.tools
            if not self.verdict:
                return False
        self.start(name)
        self._st = ARGS_START
        return False

    def _err(self, why: str) -> None:
        if self._error is None:
            self._error = why
        if self.verdict is None:
            self.verdict = False
