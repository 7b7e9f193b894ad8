"""Prompt encoding that reuses the token ids of an earlier prompt's unchanged prefix: the ids of
the longest cached prefix ending at a control token, then only the rest is tokenized.

Why this gives exactly the ids of one whole encode (`tokenizers`): the tokenizer first cuts the
text at its added (control) tokens and tokenizes each piece between them on its own. A prefix
that ends right after a control token `A` -- one that no other added token contains, continues
(no added token begins with a suffix of `A`), strips whitespace after, or matches only as a whole
word -- is therefore tokenized the same whatever follows it, and so is the rest of the text. The
rest is encoded as `A` + rest (and `A`'s id dropped again), so it is never the text's first piece
(a SentencePiece pre-tokenizer treats the first piece differently). `tests/test_prefix_cache.py`
compares the two on every shared tokenizer.

The cache is bounded (entries and tokens, least recently used out first) and keyed by content:
one per tokenizer, safe to use from several threads. It is partitioned (`partition`): an encode
reuses only the prefixes of prompts encoded in the same partition -- the server's is the caller's
identity, so how fast a prompt is encoded says nothing of what another API key sent.

A burst of prompts that share a long beginning (a team's agents: one system prompt, one set of
tools) would all miss the cache if they were encoded at once, before the first had filled it. So
an encode that finds a prompt of its partition being encoded that shares more with it than the
cache holds waits for that one (`_Flight`) and then reuses it: the shared part is tokenized once.

Inside `on_event_loop(n)` an encode never waits: one that would tokenize more than `n` characters,
or wait for a prompt being encoded, raises `WouldBlock` before it tokenizes anything, and the caller
does the work in a worker thread instead (the server prepares a request whose prompt is mostly
cached on its event loop, without the thread's hand-offs).
"""

from __future__ import annotations

import bisect
import contextlib
import contextvars
import threading
import time
import weakref
from array import array
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "Encoded", "PrefixCache", "WouldBlock", "check_event_loop", "configure", "current_partition", "encode",
    "on_event_loop", "partition",
]

MAX_ENTRIES = 64
MAX_TOKENS = 2_000_000  # ids kept over all entries of one tokenizer (4 bytes each, offsets 8, and the text twice)
MIN_TOKENS = 256  # a prompt shorter than this is encoded whole and not kept
_BUCKET_CHARS = 256  # entries are grouped by their first characters (a system prompt's start)
# An encode waits for a prompt being encoded only when that shares this many more characters with
# it than the best cached prefix does (about 250 tokens: a millisecond's tokenizing), and at most
# FLIGHT_WAIT seconds.
MIN_FLIGHT_GAIN = 1024
FLIGHT_WAIT = 5.0
_PARTITION: contextvars.ContextVar[str] = contextvars.ContextVar("chatsieve_prefix_partition", default="")


@contextlib.contextmanager
def partition(name: str):  # -> Iterator[None]
    """Encodes inside this block reuse (and leave) only entries of partition `name` (e.g. a
    caller's id); outside any block, the partition is ""."""
    token = _PARTITION.set(name)
    try:
        yield
    finally:
        _PARTITION.reset(token)


def current_partition() -> str:
    """The partition of the block this runs in ("" outside any)."""
    return _PARTITION.get()


class WouldBlock(Exception):
    """Inside `on_event_loop`: this encode would tokenize too much, or wait for another thread's."""


_LOOP_CHARS: contextvars.ContextVar[int | None] = contextvars.ContextVar("chatsieve_loop_chars", default=None)


@contextlib.contextmanager
def on_event_loop(max_chars: int):  # -> Iterator[None]
    """Inside this block, tokenizing more than `max_chars` characters at once, or waiting for a
    prompt another thread is encoding, raises `WouldBlock` instead, before tokenizing."""
    token = _LOOP_CHARS.set(max_chars)
    try:
        yield
    finally:
        _LOOP_CHARS.reset(token)


def check_event_loop(chars: int) -> None:
    """WouldBlock if tokenizing `chars` characters is too much for the `on_event_loop` block this
    runs in (nothing outside one)."""
    limit = _LOOP_CHARS.get()
    if limit is not None and chars > limit:
        raise WouldBlock(f"{chars} characters to tokenize, more than {limit} on the event loop")


class Encoded:
    """Token ids and (character) offsets of a prompt, as `tokenizers.Encoding` has them."""

    __slots__ = ("ids", "_offsets", "_flat")

    def __init__(self, ids: list[int], flat_offsets: array) -> None:
        self.ids = ids
        self._flat = flat_offsets  # start, end, start, end, ...
        self._offsets: list[tuple[int, int]] | None = None

    def span(self, i: int) -> tuple[int, int]:
        """Token `i`'s offsets."""
        if self._offsets is not None:
            return self._offsets[i]
        return self._flat[2 * i], self._flat[2 * i + 1]

    @property
    def offsets(self) -> list[tuple[int, int]]:
        if self._offsets is None:
            f = self._flat
            self._offsets = list(zip(f[0::2], f[1::2], strict=True))
        return self._offsets


class _Flight:
    """A prompt being encoded (whole, or its rest after a cached prefix) by some thread: encodes
    of its partition that would reuse more of it than of the cache wait for `done`."""

    __slots__ = ("partition", "text", "done")

    def __init__(self, partition: str, text: str) -> None:
        self.partition = partition
        self.text = text
        self.done = threading.Event()


@dataclass
class _Entry:
    text: str
    order: bytes  # `_order(text)`, what a bucket is sorted by: the text again, as UTF-8
    ids: array  # 'I'
    offsets: array  # 'I', flattened
    cuts: list[int]  # character positions right after a cut token, ascending
    counts: list[int] = field(default_factory=list)  # tokens up to and including that cut token
    partition: str = ""

    @property
    def key(self) -> tuple[str, str]:
        return self.partition, self.text

    @property
    def bucket(self) -> tuple[str, str]:
        return self.partition, self.text[:_BUCKET_CHARS]


class PrefixCache:
    """Encodings of recent prompts of one tokenizer, reused up to their longest shared cut."""

    def __init__(self, hf: Any, *, max_entries: int = MAX_ENTRIES, max_tokens: int = MAX_TOKENS) -> None:
        self._hf = hf
        self.max_entries = max_entries
        self.max_tokens = max_tokens
        # by (partition, text), least recently used first; buckets by (partition, first characters),
        # each sorted by text (`_order`), so the entries sharing most with a text are beside where it
        # would go
        self._entries: OrderedDict[tuple[str, str], _Entry] = OrderedDict()
        self._buckets: dict[tuple[str, str], list[_Entry]] = {}
        self._flights: list[_Flight] = []
        self._tokens = 0
        self._lock = threading.Lock()
        self._cut_ids = _cut_tokens(hf)  # id -> text
        self.hits = 0  # encodes that reused a prefix (for tests and the benchmark)
        self.reused_tokens = 0

    def encode(self, text: str) -> Encoded:
        """The encoding of `text` (add_special_tokens=False), the same as one whole encode."""
        if not self._cut_ids or self.max_entries <= 0 or self.max_tokens <= 0:
            check_event_loop(len(text))
            return self._whole(text, keep=False)
        part = _PARTITION.get()
        on_loop = _LOOP_CHARS.get() is not None
        order = _order(text)
        waited = 0.0
        while True:
            with self._lock:
                best = self._longest(text, order, part)
                cached = best[0].cuts[best[1]] if best is not None else 0
                ahead = self._ahead(text, part, cached)
                if on_loop:  # never wait, nor tokenize much, here: raise before a flight is registered
                    if ahead is not None:
                        raise WouldBlock("a prompt sharing this one's beginning is being encoded")
                    check_event_loop(len(text) - cached)
                if ahead is None or waited >= FLIGHT_WAIT:
                    flight = _Flight(part, text)
                    self._flights.append(flight)
                    break
            t0 = time.monotonic()
            ahead.done.wait(FLIGHT_WAIT - waited)  # then look again: it is in the cache now
            waited += time.monotonic() - t0
        try:
            return self._encode(text, order, part, best)
        finally:
            with self._lock:
                self._flights.remove(flight)
            flight.done.set()

    def _encode(self, text: str, order: bytes, part: str, best: tuple[_Entry, int] | None) -> Encoded:
        if best is None:
            return self._whole(text, keep=True, part=part, order=order)
        entry, i = best
        cut, count = entry.cuts[i], entry.counts[i]
        token = self._cut_ids[entry.ids[count - 1]]
        ids = entry.ids[:count]
        offsets = entry.offsets[: 2 * count]
        cuts, counts = entry.cuts[: i + 1], entry.counts[: i + 1]
        rest = text[cut:]
        if rest:
            enc = self._hf.encode_batch([token + rest], add_special_tokens=False)[0]
            shift = cut - len(token)
            if not enc.ids or self._cut_ids.get(enc.ids[0]) != token or enc.offsets[0] != (0, len(token)):
                check_event_loop(len(text))
                return self._whole(text, keep=True, part=part, order=order)  # not as the argument above says: never guess
            tail = enc.ids[1:]
            ids.extend(tail)
            for s, e in enc.offsets[1:]:
                offsets.append(s + shift)
                offsets.append(e + shift)
            self._add_cuts(text, tail, enc.offsets[1:], shift, count, cuts, counts)
        with self._lock:
            self.hits += 1
            self.reused_tokens += count
            self._keep(_Entry(text, order, ids, offsets, cuts, counts, part))
        return Encoded(ids.tolist(), offsets)

    # ---- internals ---------------------------------------------------------------------------
    def _whole(self, text: str, *, keep: bool, part: str = "", order: bytes | None = None) -> Encoded:
        enc = self._hf.encode_batch([text], add_special_tokens=False)[0]
        ids = enc.ids
        if not keep or len(ids) < MIN_TOKENS:
            return _from_encoding(ids, enc.offsets)
        flat = array("I")
        for s, e in enc.offsets:
            flat.append(s)
            flat.append(e)
        cuts: list[int] = []
        counts: list[int] = []
        self._add_cuts(text, ids, enc.offsets, 0, 0, cuts, counts)
        with self._lock:
            self._keep(_Entry(text, _order(text) if order is None else order, array("I", ids), flat, cuts, counts, part))
        return Encoded(ids, flat)

    def _add_cuts(self, text: str, ids: Sequence[int], offsets: Sequence[tuple[int, int]], shift: int,
                  base: int, cuts: list[int], counts: list[int]) -> None:
        """Record every cut token among `ids` (token `base + k` of the text) that covers exactly
        its own characters."""
        cut_ids = self._cut_ids
        for k, tid in enumerate(ids):
            token = cut_ids.get(tid)
            if token is not None:
                s, e = offsets[k]
                s += shift
                e += shift
                if e - s == len(token) and text.startswith(token, s):
                    cuts.append(e)
                    counts.append(base + k + 1)

    def _longest(self, text: str, order: bytes, part: str) -> tuple[_Entry, int] | None:
        """(entry of partition `part`, index of its cut) reaching furthest into `text`, or None.

        In a list sorted by text, the entries sharing the longest beginning with `text` are the
        two beside where it would go, so only those are compared."""
        bucket = self._buckets.get((part, text[:_BUCKET_CHARS]))
        if not bucket:
            return None
        at = bisect.bisect_left(bucket, order, key=_order_of)
        best: tuple[_Entry, int] | None = None
        best_cut = 0
        for entry in bucket[max(at - 1, 0):at + 1]:
            if not entry.cuts or entry.cuts[-1] <= best_cut:
                continue
            shared = _common_prefix(text, entry.text, entry.cuts[-1])
            i = bisect.bisect_right(entry.cuts, shared) - 1
            if i >= 0 and entry.cuts[i] > best_cut:
                best, best_cut = (entry, i), entry.cuts[i]
        if best is not None:
            self._entries.move_to_end(best[0].key)
        return best

    def _ahead(self, text: str, part: str, cached: int) -> _Flight | None:
        """A prompt of partition `part` being encoded that shares at least MIN_FLIGHT_GAIN more
        characters with `text` than the `cached` prefix does."""
        need = cached + MIN_FLIGHT_GAIN
        if len(text) <= need:
            return None
        for flight in self._flights:
            if flight.partition == part and _common_prefix(text, flight.text, need) >= need:
                return flight
        return None

    def _keep(self, entry: _Entry) -> None:
        old = self._entries.pop(entry.key, None)
        if old is not None:
            self._drop(old)
        bucket = self._buckets.get(entry.bucket, [])
        # an entry whose text the new one extends is redundant: the new one's cuts hold its cuts.
        # Such texts sort just before it (the agent's previous turn, when it is continued), so
        # only the entries right before it are looked at, not the whole bucket.
        at = bisect.bisect_left(bucket, entry.order, key=_order_of)
        while at > 0 and entry.text.startswith(bucket[at - 1].text):
            at -= 1
            other = bucket[at]
            del self._entries[other.key]
            self._drop(other)  # (drops the bucket once it is empty: it is looked up again below)
        if len(entry.ids) > self.max_tokens:
            return
        bisect.insort(self._buckets.setdefault(entry.bucket, []), entry, key=_order_of)
        self._entries[entry.key] = entry
        self._tokens += len(entry.ids)
        while len(self._entries) > self.max_entries or self._tokens > self.max_tokens:
            _, oldest = self._entries.popitem(last=False)
            self._drop(oldest)

    def _drop(self, entry: _Entry) -> None:
        self._tokens -= len(entry.ids)
        key = entry.bucket
        bucket = self._buckets.get(key, [])
        bucket[:] = [e for e in bucket if e is not entry]
        if not bucket:
            self._buckets.pop(key, None)


def _order(text: str) -> bytes:
    """`text` as UTF-8: its bytes sort as its characters do (code point order, lone surrogates
    included), and compare as fast as memcmp whatever the string's width (two texts that share
    thousands of characters, one beyond Latin-1, compared as strings took 5 µs each)."""
    return text.encode("utf-8", "surrogatepass")


def _order_of(entry: _Entry) -> bytes:
    return entry.order


def _from_encoding(ids: list[int], offsets: list[tuple[int, int]]) -> Encoded:
    enc = Encoded(ids, array("I"))
    enc._offsets = offsets
    return enc


def _common_prefix(a: str, b: str, limit: int) -> int:
    """Length of the common prefix of `a` and `b`, at most `limit` (a binary search that copies
    about twice the shared length in all: each step slices only the half it looks at)."""
    hi = min(len(a), len(b), limit)
    if a.startswith(b[:hi]):
        return hi
    lo = 0  # a[:lo] == b[:lo], a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a.startswith(b[lo:mid], lo):
            lo = mid
        else:
            hi = mid
    return lo


def _cut_tokens(hf: Any) -> dict[int, str]:
    """The added tokens a prefix may end at (see the module docstring): id -> text. Only
    special ones (the chat templates' own turn markers are); the checks are conservative."""
    try:
        added = hf.get_added_tokens_decoder()
    except Exception:  # no table: no cut is known to be safe
        return {}
    texts = [t.content for t in added.values() if t.content]
    everything = "\x00".join(texts)
    prefixes = {o[:k] for o in texts for k in range(1, len(o))}
    found: dict[int, str] = {}
    for tid, t in added.items():
        a = t.content
        if not a or a.isspace() or not t.special or t.normalized or t.rstrip or t.single_word:
            continue
        if everything.count(a) != 1 or any(a[k:] in prefixes for k in range(1, len(a))):
            continue  # inside another added token, or one may begin inside it
        found[tid] = a
    try:
        encodings = hf.encode_batch(list(found.values()), add_special_tokens=False) if found else []
    except Exception:
        return {}
    return {tid: a for (tid, a), enc in zip(found.items(), encodings, strict=True) if enc.ids == [tid]}


# ---- one cache per tokenizer ---------------------------------------------------------------------

_CACHES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_CACHES_LOCK = threading.Lock()
_LIMITS = {"max_entries": MAX_ENTRIES, "max_tokens": MAX_TOKENS}


def configure(*, max_entries: int = MAX_ENTRIES, max_tokens: int = MAX_TOKENS) -> None:
    """Bound every tokenizer's cache from now on (0 turns prefix reuse off); clears them."""
    with _CACHES_LOCK:
        _LIMITS.update(max_entries=max_entries, max_tokens=max_tokens)
        _CACHES.clear()


def cache_for(hf: Any) -> PrefixCache:
    """The cache of the `tokenizers.Tokenizer` `hf` (made on first use)."""
    cache = _CACHES.get(hf)
    if cache is None:
        with _CACHES_LOCK:
            cache = _CACHES.get(hf)
            if cache is None:
                cache = _CACHES[hf] = PrefixCache(hf, **_LIMITS)
    return cache


def encode(hf: Any, text: str) -> Encoded:
    """`hf.encode(text, add_special_tokens=False)`'s ids and offsets, reusing a cached prefix."""
    return cache_for(hf).encode(text)
