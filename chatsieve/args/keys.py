"""Unique keys in a call's argument JSON. Any codec can meet a repeated key (`<parameter=a>`
twice, `f(a=1, a=2)`, `{"a": 1, "a": 2}`); the engine passes every call's JSON through here.

Released whole, the last value wins (as JSON parsers read it). Streamed, what was sent
cannot be taken back, so the first wins. Either way the other member is reported. Both
walk the JSON once, skipping strings by regex, with their own stack (any depth).
"""

from __future__ import annotations

import json
import re

_STRING_STOP = re.compile(r'["\\]')
_WS = " \t\r\n"


def _decode_key(raw: str) -> str:
    try:
        return json.loads(raw)
    except ValueError:  # not reached for the codecs' JSON: compare the spelling then
        return raw


def _string_end(text: str, i: int) -> int:
    """The index after the closing quote of the string whose body starts at `i`, or -1."""
    while True:
        m = _STRING_STOP.search(text, i)
        if m is None:
            return -1
        if m.group() == '"':
            return m.end()
        i = m.end() + 1


def last_key_wins(text: str) -> tuple[str, list[tuple[str, str]]]:
    """`text` (one JSON value) with every object's repeated keys removed but the last,
    and the removed members as (key, member text)."""
    objects: list[tuple[dict, list[int]] | None] = []  # open containers: keys and member starts
    cut: list[tuple[int, int, str]] = []
    want_key = False
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == '"':
            end = _string_end(text, i + 1)
            end = n if end < 0 else end
            if want_key and objects and objects[-1] is not None:
                keys, starts = objects[-1]
                keys.setdefault(_decode_key(text[i:end]), []).append(len(starts))
                starts.append(i)
            want_key = False
            i = end
            continue
        if c in _WS:
            i += 1
            continue
        want_key = False
        if c == "{":
            objects.append(({}, []))
            want_key = True
        elif c == "[":
            objects.append(None)
        elif c == "," and objects and objects[-1] is not None:
            want_key = True
        elif c in "}]" and objects:
            top = objects.pop()
            if top is not None:
                keys, starts = top
                starts.append(i)
                for key, members in keys.items():
                    # a removed member always has a later one: it goes with its comma
                    cut.extend((starts[k], starts[k + 1], key) for k in members[:-1])
        i += 1
    if not cut:
        return text, []
    cut.sort()
    out: list[str] = []
    dropped: list[tuple[str, str]] = []
    pos = 0
    for a, b, key in cut:
        if a < pos:
            continue  # inside a member already removed
        out.append(text[pos:a])
        dropped.append((key, text[a:b].rstrip(_WS).removesuffix(",").rstrip(_WS)))
        pos = b
    out.append(text[pos:])
    return "".join(out), dropped


VALUE, STRING, KEY, COLON, SKIP = range(5)


class FirstKeyWins:
    """A streaming filter over one call's argument JSON fragments: a member whose key its
    object already has is left out (the first value has been sent). `dropped` collects
    the left-out members as (key, member text)."""

    __slots__ = ("_objects", "_mode", "_want_key", "_held", "_esc", "_depth", "_in_str", "_key", "dropped")

    def __init__(self) -> None:
        self._objects: list[set | None] = []  # open containers: an object's keys, or None
        self._mode = VALUE
        self._want_key = False
        self._held: list[str] = []  # a member's comma, key and colon until the key is known
        self._esc = False  # inside a string, right after a backslash
        self._depth = 0  # SKIP: containers open inside the skipped value
        self._in_str = False  # SKIP: inside a string
        self._key = ""  # SKIP: the repeated key
        self.dropped: list[tuple[str, str]] = []

    def feed(self, text: str) -> str:
        out: list[str] = []
        i, n = 0, len(text)
        while i < n:
            mode = self._mode
            if mode in (STRING, KEY) or (mode == SKIP and self._in_str):
                j = self._string(text, i)
                (self._held if mode != STRING else out).append(text[i:j])
                i = j
                continue
            c = text[i]
            if mode == SKIP:
                if c in "{[":
                    self._depth += 1
                elif c in "}]," and self._depth == 0:
                    held = "".join(self._held)
                    self.dropped.append((self._key, held.lstrip(_WS).removeprefix(",").lstrip(_WS)))
                    self._held = []
                    self._mode = VALUE
                    continue  # the object's own `,` or `}`
                elif c in "}]":
                    self._depth -= 1
                elif c == '"':
                    self._in_str = True
                self._held.append(c)
                i += 1
                continue
            if mode == COLON:
                self._held.append(c)
                i += 1
                if c == ":":
                    self._key_done(out)
                continue
            i += 1
            if c == '"':
                if self._want_key:
                    self._held.append(c)
                    self._mode = KEY
                else:
                    out.append(c)
                    self._mode = STRING
                self._want_key = False
                continue
            if c in _WS:
                (self._held if self._held else out).append(c)
                continue
            self._want_key = False
            top = self._objects[-1] if self._objects else None
            if c == "," and top is not None:
                self._held.append(c)
                self._want_key = True
                continue
            if self._held:  # not a member after all (not reached for valid JSON)
                out.extend(self._held)
                self._held = []
            if c == "{":
                self._objects.append(set())
                self._want_key = True
            elif c == "[":
                self._objects.append(None)
            elif c in "}]" and self._objects:
                self._objects.pop()
            out.append(c)
        return "".join(out)

    def _string(self, text: str, i: int) -> int:
        """Read string text from `i`; at its closing quote, leave the string state."""
        n = len(text)
        if self._esc:
            self._esc = False
            i += 1
        while i < n:
            m = _STRING_STOP.search(text, i)
            if m is None:
                return n
            if m.group() == "\\":
                if m.end() == n:
                    self._esc = True
                    return n
                i = m.end() + 1
                continue
            if self._mode == SKIP:
                self._in_str = False
            else:
                self._mode = COLON if self._mode == KEY else VALUE
            return m.end()
        return n

    def _key_done(self, out: list[str]) -> None:
        held = "".join(self._held)
        key = _decode_key(held[held.index('"') : held.rindex(":")].rstrip(_WS))
        keys = self._objects[-1]
        if key in keys:
            self._held = [held]
            self._key = key
            self._depth = 0
            self._in_str = False
            self._mode = SKIP
            return
        keys.add(key)
        out.append(held)
        self._held = []
        self._mode = VALUE
