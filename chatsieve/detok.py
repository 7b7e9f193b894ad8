"""Incremental detokenizer and stop-string/stop-token checker: token ids in, `Piece`s out.

Both are sans-I/O (`feed(...) -> list[Piece]`, `finish() -> list[Piece]`), linear in the
output, and keep each piece's token ids and logprobs attached.
"""

from __future__ import annotations

import bisect
import codecs
import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from .events import Piece, TokenLogprob

if TYPE_CHECKING:
    from .tokenizer import Tokenizer

__all__ = ["Detokenizer", "StopChecker"]

_FFFD = "\ufffd"
# Generic path: tokens of already-emitted context kept in the decode window before it is
# trimmed (the window gives decoders that look at neighbours, e.g. a leading-space strip
# on the first token, the same context a whole-output decode has).
_WINDOW = 8
# Generic path: a tail ending in U+FFFD is held for at most this many tokens; a decoder
# whose incomplete characters span more tokens than that does not exist among ours.
_MAX_FFFD_HOLD = 4


class Detokenizer:
    """Turns generated token ids into text pieces, exactly as one `decode()` of them all.

    For every split of the ids into `feed` calls, the concatenated piece texts equal
    `tokenizer.decode(all_ids, skip_special_tokens=False)`. Incomplete UTF-8 is held
    back (U+FFFD appears only where decode() has it for good); every added token is a
    piece of its own (`special=True`) whose text is what decode() makes of it there --
    its content, except where the decoder rewrites it (Gemma's "▁▁" whitespace tokens
    become spaces). Each id lands in exactly one piece, in order, with its logprob.
    Pieces hold whole tokens: a token whose bytes end inside a character waits for the
    piece that completes that character.

    Byte-level BPE vocabularies (Qwen, Llama 3, gpt-oss, DeepSeek) decode token bytes
    with an incremental UTF-8 decoder. Gemma's byte-fallback decoder is piecewise
    (`Tokenizer.piecewise`): each token's text is its own, byte runs aside. Other
    SentencePiece-style decoders decode a short window of context plus the new ids and
    take the text past the context.
    """

    def __init__(self, tokenizer: Tokenizer) -> None:
        self._tok = tokenizer
        self._added_text: dict[int, str] = {}
        self._ids: list[int] = []  # pending ids (no text emitted for them yet)
        self._lps: list[TokenLogprob | None] = []
        self._byte_level = tokenizer.byte_level
        self._piecewise = not self._byte_level and getattr(tokenizer, "piecewise", False)
        # Ordinary tokens that make their own text whatever precedes them (see `plain`)
        self._plain: dict[int, str | None] | None = None
        if self._byte_level or self._piecewise:
            self._plain = getattr(tokenizer, "plain_texts", None)
        if self._byte_level:
            self._utf8 = codecs.getincrementaldecoder("utf-8")("replace")
            self._text: list[str] = []  # decoded text of the pending ids
        elif self._piecewise:
            self._run_ids: frozenset[int] = tokenizer.byte_fallback_ids
            self._run = bytearray()  # bytes of the pending byte-fallback run
        else:
            self._byte_ids: frozenset[int] = getattr(tokenizer, "byte_fallback_ids", frozenset())
            self._window: list[int] = []  # context ids (already emitted) + pending ids
            self._context_text = ""  # decode() of the context ids

    # -- public -----------------------------------------------------------------------

    def feed(self, token_ids: Sequence[int], logprobs: Sequence[TokenLogprob] | None = None) -> list[Piece]:
        if logprobs is not None and len(logprobs) != len(token_ids):
            raise ValueError(f"got {len(token_ids)} token ids but {len(logprobs)} logprobs; give one per id")
        out: list[Piece] = []
        if self._byte_level:
            push = self._push_byte_level
        else:
            push = self._push_piecewise if self._piecewise else self._push_window
        for k, token_id in enumerate(token_ids):
            lp = logprobs[k] if logprobs is not None else None
            if self._tok.is_added(token_id):
                self._flush(out)
                if self._byte_level or self._piecewise:
                    out.append(self._added_piece(token_id, lp))
                else:
                    self._push_window(token_id, lp, out, added=True)
            else:
                push(token_id, lp, out)
        return out

    def finish(self) -> list[Piece]:
        out: list[Piece] = []
        self._flush(out)
        if not (self._byte_level or self._piecewise):
            self._window, self._context_text = [], ""
        return out

    @property
    def pending(self) -> bool:
        """Whether ids fed so far wait for more (the first bytes of a character)."""
        return bool(self._ids)

    def plain(self, token_id: int) -> str | None:
        """The text `token_id` makes as a piece of its own if fed now, when that is all
        feeding it would do: nothing is pending and it is an ordinary token whose text
        does not depend on its neighbours (see `Tokenizer.plain_text`). Else None: feed
        it. Changes nothing; the caller that takes the text skips `feed` for this id."""
        table = self._plain
        if table is None or self._ids:
            return None
        text = table.get(token_id)
        if text is None and token_id not in table:
            text = self._tok.plain_text(token_id)
        return text

    # -- shared -----------------------------------------------------------------------

    def _piece(self, text: str) -> Piece:
        ids, lps = tuple(self._ids), self._lps
        logprobs = None if all(lp is None for lp in lps) else tuple(lp for lp in lps if lp is not None)
        self._ids, self._lps = [], []
        return Piece(text, ids, logprobs)

    def _added_piece(self, token_id: int, lp: TokenLogprob | None) -> Piece:
        text = self._added_text.get(token_id)
        if text is None:
            # decode() of the token alone: byte-level decoding is the same anywhere in
            # the output once pending bytes are flushed.
            text = self._added_text[token_id] = self._tok.decode([token_id])
        return Piece(text, (token_id,), (lp,) if lp is not None else None, special=True)

    def _flush(self, out: list[Piece]) -> None:
        """Emit everything pending, completing or replacing unfinished characters."""
        if self._byte_level:
            self._text.append(self._utf8.decode(b"", final=True))
            self._utf8.reset()
            text = "".join(self._text)
            self._text = []
        elif self._piecewise:
            text = self._run_text()
        elif self._ids:
            # The window stays as context for what follows (see `_push_window`).
            full = self._tok.decode(self._window)
            text = full[len(self._context_text) :]
            self._context_text = full
        else:
            text = ""
        if self._ids or text:
            out.append(self._piece(text))

    # -- byte-level BPE -----------------------------------------------------------------

    def _push_byte_level(self, token_id: int, lp: TokenLogprob | None, out: list[Piece]) -> None:
        self._ids.append(token_id)
        self._lps.append(lp)
        text = self._utf8.decode(self._tok.token_bytes(token_id))
        if text:
            self._text.append(text)
        # Emit only at a character boundary, so a piece holds whole tokens.
        if self._text and not self._utf8.getstate()[0]:
            out.append(self._piece("".join(self._text)))
            self._text = []

    # -- piecewise (SentencePiece byte fallback) --------------------------------------------

    def _push_piecewise(self, token_id: int, lp: TokenLogprob | None, out: list[Piece]) -> None:
        self._ids.append(token_id)
        self._lps.append(lp)
        if token_id in self._run_ids:
            # A byte-fallback run decodes all-or-nothing: wait for the token that ends it.
            self._run += self._tok.token_bytes(token_id)
            return
        text = self._run_text() + (self._tok.plain_text(token_id) or "")
        if text:  # a token with no text waits for the next piece, as on the byte-level path
            out.append(self._piece(text))

    def _run_text(self) -> str:
        """Text of the pending byte run, which has ended: its characters if it is valid
        UTF-8, else U+FFFD for each of its bytes (as the ByteFallback decoder does)."""
        run = self._run
        if not run:
            return ""
        try:
            text = run.decode("utf-8")
        except UnicodeDecodeError:
            text = _FFFD * len(run)
        run.clear()
        return text

    # -- generic (window) ---------------------------------------------------------------

    def _push_window(
        self, token_id: int, lp: TokenLogprob | None, out: list[Piece], *, added: bool = False
    ) -> None:
        self._ids.append(token_id)
        self._lps.append(lp)
        self._window.append(token_id)
        if token_id in self._byte_ids and not added:
            # A byte-fallback run decodes all-or-nothing (invalid UTF-8 anywhere in the run
            # turns every byte into U+FFFD), so wait for the token that ends the run.
            return
        text = self._tok.decode(self._window)
        context = self._context_text
        if not added:
            if len(text) <= len(context):
                return
            if text.endswith(_FFFD) and len(self._ids) <= _MAX_FFFD_HOLD:
                return
        # An added token is decoded in context too: some decoders change a token's text
        # by position (a leading-space strip on the first token of the output).
        piece = self._piece(text[len(context) :])
        out.append(Piece(piece.text, piece.token_ids, piece.logprobs, special=True) if added else piece)
        if len(self._window) > _WINDOW:
            # Cut the context back to the last token: it ends no byte run and starts none.
            self._window = self._window[-1:]
            self._context_text = self._tok.decode(self._window)
        else:
            self._context_text = text


class StopChecker:
    """Cuts the piece stream at the first stop string or stop token id.

    Stop strings are matched by one Aho-Corasick automaton over the output's characters, fed
    each character once: the work per character does not grow with the number of stop strings.

    A piece carrying a stop token id ends the output: it and everything after it is
    dropped. For stop strings the checker holds back the tail that could still become a
    stop string (never more than the longest stop string minus one character, plus
    whole special pieces) and cuts at the match that completes first (ties: the one that
    starts first), which is where token-by-token generation would have stopped. With
    `include_stop_str_in_output` the stop string itself is kept.

    A match never starts or ends inside a special piece, so a special piece is emitted,
    held or dropped whole. A cut inside an ordinary piece keeps the piece's ids and
    logprobs with the kept part (its token produced part of the kept text); tokens wholly
    after the cut are dropped with their logprobs.
    """

    def __init__(
        self,
        stop: Sequence[str] = (),
        stop_token_ids: Iterable[int] = (),
        include_stop_str_in_output: bool = False,
    ) -> None:
        if isinstance(stop, str):
            stop = (stop,)
        self._stops: tuple[str, ...] = tuple(dict.fromkeys(s for s in stop if s))
        self._auto = _StopAutomaton(self._stops) if self._stops else None
        self._state = 0  # the automaton's state after the text seen so far
        self._stop_ids = frozenset(stop_token_ids)
        self._include = include_stop_str_in_output
        self._held: list[Piece] = []
        self._buf = ""  # text of the held pieces
        self._special: list[tuple[int, int]] = []  # (start, end) in _buf of held special pieces
        self.stopped = False
        self.stop_reason: str | int | None = None

    def feed(self, pieces: list[Piece]) -> list[Piece]:
        if self.stopped:
            return []
        out: list[Piece] = []
        run: list[Piece] = []
        for piece in pieces:
            stop_id = next((i for i in piece.token_ids if i in self._stop_ids), None)
            if stop_id is None:
                run.append(piece)
                continue
            out += self._scan(run)
            if not self.stopped:
                out += self._release()
                self.stopped, self.stop_reason = True, stop_id
            return out
        out += self._scan(run)
        return out

    def finish(self) -> list[Piece]:
        return [] if self.stopped else self._release()

    @property
    def stop_ids(self) -> frozenset[int]:
        return self._stop_ids

    @property
    def has_strings(self) -> bool:
        """Whether any stop string is set (else only stop ids are)."""
        return bool(self._stops)

    def passes(self, text: str, token_id: int | None = None) -> bool:
        """Whether an ordinary piece of `text` (made by `token_id`, if given) would come
        straight out, alone and whole: nothing is held, it is no stop token, and it holds no
        character that could begin a stop string. Changes nothing: `feed` would change
        nothing either."""
        if self.stopped or self._held or token_id in self._stop_ids:
            return False
        auto = self._auto
        return auto is None or (self._state == 0 and auto.first.search(text) is None)

    # -- internals ----------------------------------------------------------------------

    def _release(self) -> list[Piece]:
        out, self._held, self._buf, self._special = self._held, [], "", []
        return out

    def _scan(self, run: list[Piece]) -> list[Piece]:
        if self._auto is None:
            return run
        old_len = len(self._buf)
        pos = old_len
        for p in run:
            if p.special:
                self._special.append((pos, pos + len(p.text)))
            pos += len(p.text)
        self._held.extend(run)
        self._buf += "".join(p.text for p in run)
        buf, n, auto = self._buf, len(self._buf), self._auto
        state, i = self._state, old_len
        best: tuple[int, int, str] | None = None  # (end, start, stop string)
        while i < n:
            if state == 0:
                # Outside any partial match: jump to the next character that can start one.
                m = auto.first.search(buf, i)
                if m is None:
                    break
                i = m.start()
            state = auto.step(state, buf[i])
            i += 1
            if auto.ends[state] and self._boundary(i):
                # The first end wins; at one end, the longest stop (earliest start) that does not
                # start inside a special piece.
                node = state if auto.stop[state] is not None else auto.ends_link[state]
                while node:
                    start = i - auto.depth[node]
                    if start >= 0 and self._boundary(start):
                        best = (i, start, auto.stop[node])
                        break
                    node = auto.ends_link[node]
                if best is not None:
                    break
        self._state = state
        if best is not None:
            end, start, s = best
            out = self._emit_upto(end if self._include else start)
            self._release()
            self.stopped, self.stop_reason = True, s
            return out
        return self._emit_upto(self._hold_start())

    def _boundary(self, i: int) -> bool:
        """Whether offset `i` of the held text is not strictly inside a special piece."""
        k = bisect.bisect_right(self._special, (i, len(self._buf) + 1)) - 1
        return k < 0 or not (self._special[k][0] < i < self._special[k][1])

    def _hold_start(self) -> int:
        """The earliest offset from which the held text could still grow into a stop string:
        the longest suffix that is a stop string's prefix, not starting inside a special piece."""
        n = len(self._buf)
        auto = self._auto
        node = self._state
        while node:
            j = n - auto.depth[node]
            if j >= 0 and self._boundary(j):
                return j
            node = auto.fail[node]
        return n

    def _emit_upto(self, cut: int) -> list[Piece]:
        """Emit the held text before `cut`; keep the rest held (shifted to offset 0)."""
        out: list[Piece] = []
        start = 0
        k = 0
        held = self._held
        while k < len(held):
            p = held[k]
            end = start + len(p.text)
            if end <= cut:
                out.append(p)
            elif start < cut:
                # Only ordinary pieces can straddle a cut: the head keeps the ids.
                out.append(Piece(p.text[: cut - start], p.token_ids, p.logprobs, p.special))
                tail_lps = None if p.logprobs is None else ()
                held[k] = Piece(p.text[cut - start :], (), tail_lps, p.special)
                break
            else:
                break
            start = end
            k += 1
        del held[:k]
        if cut:
            self._buf = self._buf[cut:]
            self._special = [(a - cut, b - cut) for a, b in self._special if a >= cut]
        return out


class _StopAutomaton:
    """Aho-Corasick over the stop strings: `step` is amortised O(1) per character whatever
    their number; `steps` counts transitions taken (goto and failure links), for tests."""

    def __init__(self, stops: Sequence[str]) -> None:
        goto: list[dict[str, int]] = [{}]
        self.depth = [0]
        self.stop: list[str | None] = [None]  # the stop string ending exactly at this node
        for s in stops:
            node = 0
            for ch in s:
                nxt = goto[node].get(ch)
                if nxt is None:
                    nxt = goto[node][ch] = len(goto)
                    goto.append({})
                    self.depth.append(self.depth[node] + 1)
                    self.stop.append(None)
                node = nxt
            self.stop[node] = s
        self.goto = goto
        self.fail = [0] * len(goto)
        self.ends_link = [0] * len(goto)  # nearest proper suffix node where a stop string ends
        self.ends = [s is not None for s in self.stop]  # a stop string ends here or at a suffix
        queue = list(goto[0].values())
        for node in queue:  # breadth first: a node's failure target is shallower
            for ch, child in goto[node].items():
                f = self.fail[node]
                while f and ch not in goto[f]:
                    f = self.fail[f]
                target = goto[f].get(ch, 0) if node else 0
                self.fail[child] = target if target != child else 0
                t = self.fail[child]
                self.ends_link[child] = t if self.stop[t] is not None else self.ends_link[t]
                self.ends[child] = self.ends[child] or self.ends[t]
                queue.append(child)
        self.first = re.compile("[" + "".join(re.escape(ch) for ch in sorted(goto[0])) + "]")
        self.steps = 0

    def step(self, state: int, ch: str) -> int:
        goto, fail = self.goto, self.fail
        self.steps += 1
        while True:
            nxt = goto[state].get(ch)
            if nxt is not None:
                return nxt
            if not state:
                return 0
            state = fail[state]
            self.steps += 1
