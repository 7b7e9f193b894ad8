"""`{"name": ..., "arguments": {...}}` call objects (Hermes/Qwen3 and kin), streamed.

`parameters` is accepted for `arguments`; arguments given as a JSON string holding
an object are decoded; arguments that arrive before the name are held until it
does. Text after the object is reported, not shown.
"""

from __future__ import annotations

import json

from ..tools import json_text
from .base import CallContext, RegionCodec, valid_function_name
from .json import JsonScanner

_WS = " \t\r\n"
ARG_KEYS = ("arguments", "parameters")

OPEN, KEY_OR_CLOSE, KEY, COLON, VALUE_START, VALUE, AFTER, DONE = range(8)


class JsonCallCodec(RegionCodec):
    """One call object per region; `until_object_end=True` makes the region end
    itself right after the object (families with no closing marker)."""

    until_object_end = False
    name_keys: tuple[str, ...] = ("name",)  # keys that hold the call's name (Cohere: "tool_name")
    arg_keys: tuple[str, ...] = ARG_KEYS  # keys that hold its arguments (Inkling: "args")

    def __init__(self, ctx: CallContext) -> None:
        super().__init__(ctx)
        self._st = OPEN
        self._sc: JsonScanner | None = None
        self._key = ""
        self._kind = ""  # "name", "args", "args-str", "other"
        self._parts: list[str] = []  # the key, name or string-args being read
        self._early: list[str] = []  # arguments that came before the name
        self._name: str | None = None
        self._have_args = False
        self._error: str | None = None
        self._junk: list[str] = []
        self._closed = False

    def feed(self, text: str) -> int:
        used = self._feed(text)
        if self._error is not None and self.verdict is None:
            self.verdict = False
        return used

    def _feed(self, text: str) -> int:
        i, n = 0, len(text)
        while i < n:
            st = self._st
            if self._error is not None:
                self._junk.append(text[i:])
                return n
            if st == DONE:
                if self.until_object_end:
                    self.close(truncated=False)  # the region ends here, and so does the call
                    return i
                self._junk.append(text[i:])
                return n
            if st in (KEY, VALUE):
                used = self._sc.feed(text[i:])
                i += used
                self._route(self._sc.take())
                if self._sc.error:
                    self._error = f"invalid JSON: {self._sc.error}"
                elif self._sc.done:
                    self._value_done() if st == VALUE else self._key_done()
                continue
            c = text[i]
            if c in _WS:
                i += 1
                continue
            if st == OPEN:
                if c != "{":
                    self._error = f"expected a JSON object, found {c!r}"
                    continue
                self._st = KEY_OR_CLOSE
            elif st == KEY_OR_CLOSE and c == "}":
                self._object_done()
            elif st in (KEY_OR_CLOSE,) and c == '"':
                self._sc = JsonScanner()
                self._st = KEY
                continue
            elif st == COLON and c == ":":
                self._st = VALUE_START
            elif st == VALUE_START:
                self._begin_value(c)
                continue
            elif st == AFTER and c == ",":
                self._st = KEY_OR_CLOSE
            elif st == AFTER and c == "}":
                self._object_done()
            else:
                self._error = f"invalid JSON: unexpected {c!r}"
                continue
            i += 1
        return n

    def plain(self, text: str) -> str | None:
        if self._st != VALUE or self._kind != "args" or self._name is None or self._error is not None:
            return None
        return self._sc.plain(text)

    def marker(self, marker: str) -> bool:
        if self._sc is not None and self._sc.in_string and self._st in (KEY, VALUE):
            self._feed(marker)  # a delimiter inside a JSON string is just text
            return True
        return False

    def close(self, *, truncated: bool) -> None:
        if self._closed:
            return
        self._closed = True
        if self._error is None and self._st != DONE:
            if self._sc is not None and self._st == VALUE:
                self._sc.finish()
            self._error = "the output ended inside the call" if truncated else "unterminated JSON object"
        if self._error is not None:
            self.fail(self._error, truncated=truncated and self._st != DONE)
            return
        self.end()
        if self._junk:
            self.junk("".join(self._junk), "text after the call object")

    @property
    def complete(self) -> bool:
        """The call object has closed and was valid."""
        return self._st == DONE and self._error is None

    @property
    def failed(self) -> bool:
        return self._error is not None

    @property
    def idle(self) -> bool:
        return self._st == OPEN and not self.in_call

    # ---- object walking -------------------------------------------------------------
    def _key_done(self) -> None:
        self._key = json.loads(self._parts_take())
        self._st = COLON

    def _begin_value(self, c: str) -> None:
        self._sc = JsonScanner()
        self._st = VALUE
        if self._key in self.name_keys:
            self._kind = "name"
        elif self._key in self.arg_keys and not self._have_args:
            self._have_args = True
            self._kind = "args" if c == "{" else "args-str" if c == '"' else "bad-args"
        else:
            self._kind = "other"

    def _route(self, frag: str) -> None:
        if not frag:
            return
        if self._st == KEY or self._kind in ("name", "args-str", "bad-args"):
            self._parts.append(frag)
        elif self._kind == "args":
            self._emit_or_hold(frag)

    def _value_done(self) -> None:
        kind = self._kind
        self._st = AFTER
        if kind == "name":
            name = json.loads(self._parts_take())
            if not isinstance(name, str) or not name:
                self._error = "the call's name is not a non-empty string"
                return
            if not valid_function_name(name, self.ctx.tools):
                self._error = f"invalid function name {name[:64]!r}"
                return
            if self._name is not None:
                self._error = "two names in one call"
                return
            if self.verdict is None:  # opened by plain text: a call only for a known tool
                self.verdict = not self.ctx.tools or name in self.ctx.tools
                if not self.verdict:
                    return
            self._name = name
            self.start(name)
            self.args("".join(self._early))
            self._early.clear()
        elif kind == "args-str":
            inner = json.loads(self._parts_take())  # a whole JSON string: it decodes
            # scanned, not decoded: any depth, numbers as written, repeated keys reported
            value = json_text(inner.strip()) if inner.lstrip().startswith("{") else None
            if value is None:
                self._error = "arguments is a string that does not hold a JSON object"
                return
            self._emit_or_hold(value)
        elif kind == "bad-args":
            self._error = f"arguments is not an object: {self._parts_take()}"
        self._kind = ""

    def _emit_or_hold(self, text: str) -> None:
        if self._name is None:
            self._early.append(text)
        else:
            self.args(text)

    def _object_done(self) -> None:
        if self._name is None:
            self._error = "the call object has no name"
            return
        if not self._have_args:
            self.args("{}")
        self._st = DONE

    def _parts_take(self) -> str:
        s = "".join(self._parts)
        self._parts.clear()
        return s
