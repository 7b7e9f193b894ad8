"""Gemma 4 call bodies: `call:NAME{key:value,...}` with `<|"|>` quoting raw strings.

Converted to JSON as it streams. Bare values are typed by the tool's schema (a
declared string keeps its raw text), else read as JSON literals, else kept as
strings. Keys are bare or quoted; a trailing comma is tolerated.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ..tools import coerce_json, items_schema, property_schema, schema_types
from .base import CallContext, RegionCodec, json_string_body, valid_function_name

QUOTE = '<|"|>'
_NAME = re.compile(r"[\w\-.]+")
_WS = " \t\r\n"

# states
PREFIX, NAME, BODY_OR_END = "prefix", "name", "body?"
KEY_OR_CLOSE, KEY, KEY_QUOTED, AFTER_QKEY = "key|}", "key", "qkey", "after-qkey"
VALUE, VALUE_OR_CLOSE, BARE, STRING, AFTER_VALUE, DONE = "value", "value|]", "bare", "string", "after", "done"


def _dump(v: Any) -> str:
    return json.dumps(v, ensure_ascii=False, separators=(",", ":"))



class Gemma4CallCodec(RegionCodec):
    def __init__(self, ctx: CallContext) -> None:
        super().__init__(ctx)
        self._st = PREFIX
        self._buf = ""  # prefix/name/bare key/bare value being read
        self._name = ""
        self._stack: list[list] = []  # [kind "{"/"[", schema, items_so_far, key_schema]
        self._string_schema: Any = None
        self._string_buffered = False  # a quoted value whose schema wants a non-string
        self._string_parts: list[str] = []
        self._error: str | None = None
        self._junk: list[str] = []
        self._prefixed = False  # the body began with `call:`

    # ---- interface ---------------------------------------------------------------------
    def feed(self, text: str) -> int:
        i, n = 0, len(text)
        while i < n:
            if self._error is not None:
                self._junk.append(text[i:])
                return n
            st = self._st
            if st in (STRING, KEY_QUOTED):
                self._string_text(text[i:])
                return n
            if st == DONE:
                self._junk.append(text[i:])
                return n
            c = text[i]
            if st in (PREFIX, NAME):
                i = self._head(text, i)
                continue
            if st == BODY_OR_END:
                if c == "{":
                    self._open_container("{")
                elif c not in _WS:
                    self._err(f"unexpected {c!r} after the call name")
                    continue
                i += 1
                continue
            if st in (KEY, BARE):
                j = self._scan_bare(text, i, ":" if st == KEY else ",}]")
                self._buf += text[i:j]
                i = j
                if i < n:
                    if st == KEY:
                        self._key_done(self._buf.strip(_WS))
                        i += 1
                    else:
                        self._bare_done()
                continue
            if c in _WS:
                i += 1
                continue
            if st == KEY_OR_CLOSE:
                if c == "}":
                    self._close_container("{")
                elif c == ",":
                    pass
                else:
                    self._st = KEY
                    self._buf = ""
                    continue
            elif st == AFTER_QKEY:
                if c != ":":
                    self._err(f"expected ':' after a quoted key, found {c!r}")
                    continue
                self._key_done(self._buf)
            elif st in (VALUE, VALUE_OR_CLOSE):
                if c == "]" and st == VALUE_OR_CLOSE:
                    self._close_container("[")
                elif c == "," and st == VALUE_OR_CLOSE:
                    pass
                elif c in "{[":
                    self._open_container(c)
                elif c in ",}]":
                    self._err("missing value")
                    continue
                else:
                    self._st = BARE
                    self._buf = ""
                    continue
            elif st == AFTER_VALUE:
                top = self._stack[-1][0]
                if c == ",":
                    self._st = KEY_OR_CLOSE if top == "{" else VALUE_OR_CLOSE
                elif c == "}" and top == "{" or c == "]" and top == "[":
                    self._close_container(top)
                else:
                    self._err(f"expected ',' or a closing bracket, found {c!r}")
                    continue
            i += 1
        return n

    def plain(self, text: str) -> str | None:
        if self._st != STRING or self._string_buffered or self._error is not None:
            return None
        return json_string_body(text)

    def marker(self, marker: str) -> bool:
        st = self._st
        if self._error is not None or st == DONE:
            if marker == QUOTE:
                self._junk.append(marker)
                return True
            return False
        if st in (STRING, KEY_QUOTED):
            if marker != QUOTE:
                self._string_text(marker)  # no escaping inside Gemma strings
            elif st == KEY_QUOTED:
                self._st = AFTER_QKEY
            else:
                self._string_done()
            return True
        if marker != QUOTE:
            return False
        if st in (KEY_OR_CLOSE,) or (st == KEY and not self._buf.strip(_WS)):
            self._st = KEY_QUOTED
            self._buf = ""
            self._begin_string(key=True)
        elif st in (VALUE, VALUE_OR_CLOSE) or (st == BARE and not self._buf.strip(_WS)):
            self._begin_string(key=False)
        else:
            self._err("unexpected quote")
        return True

    def close(self, *, truncated: bool) -> None:
        if self._st in (NAME, BODY_OR_END) and self._prefixed and not truncated and self._error is None:
            if self._st == NAME:
                self._name_done()  # `call:NAME` with no braces: no arguments
            if self._error is None:
                self.start(self._name)
                self.args("{}")
                self._st = DONE
        if self._error is None and self._st != DONE:
            self._error = "the output ended inside the call" if truncated else "unterminated arguments"
        if self._error is not None:
            self.fail(self._error, truncated=truncated and self._st != DONE)
            return
        self.end()
        if self._junk:
            self.junk("".join(self._junk), "text after the call's arguments")

    @property
    def idle(self) -> bool:
        return self._st == PREFIX and not self._buf and self._error is None

    @property
    def in_string(self) -> bool:
        return self._st == STRING or self._st == KEY_QUOTED

    # ---- head: call:NAME{ -----------------------------------------------------------------
    def _head(self, text: str, i: int) -> int:
        n = len(text)
        if self._st == PREFIX:
            if not self._buf:
                while i < n and text[i] in _WS:
                    i += 1
            while i < n and len(self._buf) < 5 and "call:".startswith(self._buf + text[i]):
                self._buf += text[i]
                i += 1
            if self._buf == "call:":
                self._st, self._buf = NAME, ""
                self._prefixed = True
            elif i < n:
                self._st = NAME  # no `call:` prefix: what is held begins the name
            return i
        m = _NAME.match(text, i)
        j = m.end() if m else i
        self._buf += text[i:j]
        if j == n:
            return j
        self._name_done()
        if self._error is not None:
            return j
        c = text[j]
        if c == "{":
            self._open_container("{")
        elif c in _WS:
            self._st = BODY_OR_END
        else:
            self._err(f"unexpected {c!r} after the call name")
            return j
        return j + 1

    def _name_done(self) -> None:
        name = self._buf
        self._buf = ""
        if not name:
            self._err("no function name")
            return
        if not valid_function_name(name, self.ctx.tools):
            self._err(f"invalid function name {name!r}")
            return
        self._name = name  # announced once its `{` arrives: only then is it a call

    # ---- containers and values --------------------------------------------------------------
    def _value_schema(self) -> Any:
        if not self._stack:
            return self.ctx.tools.get(self._name)
        frame = self._stack[-1]
        return frame[3] if frame[0] == "{" else items_schema(frame[1])

    def _open_container(self, c: str) -> None:
        if not self._stack and not self.in_call:
            self.start(self._name)
        schema = self._value_schema()
        self._sep()
        self.args(c)
        self._stack.append([c, schema, 0, None])
        self._st = KEY_OR_CLOSE if c == "{" else VALUE_OR_CLOSE

    def _close_container(self, c: str) -> None:
        self._stack.pop()
        self.args("}" if c == "{" else "]")
        self._value_done()

    def _sep(self) -> None:
        """Write the comma before an array item (objects write it with the key)."""
        if self._stack and self._stack[-1][0] == "[":
            if self._stack[-1][2]:
                self.args(",")
            self._stack[-1][2] += 1

    def _key_done(self, key: str) -> None:
        if not key:
            self._err("empty key")
            return
        frame = self._stack[-1]
        self.args(("," if frame[2] else "") + _dump(key) + ":")
        frame[2] += 1
        frame[3] = property_schema(frame[1], key)
        self._buf = ""
        self._st = VALUE

    def _value_done(self) -> None:
        self._st = AFTER_VALUE if self._stack else DONE

    def _bare_done(self) -> None:
        raw = self._buf.strip(_WS)
        self._buf = ""
        if not raw:
            self._err("missing value")
            return
        schema = self._value_schema()
        self._sep()
        self.args(coerce_json(raw, schema))
        self._value_done()

    def _begin_string(self, *, key: bool) -> None:
        if key:
            return
        schema = self._value_schema()
        types = schema_types(schema)
        self._string_buffered = bool(types) and "string" not in types
        self._string_schema = schema
        self._string_parts = []
        self._sep()
        if not self._string_buffered:
            self.args('"')
        self._st = STRING

    def _string_text(self, s: str) -> None:
        if self._st == KEY_QUOTED:
            self._buf += s
        elif self._string_buffered:
            self._string_parts.append(s)
        else:
            self.args(json_string_body(s))

    def _string_done(self) -> None:
        if self._string_buffered:
            self.args(coerce_json("".join(self._string_parts), self._string_schema))
        else:
            self.args('"')
        self._value_done()

    def _err(self, why: str) -> None:
        if self._error is None:
            self._error = why

    @staticmethod
    def _scan_bare(text: str, i: int, stops: str) -> int:
        n = len(text)
        while i < n and text[i] not in stops:
            i += 1
        return i
