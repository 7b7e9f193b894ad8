"""Apertus call lists: `[{"NAME": {args}}, …]`, each call a JSON object with exactly
one key, the function's name, whose value is the arguments object. Streamed: the
name is known once its key string ends, the arguments pass through as they arrive.
"""

from __future__ import annotations

import json

from .base import CallContext, RegionCodec
from .json import JsonScanner

_WS = " \t\r\n"

# states
OPEN, FIRST, OBJ, KEY, COLON, ARGS_START, ARGS, OBJ_END, AFTER, DONE = range(10)


class ApertusCallCodec(RegionCodec):
    def __init__(self, ctx: CallContext) -> None:
        super().__init__(ctx)
        self._st = OPEN
        self._sc: JsonScanner | None = None
        self._key: list[str] = []
        self._name = ""
        self._error: str | None = None

    def feed(self, text: str) -> int:
        i, n = 0, len(text)
        while i < n:
            st = self._st
            if self._error is not None:
                return n  # swallowed: reported with the failed call
            if st == DONE:
                return i
            if st in (KEY, ARGS):
                i += self._sc.feed(text[i:])
                frag = self._sc.take()
                if st == KEY:
                    self._key.append(frag)
                else:
                    self.args(frag)
                if self._sc.error:
                    self._err(f"invalid JSON: {self._sc.error}")
                elif self._sc.done:
                    if st == KEY:
                        self._key_done()
                    else:
                        self._st = OBJ_END
                continue
            c = text[i]
            if c in _WS:
                i += 1
                continue
            if st == OPEN and c == "[":
                self._st = FIRST
            elif st in (FIRST, AFTER) and c == "]":
                self._st = DONE
            elif st == FIRST and c == "{":
                self._st = OBJ
            elif st == AFTER and c == ",":
                self._st = FIRST
            elif st == OBJ and c == '"':
                self._sc = JsonScanner()
                self._st = KEY
                continue
            elif st == COLON and c == ":":
                self._st = ARGS_START
            elif st == ARGS_START and c == "{":
                self._sc = JsonScanner()
                self._st = ARGS
                continue
            elif st == ARGS_START:
                self._err(f"the arguments of {self._name!r} are not an object")
                continue
            elif st == OBJ_END and c == "}":
                self.end()
                self._st = AFTER
            elif st == OBJ_END and c == ",":
                self._err("a call object holds more than its function name")
                continue
            else:
                self._err(f"unexpected {c!r} in the call list")
                continue
            i += 1
        return n

    def marker(self, marker: str) -> bool:
        if self._error is None and self._sc is not None and self._sc.in_string and self._st in (KEY, ARGS):
            self.feed(marker)  # a control string inside a JSON string is text
            return True
        return False

    def close(self, *, truncated: bool) -> None:
        if self._error is not None:
            self.fail(self._error)
        elif self.in_call:
            self.fail(
                "the output ended inside the call" if truncated else "unterminated call object",
                truncated=truncated,
            )
        elif self._st in (FIRST, OBJ, KEY):  # a missing `]` after a whole call is forgiven
            self.fail("the output ended inside the call list", truncated=truncated)
        if self.verdict is None:
            self.verdict = False

    @property
    def idle(self) -> bool:
        return self._st in (OPEN, DONE) and not self.in_call

    # ---- helpers ---------------------------------------------------------------------------
    def _key_done(self) -> None:
        name = json.loads("".join(self._key))
        self._key = []
        if not name:
            self._err("a call with an empty function name")
            return
        if self.verdict is None:  # opened by plain text: a call only for a known tool
            self.verdict = name in self.ctx.tools
            if not self.verdict:
                return
        self._name = name
        self.start(name)
        self._st = COLON

    def _err(self, why: str) -> None:
        if self._error is None:
            self._error = why
        if self.verdict is None:
            self.verdict = False
