"""Incremental JSON value scanner: validates as it reads and emits compact JSON in
fragments that no later byte can invalidate (numbers and literals are held until
they end, escapes until they are whole). One pass; strings are skipped by regex.
"""

from __future__ import annotations

import re

_STRING_STOP = re.compile(r'["\\\x00-\x1f]')
_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?")
_NUMBER_CHARS = frozenset("0123456789+-.eE")
_WS = frozenset(" \t\r\n")
_ESCAPES = frozenset('"\\/bfnrtu')
_HEX = frozenset("0123456789abcdefABCDEF")
_LITERALS = ("true", "false", "null")

# states
_VALUE, _VALUE_OR_CLOSE, _KEY, _KEY_OR_CLOSE, _COLON, _COMMA_OR_CLOSE = range(6)
_STRING, _NUMBER_ST, _LITERAL, _DONE = range(6, 10)


class JsonError(ValueError):
    pass


class JsonScanner:
    """Scans exactly one JSON value. `feed` returns how much of the text it used
    (less than all once the value is complete); `take()` returns new output."""

    __slots__ = ("_stack", "_state", "_after_string", "_out", "_lexeme", "_escape", "done", "error")

    def __init__(self) -> None:
        self._stack: list[str] = []
        self._state = _VALUE
        self._after_string = _COMMA_OR_CLOSE
        self._out: list[str] = []
        self._lexeme = ""  # number or literal being read
        self._escape = ""  # partial escape sequence inside a string
        self.done = False
        self.error: str | None = None

    @property
    def in_string(self) -> bool:
        return self._state == _STRING

    @property
    def started(self) -> bool:
        return bool(self._stack) or self._state != _VALUE

    def plain(self, text: str) -> str | None:
        """`text` as the scanner would output it, when it is the inside of an open string
        with nothing to escape or end it (then it is taken); else None, nothing taken."""
        if self._state != _STRING or self._escape or self._out or _STRING_STOP.search(text):
            return None
        return text

    def take(self) -> str:
        s = "".join(self._out)
        self._out.clear()
        return s

    def feed(self, text: str) -> int:
        """Consume text; return the index where scanning stopped."""
        i, n = 0, len(text)
        out = self._out
        while i < n:
            if self.error is not None or self.done:
                return i
            st = self._state
            if st == _STRING:
                i = self._string(text, i, n)
                continue
            c = text[i]
            if st == _NUMBER_ST:
                if c in _NUMBER_CHARS:
                    self._lexeme += c
                    i += 1
                    continue
                if not _NUMBER.fullmatch(self._lexeme):
                    return self._fail(i, f"invalid number {self._lexeme!r}")
                out.append(self._lexeme)
                self._lexeme = ""
                self._end_value()
                continue
            if st == _LITERAL:
                if c.isalpha():
                    self._lexeme += c
                    if not any(lit.startswith(self._lexeme) for lit in _LITERALS):
                        return self._fail(i, f"invalid literal {self._lexeme!r}")
                    i += 1
                    continue
                if self._lexeme not in _LITERALS:
                    return self._fail(i, f"invalid literal {self._lexeme!r}")
                out.append(self._lexeme)
                self._lexeme = ""
                self._end_value()
                continue
            if c in _WS:
                i += 1
                continue
            if st in (_VALUE, _VALUE_OR_CLOSE):
                if c == "]" and st == _VALUE_OR_CLOSE:
                    self._close("[", c)
                elif c == "{":
                    self._stack.append("{")
                    out.append(c)
                    self._state = _KEY_OR_CLOSE
                elif c == "[":
                    self._stack.append("[")
                    out.append(c)
                    self._state = _VALUE_OR_CLOSE
                elif c == '"':
                    out.append(c)
                    self._state = _STRING
                    self._after_string = _COMMA_OR_CLOSE
                elif c == "-" or c.isdigit():
                    self._lexeme = c
                    self._state = _NUMBER_ST
                elif c in "tfn":
                    self._lexeme = c
                    self._state = _LITERAL
                else:
                    return self._fail(i, f"unexpected {c!r} where a value belongs")
            elif st in (_KEY, _KEY_OR_CLOSE):
                if c == '"':
                    out.append(c)
                    self._state = _STRING
                    self._after_string = _COLON
                elif c == "}" and st == _KEY_OR_CLOSE:
                    self._close("{", c)
                else:
                    return self._fail(i, f"unexpected {c!r} where a key belongs")
            elif st == _COLON:
                if c != ":":
                    return self._fail(i, f"expected ':' but found {c!r}")
                out.append(c)
                self._state = _VALUE
            elif st == _COMMA_OR_CLOSE:
                top = self._stack[-1]
                if c == ",":
                    out.append(c)
                    self._state = _KEY if top == "{" else _VALUE
                elif c == "}" and top == "{" or c == "]" and top == "[":
                    self._close(top, c)
                else:
                    return self._fail(i, f"expected ',' or a closing bracket but found {c!r}")
            i += 1
        return i

    def finish(self) -> None:
        """End of input: a number or literal at the very end of a top-level value completes it."""
        if self.done or self.error is not None:
            return
        if self._state in (_NUMBER_ST, _LITERAL) and not self._stack:
            lex = self._lexeme
            if (self._state == _NUMBER_ST and _NUMBER.fullmatch(lex)) or lex in _LITERALS:
                self._out.append(lex)
                self._lexeme = ""
                self.done = True
                return
        self.error = "truncated JSON"

    def _string(self, text: str, i: int, n: int) -> int:
        out = self._out
        if self._escape:
            while i < n and self._escape:
                c = text[i]
                esc = self._escape
                if len(esc) == 1:
                    if c not in _ESCAPES:
                        return self._fail(i, f"invalid escape \\{c}")
                    esc += c
                elif c in _HEX:
                    esc += c
                else:
                    return self._fail(i, "invalid \\u escape")
                i += 1
                if esc[1] != "u" or len(esc) == 6:
                    out.append(esc)
                    esc = ""
                self._escape = esc
            return i
        m = _STRING_STOP.search(text, i)
        if m is None:
            out.append(text[i:])
            return n
        j = m.start()
        if j > i:
            out.append(text[i:j])
        c = text[j]
        if c == '"':
            out.append(c)
            self._state = self._after_string
            if self._after_string == _COMMA_OR_CLOSE:
                self._end_value()
        elif c == "\\":
            self._escape = "\\"
        else:  # a raw control character: tolerated, written escaped
            out.append({"\n": "\\n", "\t": "\\t", "\r": "\\r"}.get(c) or f"\\u{ord(c):04x}")
        return j + 1

    def _close(self, opener: str, c: str) -> None:
        self._stack.pop()
        self._out.append(c)
        self._end_value()

    def _end_value(self) -> None:
        if self._stack:
            self._state = _COMMA_OR_CLOSE
        else:
            self._state = _DONE
            self.done = True

    def _fail(self, i: int, why: str) -> int:
        self.error = why
        return i
