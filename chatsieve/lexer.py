"""Cuts decoded output into Text and Marker segments for a format's control strings.

Markers that resolve to a token id are recognised only when they arrive as that id
(token mode); a marker spelled around one control token (`<｜DSML｜tool_calls>`) only
when that token arrives as its id; the rest are matched as strings, holding back a tail
that could still become one. Work per input character is bounded.
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


@dataclass(frozen=True, slots=True)
class GatedText:
    """A marker that is several tokens around exactly one control token: `before` +
    `control` + `after` (DeepSeek V4's `<｜DSML｜tool_calls>` is "<", `｜DSML｜` (id 128825),
    "tool_calls>"). It counts only when `control` arrives as its own id `token_id`."""

    marker: str
    token_id: int
    before: str
    control: str
    after: str


class MarkerLexer:
    """Feed pieces, get segments; `finish()` flushes the held-back tail as text."""

    def __init__(
        self,
        text_markers: Iterable[str],
        id_markers: Mapping[int, str] | None = None,
        control_ids: Iterable[int] = (),
        gated_text: Iterable[GatedText] = (),
    ) -> None:
        self._text_markers = sorted({m for m in text_markers if m}, key=len, reverse=True)
        self._id_markers = dict(id_markers or {})
        self._gated: dict[int, list[GatedText]] = {}
        for g in gated_text:
            self._gated.setdefault(g.token_id, []).append(g)
        # A gated control token that completes no marker passes on as text: the family
        # spells its inner tags with it too (DSML `<｜DSML｜invoke name=...>`).
        self._control_ids = frozenset(control_ids) - set(self._id_markers) - set(self._gated)
        self._regex = (
            re.compile("|".join(re.escape(m) for m in self._text_markers)) if self._text_markers else None
        )
        self._prefixes = {m[:k] for m in self._text_markers for k in range(1, len(m))}
        # hold back text that could be the `before` part of a gated marker, whole or begun
        self._prefixes |= {g.before[:k] for gs in self._gated.values() for g in gs for k in range(1, len(g.before) + 1)}
        self._max_prefix = max((len(p) for p in self._prefixes), default=0)
        firsts = {p[0] for p in self._prefixes} | {m[0] for m in self._text_markers}
        self._first_re = re.compile("[" + "".join(re.escape(c) for c in sorted(firsts)) + "]") if firsts else None
        self._held = ""  # text not yet emitted (could still start a text marker)
        self._held_start = 0
        self._pos = 0  # offset of the next character to arrive
        # a gated control token has arrived: (candidates, text before it, its text), and
        # the text after it that could still complete a candidate
        self._pending: tuple[list[GatedText], str, str] | None = None
        self._after = ""

    def feed(self, piece: Piece) -> list[Segment]:
        out: list[Segment] = []
        tid = piece.token_ids[0] if piece.special and len(piece.token_ids) == 1 else None
        control = tid is not None and (tid in self._gated or tid in self._id_markers or tid in self._control_ids)
        if self._pending is not None:
            if not control:  # text, even an added token's (Gemma's whitespace runs)
                self._after += piece.text
                self._settle(out, final=False)
                return out
            self._settle(out, final=True)
        if control:
            gated = self._gated.get(tid)
            if gated is not None:
                self._open_gated(piece.text, gated, out)
                return out
            self._flush(out)
            out.append(Marker(piece.text, self._pos, known=tid in self._id_markers))
            self._pos += len(piece.text)
            self._held_start = self._pos
            return out
        self._scan(piece.text, out)
        return out

    @property
    def marker_chars(self) -> re.Pattern | None:
        """Matches a character that can begin a text marker (None: no text markers);
        text without one passes `take_plain`'s own check."""
        return self._first_re

    def take_plain(self, text: str) -> int | None:
        """Fast lane: when feeding an ordinary (non-control) piece of `text` would give
        exactly `Text(text, start)` (nothing is held or pending, and no character of it
        can begin a marker), take it so and return `start`; else None, nothing taken."""
        start = self.plain_start(text)
        if start is not None:
            self._pos = self._held_start = start + len(text)  # (`took_plain`, inline: once per token)
        return start

    def plain_start(self, text: str) -> int | None:
        """The `start` `take_plain(text)` would return, taking nothing."""
        if self._held or self._pending is not None:
            return None
        if self._first_re is not None and self._first_re.search(text) is not None:
            return None
        return self._pos

    def took_plain(self, start: int, text: str) -> None:
        """`take_plain(text)` once `plain_start(text)` has returned `start`, not checked again."""
        self._pos = self._held_start = start + len(text)

    def finish(self) -> list[Segment]:
        out: list[Segment] = []
        if self._pending is not None:
            self._settle(out, final=True)
        self._flush(out)
        return out

    def _open_gated(self, control: str, gated: list[GatedText], out: list[Segment]) -> None:
        """A gated control token arrived as its id: wait for the text that completes one
        of its markers (the text before it is held already, see `_prefixes`)."""
        held = self._held
        cands = [g for g in gated if g.control == control and held.endswith(g.before)]
        if not cands:
            self._scan(control, out)
            return
        keep = max(len(g.before) for g in cands)
        if len(held) > keep:
            out.append(Text(held[: len(held) - keep], self._held_start))
        self._held_start += len(held) - keep
        self._held = ""
        self._pending = (cands, held[len(held) - keep :], control)
        self._after = ""
        self._settle(out, final=False)

    def _settle(self, out: list[Segment], final: bool) -> None:
        """Decide the pending gated marker once no longer candidate can still complete
        (or at `final`): the longest completed one is a Marker; none, and the text is text."""
        assert self._pending is not None
        cands, before, control = self._pending
        after = self._after
        if not final and any(len(g.after) > len(after) and g.after.startswith(after) for g in cands):
            return
        done = [g for g in cands if after.startswith(g.after)]
        start = self._held_start
        self._pending, self._after = None, ""
        if done:
            g = max(done, key=lambda g: len(g.marker))
            skip = len(before) - len(g.before)
            if skip:
                out.append(Text(before[:skip], start))
            out.append(Marker(g.marker, start + skip))
            used = len(before) + len(control) + len(g.after)
            rest = after[len(g.after) :]
        else:
            out.append(Text(before + control, start))
            used = len(before) + len(control)
            rest = after
        self._pos = start + used
        self._held_start = self._pos
        self._scan(rest, out)

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
        if self._first_re is None:  # nothing to match or hold
            out.append(Text(buf, base))
            self._held = ""
            self._held_start = self._pos
            return
        i = 0
        for m in self._regex.finditer(buf) if self._regex is not None else ():
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
