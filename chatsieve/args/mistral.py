"""Mistral call bodies after `[TOOL_CALLS]`, in all three generations:

- before v11: a JSON array `[{"name": …, "arguments": {…}}, …]` (a lone object too);
- v11+: `NAME[ARGS]{json}`, and `NAME[CALL_ID]id[ARGS]{json}` (Mistral Small 3.2);
  `NAME{json}` when the engine dropped the `[ARGS]` control token from the text.

There is no closing marker: the region ends itself when the JSON ends.
"""

from __future__ import annotations

import re

from .base import CallContext, RegionCodec, random_alnum, valid_function_name
from .json import JsonScanner
from .llama3 import JsonCallSequence

ARGS, CALL_ID = "[ARGS]", "[CALL_ID]"
_WS = " \t\r\n"
_NAME = re.compile(r"[\w.\-]*")
_ID = re.compile(r"[A-Za-z0-9]*")

# states
HEAD, LIST, NAME, AFTER_NAME, ID, ARGS_START, JSON, DONE = range(8)


def mistral_call_id(native: str | None = None) -> str:
    """Mistral's ids are 9 alphanumerics (its templates reject others): keep a
    native id of that shape, else make one."""
    if native and len(native) == 9 and native.isascii() and native.isalnum():
        return native
    return random_alnum(9)


class MistralCallList(JsonCallSequence):
    sep = ","
    brackets = True


class MistralCallObjects(JsonCallSequence):
    sep = ","
    brackets = False


class MistralCallCodec(RegionCodec):
    def __init__(self, ctx: CallContext) -> None:
        super().__init__(ctx)
        self._st = HEAD
        self._list: JsonCallSequence | None = None
        self._name = ""
        self._id = ""
        self._sc: JsonScanner | None = None
        self._error: str | None = None

    # ---- interface ---------------------------------------------------------------------
    def feed(self, text: str) -> int:
        i, n = 0, len(text)
        while i < n:
            st = self._st
            if self._error is not None:
                return n  # swallowed: reported with the failed call
            if st == LIST:
                used = self._list.feed(text[i:])
                self._pull()
                self.give_back = self._list.give_back
                return i + used
            if st == DONE:
                return i
            if st == JSON:
                i += self._sc.feed(text[i:])
                self.args(self._sc.take())
                if self._sc.error is not None:
                    self._err(f"invalid JSON arguments: {self._sc.error}")
                elif self._sc.done:
                    self.end()
                    self._st = DONE
                continue
            if st == NAME:
                j = _NAME.match(text, i).end()
                self._name += text[i:j]
                i = j
                if i < n:
                    self._st = AFTER_NAME
                continue
            if st == ID:
                j = _ID.match(text, i).end()
                self._id += text[i:j]
                i = j
                if i < n and text[i] not in _WS:
                    self._err(f"unexpected {text[i]!r} in a call id")
                elif i < n:
                    i += 1
                continue
            c = text[i]
            if c in _WS:
                i += 1
                continue
            if st == HEAD:
                if c in "[{":
                    self._list = MistralCallList(self.ctx) if c == "[" else MistralCallObjects(self.ctx)
                    self._st = LIST
                elif _NAME.match(c).end():
                    self._st = NAME
                else:
                    self._err(f"expected a call after [TOOL_CALLS], found {c!r}")
                continue
            if st == AFTER_NAME:
                if c == "{":  # `[ARGS]` skipped as a special token by the engine
                    if self._begin_call():
                        self._begin_args()
                else:
                    self._err(f"unexpected {c!r} after the call name {self._name!r}")
                continue
            if st == ARGS_START:
                if c == "{":
                    self._begin_args()
                else:
                    self._err(f"the arguments are not a JSON object: found {c!r}")
                continue
            i += 1  # not reached: every state above decides
        return n

    def marker(self, marker: str) -> bool:
        st = self._st
        if st == LIST:
            used = self._list.marker(marker)
            self._pull()
            self.give_back = self._list.give_back
            return used
        if st == JSON and self._sc.in_string:
            self._sc.feed(marker)  # a control string inside a JSON string is text
            self.args(self._sc.take())
            return True
        if st == DONE or marker not in (ARGS, CALL_ID):
            return False
        if self._error is not None:
            return True
        if st in (NAME, AFTER_NAME) and marker == ARGS:
            if self._begin_call():
                self._st = ARGS_START
        elif st in (NAME, AFTER_NAME) and marker == CALL_ID:
            if self._check_name():
                self._st = ID
        elif st == ID and marker == ARGS:
            if self._begin_call():
                self._st = ARGS_START
        else:
            self._err(f"{marker} out of place in a call")
        return True

    def close(self, *, truncated: bool) -> None:
        st = self._st
        if st == LIST:
            self._list.close(truncated=truncated)
            self._pull()
            self.give_back = self._list.give_back
        elif self._error is not None:
            self.fail(self._error)
        elif st in (NAME, AFTER_NAME, ID, ARGS_START, JSON):
            if self._sc is not None:
                self._sc.finish()
            self.fail("the output ended inside the call", truncated=truncated)

    @property
    def idle(self) -> bool:
        return self._st in (HEAD, DONE) and not self.in_call

    # ---- helpers ---------------------------------------------------------------------------
    def _check_name(self) -> bool:
        if not self._name:
            self._err("a call with no function name")
            return False
        if not valid_function_name(self._name, self.ctx.tools):
            self._err(f"invalid function name {self._name[:64]!r}")
            return False
        return True

    def _begin_call(self) -> bool:
        if not self._check_name():
            return False
        self.start(self._name, self._id or None)
        return True

    def _begin_args(self) -> None:
        self._sc = JsonScanner()
        self._st = JSON

    def _pull(self) -> None:
        ops, self._list.ops = self._list.ops, []
        self.ops.extend(ops)
        self.in_call = self._list.in_call

    def _err(self, why: str) -> None:
        if self._error is None:
            self._error = why
