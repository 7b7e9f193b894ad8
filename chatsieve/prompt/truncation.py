"""Prompt length: a cheap lower bound on a text's token count (to refuse an over-long prompt before
encoding it all), and cutting token ids to a maximum length on either side."""

from __future__ import annotations

from typing import Any

from ..prefix_cache import check_event_loop
from ..tokenizer import Tokenizer

# Piecewise counting (below): pieces of about this many characters, cut before a space; each cut
# may save at most this many tokens against encoding the whole text.
_COUNT_PIECE = 32_768
_CUT_SLACK = 4


def min_tokens(tok: Tokenizer, text: str, limit: int) -> int:
    """A lower bound on the number of tokens of `text`, cheap next to encoding it whole.

    Every token holds at least one byte, so text of at most `limit` bytes is never too long; and no
    token holds more bytes than the vocabulary's longest, which bounds the count from below. When
    that does not decide and the text is several times longer than the limit in bytes, it is
    encoded in pieces cut before a space (the pre-tokenizers here start a word there), counting
    each piece's tokens less a slack per cut, until the count passes the limit: an over-long
    prompt is then refused after encoding about `limit` tokens, in memory for one piece.
    """
    size = len(text.encode("utf-8", "surrogatepass"))
    if size <= limit:
        return 0
    floor = -(-size // _longest_token_bytes(tok))
    if floor > limit or size < 6 * limit or len(text) <= 2 * _COUNT_PIECE:
        return floor  # (a short text is cheap to encode whole, and its count is then exact)
    counted, start = 0, 0
    while start < len(text):
        end = text.find(" ", start + _COUNT_PIECE)
        end = len(text) if end < 0 else end
        piece = text[start:end]
        check_event_loop(len(piece))
        counted += len(tok.hf.encode_batch([piece], add_special_tokens=False)[0].ids)
        counted -= _CUT_SLACK if end < len(text) else 0
        if counted > limit:
            return counted
        start = end
    return max(floor, 0)


_LONGEST_CACHE: dict[int, tuple[Any, int]] = {}


def _longest_token_bytes(tok: Tokenizer) -> int:
    hit = _LONGEST_CACHE.get(id(tok.hf))
    if hit is not None and hit[0] is tok.hf:
        return hit[1]
    # Vocabulary strings: a byte-level piece spends at least one UTF-8 byte per byte it stands
    # for, a SentencePiece piece exactly its bytes (a byte-fallback "<0xNN>" far more than its
    # one byte): an upper bound either way.
    longest = max((len(p.encode("utf-8", "surrogatepass")) for p in tok.hf.get_vocab(with_added_tokens=True)),
                  default=1)
    _LONGEST_CACHE[id(tok.hf)] = (tok.hf, max(longest, 1))
    return max(longest, 1)


def truncate(ids: list[int], spans: list[tuple[int, int]], max_length: int, side: str):
    """`ids` cut to `max_length` on `side` ("left" keeps the end), and the spans that remain, clipped."""
    if len(ids) <= max_length:
        return ids, spans
    if side == "left":
        cut = len(ids) - max_length
        ids = ids[cut:]
        spans = [(max(s - cut, 0), e - cut) for s, e in spans if e - cut > 0]
    else:
        ids = ids[:max_length]
        spans = [(s, min(e, max_length)) for s, e in spans if s < max_length]
    return ids, spans
