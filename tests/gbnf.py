"""A small GBNF recognizer for tests: does a grammar accept a string?

Covers what chatsieve.grammar writes (and llama.cpp's grammar README describes): rules,
string literals, character classes (ranges, negation, escapes), groups, alternation,
`?`, `*`, `+`, `{m}`, `{m,n}`, and token references `<[id]>` / `!<[id]>`. A token is
matched against one stand-in character, `token_char(id)`, so a test spells a control token
that way; `!<[id]>` matches any one character but that one. Sets of end positions with memoisation: slow, exact, fine for test-sized inputs.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

TOKEN_BASE = 0xF0000  # private-use plane: stand-in characters for token ids
_STAND_INS: dict[int, str] = {}
_IDS: dict[str, int] = {}


def token_char(token_id: int) -> str:
    """The stand-in character for a token id (one per id, from the private-use plane)."""
    if token_id not in _STAND_INS:
        c = chr(TOKEN_BASE + len(_STAND_INS))
        _STAND_INS[token_id] = c
        _IDS[c] = token_id
    return _STAND_INS[token_id]


@dataclass(frozen=True)
class Lit:
    text: str


@dataclass(frozen=True)
class Cls:
    ranges: tuple[tuple[int, int], ...]
    negated: bool


@dataclass(frozen=True)
class Tok:
    token_id: int
    negated: bool


@dataclass(frozen=True)
class Ref:
    name: str


@dataclass(frozen=True)
class Seq:
    items: tuple


@dataclass(frozen=True)
class Alt:
    options: tuple


@dataclass(frozen=True)
class Rep:
    item: object
    lo: int
    hi: int | None


_ESC = {"n": "\n", "r": "\r", "t": "\t", "\\": "\\", '"': '"', "[": "[", "]": "]", "-": "-", "/": "/"}


class _Parser:
    def __init__(self, src: str) -> None:
        self.s = src
        self.i = 0

    def ws(self, newlines: bool) -> None:
        while self.i < len(self.s):
            c = self.s[self.i]
            if c == "#":
                while self.i < len(self.s) and self.s[self.i] != "\n":
                    self.i += 1
            elif c in " \t" or (newlines and c in "\r\n"):
                self.i += 1
            else:
                return

    def char(self) -> str:
        c = self.s[self.i]
        if c != "\\":
            self.i += 1
            return c
        e = self.s[self.i + 1]
        if e == "x":
            self.i += 4
            return chr(int(self.s[self.i - 2 : self.i], 16))
        if e == "u":
            self.i += 6
            return chr(int(self.s[self.i - 4 : self.i], 16))
        self.i += 2
        return _ESC[e]

    def rules(self) -> dict[str, object]:
        out = {}
        self.ws(True)
        while self.i < len(self.s):
            m = re.compile(r"[A-Za-z0-9_-]+").match(self.s, self.i)
            assert m, f"rule name expected at {self.s[self.i:self.i + 30]!r}"
            self.i = m.end()
            self.ws(False)
            assert self.s.startswith("::=", self.i), f"::= expected after {m.group()}"
            self.i += 3
            out[m.group()] = self.alt(top=True)
            self.ws(True)
        return out

    def alt(self, top: bool = False) -> object:
        options = [self.seq(top)]
        while self.i < len(self.s) and self.s[self.i] == "|":
            self.i += 1
            options.append(self.seq(top))
        return options[0] if len(options) == 1 else Alt(tuple(options))

    def seq(self, top: bool) -> object:
        items = []
        while True:
            self.ws(not top)
            if self.i >= len(self.s) or self.s[self.i] in "|)\n":
                break
            items.append(self.postfix(self.atom()))
        return items[0] if len(items) == 1 else Seq(tuple(items))

    def atom(self) -> object:
        c = self.s[self.i]
        if c == '"':
            self.i += 1
            text = []
            while self.s[self.i] != '"':
                text.append(self.char())
            self.i += 1
            return Lit("".join(text))
        if c == "[":
            self.i += 1
            negated = self.s[self.i] == "^"
            self.i += negated
            ranges = []
            while self.s[self.i] != "]":
                a = self.char()
                b = a
                if self.s[self.i] == "-" and self.s[self.i + 1] != "]":
                    self.i += 1
                    b = self.char()
                ranges.append((ord(a), ord(b)))
            self.i += 1
            return Cls(tuple(ranges), negated)
        if c == "(":
            self.i += 1
            inner = self.alt()
            self.ws(True)
            assert self.s[self.i] == ")", "')' expected"
            self.i += 1
            return inner
        if c in "<!":
            m = re.compile(r"(!?)<\[(\d+)\]>").match(self.s, self.i)
            assert m, "token reference expected"
            self.i = m.end()
            return Tok(int(m.group(2)), bool(m.group(1)))
        m = re.compile(r"[A-Za-z0-9_-]+").match(self.s, self.i)
        assert m, f"unexpected {self.s[self.i:self.i + 20]!r}"
        self.i = m.end()
        return Ref(m.group())

    def postfix(self, item: object) -> object:
        while self.i < len(self.s):
            c = self.s[self.i]
            if c == "?":
                item = Rep(item, 0, 1)
            elif c == "*":
                item = Rep(item, 0, None)
            elif c == "+":
                item = Rep(item, 1, None)
            elif c == "{":
                m = re.compile(r"\{(\d+)(,(\d*))?\}").match(self.s, self.i)
                assert m, "bad repetition"
                lo = int(m.group(1))
                hi = lo if m.group(2) is None else (int(m.group(3)) if m.group(3) else None)
                item = Rep(item, lo, hi)
                self.i = m.end() - 1
            else:
                return item
            self.i += 1
        return item


def parse(src: str) -> dict[str, object]:
    """GBNF text -> rules (AssertionError on text this recognizer does not read)."""
    rules = _Parser(src).rules()
    for body in rules.values():
        _check_refs(body, rules)
    return rules


def _check_refs(node: object, rules: dict) -> None:
    if isinstance(node, Ref):
        assert node.name in rules, f"undefined rule {node.name!r}"
    for child in getattr(node, "items", ()) or getattr(node, "options", ()):
        _check_refs(child, rules)
    if isinstance(node, Rep):
        _check_refs(node.item, rules)


def accepts(grammar: str, text: str, root: str = "root") -> bool:
    rules = parse(grammar)

    @functools.cache
    def ends(node: object, pos: int) -> frozenset[int]:
        if isinstance(node, Lit):
            return frozenset({pos + len(node.text)}) if text.startswith(node.text, pos) else frozenset()
        if isinstance(node, Cls):
            if pos >= len(text) or ord(text[pos]) >= TOKEN_BASE:
                return frozenset()
            inside = any(a <= ord(text[pos]) <= b for a, b in node.ranges)
            return frozenset({pos + 1}) if inside != node.negated else frozenset()
        if isinstance(node, Tok):  # `!<[id]>`: any one token but id; here, any one character
            if pos >= len(text):
                return frozenset()
            same = _IDS.get(text[pos]) == node.token_id
            return frozenset({pos + 1}) if same != node.negated else frozenset()
        if isinstance(node, Ref):
            return ends(rules[node.name], pos)
        if isinstance(node, Seq):
            cur = frozenset({pos})
            for item in node.items:
                cur = frozenset(e for p in cur for e in ends(item, p))
                if not cur:
                    break
            return cur
        if isinstance(node, Alt):
            return frozenset(e for o in node.options for e in ends(o, pos))
        if isinstance(node, Rep):
            out: set[int] = set()
            cur = frozenset({pos})
            count = 0
            seen: set[int] = set()
            while cur:
                if count >= node.lo:
                    out |= cur
                if node.hi is not None and count >= node.hi:
                    break
                cur = frozenset(e for p in cur for e in ends(node.item, p) if e not in seen or e > p) - seen
                seen |= cur
                count += 1
            return frozenset(out)
        raise AssertionError(f"unknown node {node!r}")

    return len(text) in ends(Ref(root), 0)
