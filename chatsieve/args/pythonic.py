"""Pythonic call lists (Llama 4, Llama 3.2): `[f(a=1, b='x'), g()]`.

A small incremental parser, never `eval`: Python literals become JSON as they
stream -- strings in either quote style (triple-quoted, raw, every escape), numbers,
True/False/None, lists, tuples, dicts and sets (a JSON list, in the order written);
f-strings without placeholders.
Keyword arguments only.
"""

from __future__ import annotations

import json
import re
import unicodedata

from .base import Args, CallContext, End, RegionCodec, Start, json_string_body, valid_function_name
from .json import _NUMBER as JSON_NUMBER

_WS = " \t\r\n"
_NAME_RUN = re.compile(r"[\w.\-]*")  # function names (dotted and dashed ones too)
_WORD_RUN = re.compile(r"\w*")
_NUMBER_RUN = re.compile(r"[\w.]*")
_STOPS = {q: re.compile("[\\\\" + q + "]") for q in "'\""}
_F_STOPS = {q: re.compile("[\\\\{}" + q + "]") for q in "'\""}  # f-strings: braces too
_PY_FLOAT = re.compile(r"(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_OCTAL = frozenset("01234567")
_HEX = frozenset("0123456789abcdefABCDEF")
_SIMPLE_ESCAPES = {
    "\\": "\\", "'": "'", '"': '"', "a": "\a", "b": "\b", "f": "\f",
    "n": "\n", "r": "\r", "t": "\t", "v": "\v", "\n": "",
}  # fmt: skip
_WORDS = {"True": "true", "False": "false", "None": "null", "true": "true", "false": "false", "null": "null"}
_STRING_PREFIXES = frozenset({"r", "u", "b", "br", "rb", "f", "rf", "fr"})
# container frames: `[` list, `(` tuple, `{` dict, `s` set, `?` a `{` not yet known to
# open a dict or a set (its first item decides: `:` after it, or `,`/`}`)
_CLOSER = {"[": "]", "(": ")", "{": "}", "s": "}", "?": "}"}

# call-level states
LIST, CALL_OR_END, NAME, AFTER_NAME, KW_OR_CLOSE, KW, AFTER_KW, AFTER_ARG, AFTER_CALL, DONE = range(10)
# value-level states
V_START, V_START_OR_CLOSE, V_KEY_OR_CLOSE, V_COLON, V_AFTER, V_STRING, V_NUMBER, V_WORD = range(10, 18)



def python_number(lexeme: str) -> str | None:
    """A Python numeric literal (sign, underscores, 0x/0o/0b, floats) as JSON, or None."""
    s = lexeme.replace("_", "")
    negative = False
    while s[:1] in ("+", "-"):
        negative ^= s[0] == "-"
        s = s[1:]
    if not s:
        return None
    if JSON_NUMBER.fullmatch(s):
        return ("-" if negative else "") + s
    if len(s) > 1 and s[0] == "0" and s.isdigit() and s.strip("0"):
        return None  # `007`: Python has no such literal (never read as 7)
    try:
        value: int | float = int(s, 0)
    except ValueError:
        if not _PY_FLOAT.fullmatch(s):
            return None
        value = float(s)
        if value in (float("inf"), float("-inf")):
            return None
    return json.dumps(-value if negative else value)


class PythonicCallCodec(RegionCodec):
    # Bare calls (`f(a=1)` without brackets) in a region opened by plain text: off, as a
    # reply starting with a word is prose; a subclass whose opener is unambiguous allows them.
    bare_calls_when_tentative = False

    def __init__(self, ctx: CallContext) -> None:
        super().__init__(ctx)
        self._st = LIST
        self._bracketed = False
        self._buf = ""  # name, keyword, number or word being read
        self._argc = 0  # keyword arguments written in the current call
        self._stack: list[list] = []  # [opener, items written, held offset of a `?` frame]
        # argument JSON held while a `{` is undecided (`{}`/`{"k":` or `[`), and its length
        self._held: list[str] = []
        self._held_len = 0
        self._undecided = 0  # `?` frames on the stack
        self._key = False  # the string/number being read is a dict key
        # string state
        self._q = ""
        self._triple = False
        self._raw = False
        self._fstring = False  # an f-string: literal only without placeholders (`{{`, `}}` kept)
        self._brace = ""  # an f-string's `{` or `}` whose double is not seen yet
        self._opening = 0  # opening quotes seen: 1, or 2 (empty '' or the start of ''')
        self._closing = 0  # closing quotes seen inside a triple-quoted string
        self._escape = ""
        self._error: str | None = None
        self._gap = ""  # whitespace after a bare call, held until what follows decides
        self._probe: list[str] | None = None  # a bare call's text on a new line, until its `(`

    # ---- interface ---------------------------------------------------------------------
    def feed(self, text: str) -> int:
        i, n = 0, len(text)
        while i < n:
            if self._error is not None:
                return n  # swallowed: reported with the failed call
            st = self._st
            if st == V_STRING:
                i = self._string(text, i, n)
                continue
            if st == DONE:
                return i
            if st == AFTER_CALL and not self._bracketed:
                i = self._after_bare_call(text, i)
                continue
            if st in (NAME, KW, V_NUMBER, V_WORD):
                run = _NAME_RUN if st == NAME else _NUMBER_RUN if st == V_NUMBER else _WORD_RUN
                j = run.match(text, i).end()
                if self._probe is not None:
                    self._probe.append(text[i:j])
                self._buf += text[i:j]
                i = j
                if i < n and st == V_NUMBER and text[i] in "+-" and self._sign_fits():
                    self._buf += text[i]
                    i += 1
                elif i < n:
                    self._run_done(text[i])
                continue
            c = text[i]
            if c in _WS:
                if self._probe is not None:
                    self._probe.append(c)
                i += 1
                continue
            i = self._structure(c, i)
        return n

    def marker(self, marker: str) -> bool:
        if self._st == V_STRING and self._error is None:
            self.feed(marker)  # a control string inside a Python string is text
            return True
        return False

    def close(self, *, truncated: bool) -> None:
        st = self._st
        if self._probe is not None:  # a word on a new line after the calls, never a call
            self.give_back, self._probe = "".join(self._probe), None
        elif self._error is not None:
            self.fail(self._error)
        elif self.in_call:
            self.fail("the output ended inside the call", truncated=truncated)
        elif st in (CALL_OR_END, NAME, AFTER_NAME):
            self.fail("the output ended inside the call list", truncated=truncated)

    @property
    def idle(self) -> bool:
        return self._st in (LIST, DONE) and not self.in_call

    # ---- calls -------------------------------------------------------------------------------
    def _structure(self, c: str, i: int) -> int:
        """One non-space character outside strings and runs; returns the next index."""
        st = self._st
        if st == LIST:
            if c == "[":
                self._bracketed = True
                self._st = CALL_OR_END
            elif (not self.ctx.tentative or self.bare_calls_when_tentative) and (c.isalpha() or c == "_"):
                self._begin_run(NAME)
                return i
            else:
                self._err(f"expected '[' to open the call list, found {c!r}")
                return i
        elif st == CALL_OR_END:
            if c == "]" and self._bracketed:
                self._st = DONE
            elif c.isalpha() or c == "_":
                self._begin_run(NAME)
                return i
            else:
                self._err(f"expected a function call, found {c!r}")
                return i
        elif st == AFTER_NAME:
            if c != "(" and self._probe is not None:
                # a word on a new line after bare calls, not a call: the engine's again
                self.give_back, self._probe = "".join(self._probe), None
                self._st = DONE
                return i
            if c != "(":
                self._err(f"expected '(' after {self._buf!r}, found {c!r}")
                return i
            self._probe = None  # `name(` on a new line: the next call
            self._open_call()
        elif st == KW_OR_CLOSE:
            if c == ")":
                self._close_call()
            elif c.isalpha() or c == "_":
                self._begin_run(KW)
                return i
            else:
                self._err(f"expected a keyword argument, found {c!r}")
                return i
        elif st == AFTER_KW:
            if c != "=":
                self._err(f"expected '=' after the keyword {self._buf!r}, found {c!r}")
                return i
            self._keyword_done()
        elif st == AFTER_ARG:
            if c == ",":
                self._st = KW_OR_CLOSE
            elif c == ")":
                self._close_call()
            else:
                self._err(f"expected ',' or ')' after an argument, found {c!r}")
                return i
        elif st == AFTER_CALL:
            if c == ",":
                self._st = CALL_OR_END
            elif c == "]" and self._bracketed:
                self._st = DONE
            else:
                self._err(f"expected ',' or ']' after a call, found {c!r}")
                return i
        else:
            return self._value_structure(c, i)
        return i + 1

    def _after_bare_call(self, text: str, i: int) -> int:
        """After a call without brackets: `,` or a line break and `name(` go on to the
        next call; anything else ends the calls, and the held whitespace goes back."""
        n = len(text)
        j = i
        while j < n and text[j] in _WS:
            j += 1
        self._gap += text[i:j]
        if j == n:
            return n
        c = text[j]
        if c == ",":
            self._gap = ""
            self._st = CALL_OR_END
            return j + 1
        if (c.isalpha() or c == "_") and "\n" in self._gap and (not self.ctx.tentative or self.bare_calls_when_tentative):
            self._probe = [self._gap]
            self._gap = ""
            self._begin_run(NAME)
            return j
        self.give_back, self._gap = self._gap, ""
        self._st = DONE  # the calls are over; the rest is the engine's again
        return j

    def _run_done(self, c: str) -> None:
        """A name/keyword/number/word run ended before character c (not consumed)."""
        st, word = self._st, self._buf
        if st == NAME:
            self._st = AFTER_NAME
        elif st == KW:
            self._st = AFTER_KW
        elif st == V_NUMBER:
            num = python_number(word)
            if num is None:
                self._err(f"invalid number {word!r}")
            elif self._key:
                self.args(json.dumps(num))
                self._st = V_COLON
            else:
                self.args(num)
                self._value_done()
        else:  # V_WORD
            if c in "'\"" and word.lower() in _STRING_PREFIXES:
                self._raw = "r" in word.lower()
                self._fstring = "f" in word.lower()
                self._st = V_STRING  # the quote itself opens the string
                self._q = ""
            elif word in _WORDS and not self._key:
                self.args(_WORDS[word])
                self._value_done()
            else:
                self._err(f"{word!r} is not a literal (variables and expressions are not allowed)")

    def _sign_fits(self) -> bool:
        """A sign may lead a number or follow its exponent mark (1e-5)."""
        buf = self._buf
        return not buf.strip("+-") or buf[-1] in "eE"

    def _begin_run(self, state: int) -> None:
        self._st = state
        self._buf = ""

    def _open_call(self) -> None:
        name = self._buf
        if not valid_function_name(name, self.ctx.tools):
            self._err(f"invalid function name {name[:64]!r}")
            return
        if self.verdict is None:  # opened by plain text: a call only for a known tool
            self.verdict = name in self.ctx.tools
            if not self.verdict:
                self._error = f"{name!r} is not a tool of this request"
                return
        self.start(name)
        self.args("{")
        self._argc = 0
        self._st = KW_OR_CLOSE

    def _keyword_done(self) -> None:
        self.args(("," if self._argc else "") + json.dumps(self._buf, ensure_ascii=False) + ":")
        self._argc += 1
        self._st = V_START

    def _close_call(self) -> None:
        self.args("}")
        self.end()
        self._st = AFTER_CALL

    # ---- values ------------------------------------------------------------------------------
    def _value_structure(self, c: str, i: int) -> int:
        st = self._st
        if st in (V_START, V_START_OR_CLOSE):
            if st == V_START_OR_CLOSE and c == _CLOSER[self._stack[-1][0]]:
                if self._stack[-1][0] == "?":  # `{}`: an empty dict
                    self._decide("{")
                self._close_container()
                return i + 1
            return self._value_start(c, i)
        if st == V_KEY_OR_CLOSE:
            if c == "}":
                self._close_container()
                return i + 1
            if c in "'\"" or c.isdigit() or c in "-+.":
                frame = self._stack[-1]
                if frame[1]:
                    self.args(",")
                frame[1] += 1
                self._key = True
                if c in "'\"":
                    self._open_string(c)
                    return i + 1
                self._begin_run(V_NUMBER)
                return i
            self._err(f"expected a dict key, found {c!r}")
            return i
        if st == V_COLON:
            if c != ":":
                self._err(f"expected ':' after a dict key, found {c!r}")
                return i
            self.args(":")
            self._st = V_START
            return i + 1
        # V_AFTER
        top = self._stack[-1][0]
        if top == "?":  # after a `{`'s first item: `:` makes it a dict, `,` or `}` a set
            if c == ":":
                if self._decide("{"):
                    self.args(":")
                    self._st = V_START
                return i if self._error is not None else i + 1
            if c in ",}":
                self._decide("s")
                top = "s"
        if c == ",":
            self._st = V_KEY_OR_CLOSE if top == "{" else V_START_OR_CLOSE
        elif c == _CLOSER[top]:
            self._close_container()
        else:
            self._err(f"expected ',' or {_CLOSER[top]!r}, found {c!r}")
            return i
        return i + 1

    def _value_start(self, c: str, i: int) -> int:
        self._key = False
        if c == "{":  # a dict or a set: nothing is written until its first item decides
            self._separator()
            self._stack.append(["?", 0, self._held_len])
            self._undecided += 1
            self._st = V_START_OR_CLOSE
            return i + 1
        if c in "[(":
            self._separator()
            self.args("[")
            self._stack.append([c, 0])
            self._st = V_START_OR_CLOSE
            return i + 1
        if c in "'\"":
            self._separator()
            self._open_string(c)
            return i + 1
        if c.isdigit() or c in "-+.":
            self._separator()
            self._begin_run(V_NUMBER)
            return i
        if c.isalpha() or c == "_":
            self._separator()
            self._begin_run(V_WORD)
            return i
        self._err(f"expected a value, found {c!r}")
        return i

    def _separator(self) -> None:
        """The comma before a list/tuple item (dict items write theirs with the key)."""
        if self._stack and self._stack[-1][0] != "{":
            frame = self._stack[-1]
            if frame[1]:
                self.args(",")
            frame[1] += 1

    def _close_container(self) -> None:
        opener = self._stack.pop()[0]
        self.args("}" if opener == "{" else "]")
        self._value_done()

    def _decide(self, kind: str) -> bool:
        """The innermost `{` opens a dict (`kind` "{"; its first item, if any, is the
        key) or a set ("s"; written as a JSON list). False when the key cannot be one."""
        frame = self._stack[-1]
        held = "".join(self._held)
        at = frame[2]
        first = held[at:]
        if kind == "{" and first and not first.startswith('"'):
            if JSON_NUMBER.fullmatch(first) is None:  # a dict key must be a string or a number
                self._err(f"expected a string or a number as a dict key, found {first[:64]}")
                return False
            first = json.dumps(first)
        held = held[:at] + ("{" if kind == "{" else "[") + first
        frame[0] = kind
        del frame[2:]
        self._undecided -= 1
        if self._undecided:
            self._held, self._held_len = [held], len(held)
        else:
            self._held, self._held_len = [], 0
            super().args(held)
        return True

    def args(self, text: str) -> None:
        if self._undecided:
            self._held.append(text)
            self._held_len += len(text)
        else:
            super().args(text)

    def _value_done(self) -> None:
        self._key = False
        self._st = V_AFTER if self._stack else AFTER_ARG

    # ---- strings -----------------------------------------------------------------------------
    def _open_string(self, q: str, *, raw: bool = False, fstring: bool = False) -> None:
        self.args('"')
        self._raw = raw
        self._fstring = fstring
        self._brace = ""
        self._st = V_STRING
        self._q = q
        self._opening = 1
        self._triple = False
        self._closing = 0
        self._escape = ""

    def _string(self, text: str, i: int, n: int) -> int:
        if not self._q:  # after a prefix (r'', u''): the quote is here
            self._open_string(text[i], raw=self._raw, fstring=self._fstring)
            return i + 1
        q = self._q
        while i < n and self._opening:
            if text[i] != q:
                if self._opening == 2:  # '' then something else: an empty string
                    self._opening = 0
                    self._string_done()
                    return i
                self._opening = 0
                break
            i += 1
            if self._opening == 1:
                self._opening = 2
            else:
                self._opening = 0
                self._triple = True
        if self._opening:
            return i
        while i < n:
            if self._error is not None:
                return n
            if self._escape:
                i = self._escaped(text, i)
                continue
            if self._brace:  # `{{` / `}}` in an f-string is the brace; one alone is a placeholder
                if text[i] != self._brace:
                    self._err("an f-string with a placeholder is not a literal")
                    return n
                self.args(self._brace)
                self._brace = ""
                i += 1
                continue
            if self._closing:
                if text[i] == q:
                    self._closing += 1
                    i += 1
                    if self._closing == 3:
                        self._closing = 0
                        self._string_done()
                        return i
                    continue
                self.args(json_string_body(q * self._closing))
                self._closing = 0
                continue
            m = (_F_STOPS if self._fstring else _STOPS)[q].search(text, i)
            j = m.start() if m else n
            if j > i:
                self.args(json_string_body(text[i:j]))
            if m is None:
                return n
            if text[j] in "{}":
                self._brace = text[j]
                i = j + 1
                continue
            if text[j] == q:
                if self._triple:
                    self._closing = 1
                    i = j + 1
                    continue
                self._string_done()
                return j + 1
            self._escape = "\\"
            i = j + 1
        return i

    def _string_done(self) -> None:
        self.args('"')
        if self._key:
            self._key = False
            self._st = V_COLON
        else:
            self._value_done()

    def _escaped(self, text: str, i: int) -> int:
        """Consume one character of an escape sequence; returns the next index."""
        c = text[i]
        esc = self._escape
        if self._raw:  # a raw string keeps the backslash and the character after it
            self._escape = ""
            self.args(json_string_body("\\" + c))
            return i + 1
        if len(esc) == 1:
            if c in _SIMPLE_ESCAPES:
                self._escape = ""
                self.args(json_string_body(_SIMPLE_ESCAPES[c]))
            elif c in "xuUN" or c in _OCTAL:
                self._escape = esc + c
            else:  # an unknown escape keeps its backslash, as Python does
                self._escape = ""
                self.args(json_string_body("\\" + c))
            return i + 1
        kind = esc[1]
        if kind in _OCTAL:
            if c in _OCTAL and len(esc) < 4:
                esc += c
                i += 1
                if len(esc) < 4:
                    self._escape = esc
                    return i
            self._escape = ""
            self._char(int(esc[1:], 8))
            return i
        if kind == "N":
            if len(esc) == 2 and c != "{":
                self._err("invalid \\N escape")
                return i
            if c != "}":
                self._escape = esc + c
                return i + 1
            self._escape = ""
            try:
                self.args(json_string_body(unicodedata.lookup(esc[3:])))
            except KeyError:
                self._err(f"unknown character name in {esc}}}")
            return i + 1
        need = {"x": 2, "u": 4, "U": 8}[kind]
        if c not in _HEX:
            self._err(f"invalid \\{kind} escape")
            return i
        esc += c
        if len(esc) - 2 < need:
            self._escape = esc
        else:
            self._escape = ""
            self._char(int(esc[2:], 16))
        return i + 1

    def _char(self, cp: int) -> None:
        if cp > 0x10FFFF:
            self._err("escape beyond the Unicode range")
        elif 0xD800 <= cp <= 0xDFFF:
            self.args(f"\\u{cp:04x}")  # a surrogate stays escaped (pairs still decode)
        else:
            self.args(json_string_body(chr(cp)))

    def _err(self, why: str) -> None:
        if self._error is None:
            self._error = why
        if self.verdict is None:
            self.verdict = False


def python_literal_json(raw: str) -> str | None:
    """A Python literal (`{'a': 1}`, `[True, None]`, `('x', 2)`) as compact JSON text, read
    by this codec's own literal parser (never `eval`); None when `raw` is not one literal."""
    body = raw.strip()
    if not body or len(body) > 1_000_000:
        return None
    codec = PythonicCallCodec(CallContext())
    used = codec.feed(f"[_(v={body})]")
    codec.close(truncated=False)
    if used != len(body) + 7 or codec._st != DONE:
        return None
    parts = []
    starts = 0
    for op in codec.ops:
        if isinstance(op, Start):
            starts += 1
        elif isinstance(op, Args):
            parts.append(op.json_text)
        elif not isinstance(op, End):
            return None
    if starts != 1:  # `1), g(x=2`: more than one literal
        return None
    text = "".join(parts)
    prefix = '{"v":'
    if not (text.startswith(prefix) and text.endswith("}")):
        return None
    return text[len(prefix) : -1]
