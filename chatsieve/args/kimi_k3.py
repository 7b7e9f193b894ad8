"""Kimi K3 "XTML" tool channels: inside `<|open|>tools<|sep|>` … `<|close|>tools<|sep|>`,
calls `<|open|>call tool="NAME" index="1"<|sep|>` … `<|close|>call<|sep|>`, each holding
arguments `<|open|>argument key="K" type="T"<|sep|>VALUE<|close|>argument<|sep|>`.
A `string` value is raw text (streamed as a JSON string); other types are JSON.
Attribute values undo the template's `&amp;`/`&quot;` escaping.
"""

from __future__ import annotations

import json
import re

from .base import CallContext, RegionCodec, json_string_body

SEP = "<|sep|>"
CALL_OPEN, CALL_CLOSE = "<|open|>call", "<|close|>call" + SEP
ARG_OPEN, ARG_CLOSE = "<|open|>argument", "<|close|>argument" + SEP
MARKERS = (SEP, CALL_OPEN, CALL_CLOSE, ARG_OPEN, ARG_CLOSE)

_WS = " \t\r\n"
_ATTR = re.compile(r'(\w+)="([^"]*)"')
_ATTRS = re.compile(r'\s*(?:\w+="[^"]*"\s*)*')
_MAX_ATTRS = 1024

OUTSIDE, CALL_ATTRS, BODY, ARG_ATTRS, VALUE = range(5)


def _unescape(v: str) -> str:
    return v.replace("&quot;", '"').replace("&amp;", "&")


def _attrs(raw: str) -> dict[str, str] | None:
    if not _ATTRS.fullmatch(raw):
        return None
    return {k: _unescape(v) for k, v in _ATTR.findall(raw)}



class KimiK3ToolsCodec(RegionCodec):
    def __init__(self, ctx: CallContext) -> None:
        super().__init__(ctx)
        self._st = OUTSIDE
        self._buf: list[str] = []  # attributes, or a non-string value
        self._buf_len = 0
        self._string = False  # the value streams as a JSON string
        self._nargs = 0
        self._error: str | None = None
        self._junk: list[str] = []
        self._calls = 0
        self._failed = 0

    def feed(self, text: str) -> int:
        st = self._st
        if self._error is not None:
            return len(text)  # part of the failed call
        if st == OUTSIDE:
            self._junk.append(text)
        elif st in (CALL_ATTRS, ARG_ATTRS):
            self._buf.append(text)
            self._buf_len += len(text)
            if self._buf_len > _MAX_ATTRS:
                self._err("attributes too long")
        elif st == VALUE:
            if self._string:
                self.args(json_string_body(text))
            else:
                self._buf.append(text)
        elif text.strip(_WS):  # BODY
            self._err(f"unexpected text {text.strip(_WS)[:40]!r} in the call")
        return len(text)

    def marker(self, marker: str) -> bool:
        st = self._st
        if st == VALUE and marker != ARG_CLOSE:
            self.feed(marker)  # a control string inside a value is text
            return True
        if marker not in MARKERS:
            return False
        if self._error is not None:
            if marker == CALL_CLOSE:
                self._flush_fail()
            return True
        if st == OUTSIDE and marker == CALL_OPEN:
            self._begin(CALL_ATTRS)
        elif st == CALL_ATTRS and marker == SEP:
            self._start_call()
        elif st == BODY and marker == ARG_OPEN:
            self._begin(ARG_ATTRS)
        elif st == ARG_ATTRS and marker == SEP:
            self._start_arg()
        elif st == VALUE:  # ARG_CLOSE
            self._end_arg()
        elif st == BODY and marker == CALL_CLOSE:
            self.args("}")
            self.end()
            self._calls += 1
            self._st = OUTSIDE
        elif st == OUTSIDE:
            self._junk.append(marker)
        else:
            self._err(f"{marker} out of place in a call")
        return True

    def close(self, *, truncated: bool) -> None:
        if self._error is not None:
            self._flush_fail()
        elif self._st != OUTSIDE:
            why = "the output ended inside the call" if truncated else "the call was not closed"
            self.fail(why, truncated=truncated)
            self._failed += 1
        junk = "".join(self._junk)
        self._junk = []
        if junk.strip(_WS):
            if self._calls == 0 and self._failed == 0:
                self.fail("no call in the tools channel")
            else:
                self.junk(junk, "text in the tools channel outside any call")

    @property
    def idle(self) -> bool:
        return self._st == OUTSIDE and self._error is None

    # ---- helpers ---------------------------------------------------------------------
    def _begin(self, st: int) -> None:
        self._st = st
        self._buf = []
        self._buf_len = 0

    def _start_call(self) -> None:
        attrs = _attrs("".join(self._buf))
        name = (attrs or {}).get("tool", "")
        if attrs is None or not name or any(c in name for c in "<>\n"):
            self._st = BODY
            self._err("a call without a valid tool attribute")
            return
        self.start(name)
        self.args("{")
        self._nargs = 0
        self._st = BODY

    def _start_arg(self) -> None:
        attrs = _attrs("".join(self._buf))
        key = (attrs or {}).get("key", "")
        if attrs is None or not key:
            self._err("an argument without a valid key attribute")
            return
        self._string = attrs.get("type", "string") == "string"
        self.args(("," if self._nargs else "") + json.dumps(key, ensure_ascii=False) + ":")
        self._nargs += 1
        self._buf = []
        if self._string:
            self.args('"')
        self._st = VALUE

    def _end_arg(self) -> None:
        if self._string:
            self.args('"')
        else:
            raw = "".join(self._buf)
            try:
                value = json.loads(raw)
                text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
            except ValueError:
                text = json.dumps(raw, ensure_ascii=False)
            self.args(text)
        self._buf = []
        self._st = BODY

    def _err(self, why: str) -> None:
        if self._error is None:
            self._error = why

    def _flush_fail(self) -> None:
        if self._error is not None:
            self.fail(self._error)
            self._failed += 1
        self._error = None
        self._st = OUTSIDE
