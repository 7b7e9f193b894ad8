"""Cuts decoded output into Text and Marker segments for a format's control strings.

Markers that resolve to a token id are recognised only when they arrive as that id
(token mode); the rest are matched as strings, holding back a tail that could still
become one. Work per input character is bounded.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .events import Piece


@dataclass(frozen=True, slots=True)
class Text:
    text: str
    start: int  # offset of text[0] in the whole decoded output


@dataclass(frozen=True, slots=True)
class Marker:
    text: str  # the control string, e.g. "<tool_call>"
    start: int
    known: bool = True  # False: a control token the format does not know (dropped, never shown)


Segment = Text | Marker


class MarkerLexer:
    """Feed pieces, get segments; `finish()` flushes the held-back tail as text."""

    def __init__(
        self,
        text_markers: Iterable[str],
        id_markers: Mapping[int, str] | None = None,
        control_ids: Iterable[int] = (),
    ) -> None:
        self._text_markers = sorted({m for m in text_markers if m}, key=len, reverse=True)
        self._id_markers = dict(id_markers or {})
        self._control_ids = frozenset(control_ids) - set(self._id_markers)
        self._regex = (
            re.compile("|".join(re.escape(m) for m in self._text_markers)) if self._text_markers else None
        )
        self._prefixes = {m[:k] for m in self._text_markers for k in range(1, len(m))}
        self._max_prefix = max((len(p) for p in self._prefixes), default=0)
        firsts = {m[0] for m in self._text_markers}
        self._first_re = re.compile("[" + "".join(re.escape(c) for c in sorted(firsts)) + "]") if firsts else None
        self._held = ""  # text not yet emitted (could still start a text marker)
        self._held_start = 0
        self._pos = 0  # offset of the next character to arrive

    def feed(self, piece: Piece) -> list[Segment]:
        out: list[Segment] = []
        if piece.special and len(piece.token_ids) == 1:
            tid = piece.token_ids[0]
            marker = self._id_markers.get(tid)
            if marker is not None or tid in self._control_ids:
                self._flush(out)
                out.append(Marker(piece.text, self._pos, known=marker is not None))
                self._pos += len(piece.text)
                self._held_start = self._pos
                return out
        self._scan(piece.text, out)
        return out

    def finish(self) -> list[Segment]:
        out: list[Segment] = []
        self._flush(out)
        return out

    def _flush(self, out: list[Segment]) -> None:
        if self._held:
            out.append(Text(self._held, self._held_start))
            self._held = ""
        self._held_start = self._pos

    def _scan(self, text: str, out: list[Segment]) -> None:
        if not text:
            return
        buf = self._held + text
        base = self._held_start
        self._pos += len(text)
        if self._regex is None:
            out.append(Text(buf, base))
            self._held = ""
            self._held_start = self._pos
            return
        i = 0
        for m in self._regex.finditer(buf):
            if m.start() > i:
                out.append(Text(buf[i : m.start()], base + i))
            out.append(Marker(m.group(), base + m.start()))
            i = m.end()
        keep = self._tail_prefix_len(buf, i)
        end = len(buf) - keep
        if end > i:
            out.append(Text(buf[i:end], base + i))
        self._held = buf[end:]
        self._held_start = base + end

    def _tail_prefix_len(self, buf: str, lo: int) -> int:
        """Length of the longest tail of buf[lo:] that is a proper prefix of a marker."""
        n = len(buf)
        m = self._first_re.search(buf, max(lo, n - self._max_prefix))
        while m is not None:
            if buf[m.start() :] in self._prefixes:
                return n - m.start()
            m = self._first_re.search(buf, m.start() + 1)
        return 0
