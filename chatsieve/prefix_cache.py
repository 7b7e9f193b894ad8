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

The cache is a tree per partition: runs of prompt text that end at a cut, each with its tokens, so
a beginning many prompts share (a team's system prompt and tools) is held once, and a prompt is
found by comparing each run along its way once (`_Node`, `PrefixCache._longest`). It is bounded
(prompts held and tokens, least recently used out first) and keyed by content: one per tokenizer,
safe to use from several threads. It is partitioned (`partition`): an encode
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
from typing import Any

__all__ = [
    "Encoded", "PrefixCache", "WouldBlock", "check_event_loop", "configure", "current_partition", "encode",
    "on_event_loop", "partition",
]

MAX_ENTRIES = 64  # prompts kept (the trees' leaves) per tokenizer
# ids kept over all prompts of one tokenizer, a shared beginning once: 4 bytes each until reused,
# then 8 (a list of the tokenizer's one int object per id, `_Node.ids`); offsets 8; the text once
MAX_TOKENS = 2_000_000
MIN_TOKENS = 256  # a prompt shorter than this is encoded whole and not kept
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


class _Node:
    """A run of cached prompt text that ends right after a cut token: characters [start, end) of
    every prompt whose path from its partition's root passes through it, with their tokens.

    Its text, tokens and cuts never change once it is made (a split makes two new nodes; `ids`
    becomes an equal list once), so an encode may read a node it found after letting go of the
    lock; the tree's links (`parent`, `children`, `alive`) change under the cache's lock."""

    __slots__ = ("parent", "start", "end", "text", "base", "ids", "offsets", "cuts", "counts", "children",
                 "alive", "partition")

    def __init__(self, parent: _Node | None, start: int, text: str, base: int, ids: Any, offsets: array,
                 cuts: list[int], counts: list[int], partition: str) -> None:
        self.parent = parent
        self.start = start
        self.end = start + len(text)
        self.text = text
        self.base = base  # tokens before `start`
        # its tokens: an array('I') until a later prompt reuses them, then a list of the cache's
        # int objects (`PrefixCache._as_list`): a prompt's ids are then made by copying pointers,
        # not by making an int per id (5,000 ids: 7 µs against 50)
        self.ids = ids
        self.offsets = offsets  # 'I', flattened, in the whole prompt's characters
        self.cuts = cuts  # character positions in (start, end] right after a cut token; the last is `end`
        self.counts = counts  # tokens of the whole prompt up to each cut
        self.children: list[_Node] = []  # sorted by text
        self.alive = True
        self.partition = partition


def _root(partition: str) -> _Node:
    return _Node(None, 0, "", 0, [], array("I"), [], [], partition)


class PrefixCache:
    """Encodings of recent prompts of one tokenizer, reused up to their longest shared cut.

    The prompts are kept as a tree per partition (a radix tree of text runs that end at cuts): a
    beginning many prompts share (a team's system prompt and tools) is held once, and a prompt is
    found by walking from the root, comparing each run's text once, with its characters of the
    same width (`_shared`)."""

    def __init__(self, hf: Any, *, max_entries: int = MAX_ENTRIES, max_tokens: int = MAX_TOKENS) -> None:
        self._hf = hf
        self.max_entries = max_entries  # prompts held: the leaves of the trees
        self.max_tokens = max_tokens  # over all nodes
        self._roots: dict[str, _Node] = {}
        self._leaves: OrderedDict[_Node, None] = OrderedDict()  # least recently used first
        self._flights: list[_Flight] = []
        self._tokens = 0
        self._lock = threading.Lock()
        self._cut_ids = _cut_tokens(hf)  # id -> text
        self.hits = 0  # encodes that reused a prefix (for tests and the benchmark)
        self.reused_tokens = 0
        self._ints: list[int] | None = None  # one int object per token id, made on first reuse

    def encode(self, text: str) -> Encoded:
        """The encoding of `text` (add_special_tokens=False), the same as one whole encode."""
        if not self._cut_ids or self.max_entries <= 0 or self.max_tokens <= 0:
            check_event_loop(len(text))
            return self._whole(text, keep=False)
        part = _PARTITION.get()
        on_loop = _LOOP_CHARS.get() is not None
        waited = 0.0
        while True:
            with self._lock:
                best = self._longest(text, part)
                cached = best[-1].cuts[-1] if best else 0
                ahead = self._ahead(text, part, cached)
                if on_loop:  # never wait, nor tokenize much, here: raise before a flight is registered
                    if ahead is not None:
                        raise WouldBlock("a prompt sharing this one's beginning is being encoded")
                    check_event_loop(len(text) - cached)
                if ahead is None or waited >= FLIGHT_WAIT:
                    # another encode waits only for one that would give it MIN_FLIGHT_GAIN characters
                    # more than the cache; what this one adds to the cache is its rest
                    flight = _Flight(part, text) if len(text) - cached >= MIN_FLIGHT_GAIN else None
                    if flight is not None:
                        self._flights.append(flight)
                    break
            t0 = time.monotonic()
            ahead.done.wait(FLIGHT_WAIT - waited)  # then look again: it is in the cache now
            waited += time.monotonic() - t0
        try:
            return self._encode(text, part, best)
        finally:
            if flight is not None:
                with self._lock:
                    self._flights.remove(flight)
                flight.done.set()

    def _encode(self, text: str, part: str, path: list[_Node]) -> Encoded:
        if not path:
            return self._whole(text, keep=True, part=part)
        last = path[-1]  # (its end is the cached prefix's: `_longest` cut it there)
        cut, count = last.end, last.counts[-1]
        ids: list[int] = []
        offsets = array("I")
        for node in path:
            ids += node.ids
            offsets += node.offsets
        token = self._cut_ids[ids[-1]]
        rest = text[cut:]
        tail: list[int] = []
        if rest:
            enc = self._hf.encode_batch([token + rest], add_special_tokens=False)[0]
            shift = cut - len(token)
            if not enc.ids or self._cut_ids.get(enc.ids[0]) != token or enc.offsets[0] != (0, len(token)):
                check_event_loop(len(text))
                return self._whole(text, keep=True, part=part)  # not as the argument above says: never guess
            tail = enc.ids[1:]
            tail_offsets = array("I")
            for s, e in enc.offsets[1:]:
                tail_offsets.append(s + shift)
                tail_offsets.append(e + shift)
            ids += tail
            offsets += tail_offsets
            cuts: list[int] = []
            counts: list[int] = []
            self._add_cuts(text, tail, tail_offsets, count, cuts, counts)
        with self._lock:
            self.hits += 1
            self.reused_tokens += count
            if tail:
                self._grow(last, text, tail, tail_offsets, cuts, counts)
            else:
                self._touch(last)
        return Encoded(ids, offsets)

    # ---- internals ---------------------------------------------------------------------------
    def _whole(self, text: str, *, keep: bool, part: str = "") -> Encoded:
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
        self._add_cuts(text, ids, flat, 0, cuts, counts)
        with self._lock:
            root = self._roots.get(part)
            if root is None:
                root = self._roots[part] = _root(part)
            self._grow(root, text, ids, flat, cuts, counts)
        return Encoded(ids, flat)

    def _grow(self, node: _Node, text: str, tail: list[int], offsets: array, cuts: list[int],
              counts: list[int]) -> None:
        """Keep `text`'s tokens `tail` (their `offsets` flattened), which follow `node`, as a new
        leaf under it, up to the last of their `cuts` (`_add_cuts`). Under the lock."""
        base = node.counts[-1] if node.cuts else 0
        n = counts[-1] - base if cuts else 0
        if not n or base + len(tail) < MIN_TOKENS or n > self.max_tokens or not node.alive:
            # nothing to keep, a short prompt, too much, or the prefix it extends was let go meanwhile
            self._touch(node)
            if node.parent is None and not node.children:
                self._roots.pop(node.partition, None)
            return
        leaf = _Node(node, node.end, text[node.end:cuts[-1]], base, array("I", tail[:n]), offsets[:2 * n], cuts,
                     counts, node.partition)
        siblings = node.children
        at = bisect.bisect_left(siblings, leaf.text, key=_text_of)
        if at < len(siblings) and siblings[at].text == leaf.text:  # kept meanwhile by another encode
            self._touch(siblings[at])
            return
        siblings.insert(at, leaf)
        self._leaves.pop(node, None)  # no longer a leaf
        self._leaves[leaf] = None
        self._tokens += n
        self._evict()

    def _add_cuts(self, text: str, ids: Sequence[int], offsets: array, base: int, cuts: list[int],
                  counts: list[int]) -> None:
        """Record every cut token among `ids` (token `base + k` of the text; `offsets` flattened)
        that covers exactly its own characters."""
        cut_ids = self._cut_ids
        for k, tid in enumerate(ids):
            token = cut_ids.get(tid)
            if token is not None:
                s, e = offsets[2 * k], offsets[2 * k + 1]
                if e - s == len(token) and text.startswith(token, s):
                    cuts.append(e)
                    counts.append(base + k + 1)

    def _touch(self, node: _Node) -> None:
        if node in self._leaves:
            self._leaves.move_to_end(node)

    def _evict(self) -> None:
        """Let go of the least recently used prompts (leaves) past the bounds; a node whose last
        child went becomes a leaf, let go of next (nothing used it since its children came)."""
        while self._leaves and (len(self._leaves) > self.max_entries or self._tokens > self.max_tokens):
            leaf, _ = self._leaves.popitem(last=False)
            self._detach(leaf)
            parent = leaf.parent
            assert parent is not None
            if parent.parent is None:  # a root
                if not parent.children:
                    del self._roots[parent.partition]
            elif not parent.children:
                self._leaves[parent] = None
                self._leaves.move_to_end(parent, last=False)

    def _detach(self, node: _Node) -> None:
        parent = node.parent
        assert parent is not None
        _remove(parent.children, node)
        node.alive = False
        self._tokens -= len(node.ids)

    def _longest(self, text: str, part: str) -> list[_Node]:
        """The nodes from the root of partition `part` down to the cut reaching furthest into
        `text` (the last one cut there: `_split`); empty if no cut is shared. Under the lock.

        Among a node's children (sorted by text), the ones sharing most with `text` are those
        beside where it would go (`_beside`), so only those are compared."""
        node = self._roots.get(part)
        path: list[_Node] = []
        pos = 0
        while node is not None and node.children:
            best, best_shared = None, 0
            for child in _beside(node.children, text, pos):
                shared = _shared(text, pos, child.text)
                if shared > best_shared:
                    best, best_shared = child, shared
            if best is None:
                break
            if best_shared < len(best.text):  # it parts from `text` inside this node: cut there
                i = bisect.bisect_right(best.cuts, pos + best_shared) - 1
                if i >= 0:
                    path.append(self._split(best, i))
                break
            path.append(best)
            pos = best.end
            node = best
        for n in path:
            if type(n.ids) is not list:  # reused from now on: as a list (see _Node.ids)
                n.ids = self._as_list(n.ids)
        if path:
            self._touch(path[-1])
        return path

    def _as_list(self, ids: array) -> list[int]:
        """`ids` as a list of the cache's int objects, one per id, which every list shares: 8
        bytes an id, where `tolist()` makes a 28-byte int for each."""
        if self._ints is None:
            self._ints = list(range(self._hf.get_vocab_size(with_added_tokens=True)))
        try:
            return list(map(self._ints.__getitem__, ids))
        except IndexError:  # an id past the vocabulary's size (a tokenizer with gaps in its ids)
            return ids.tolist()

    def _split(self, node: _Node, i: int) -> _Node:
        """`node` replaced by two: its text up to its `i`-th cut, and the rest (with its children)
        as that one's child. The first is returned. Under the lock."""
        cut, count = node.cuts[i], node.counts[i]
        n = count - node.base
        k = cut - node.start
        upper = _Node(node.parent, node.start, node.text[:k], node.base, node.ids[:n], node.offsets[:2 * n],
                      node.cuts[:i + 1], node.counts[:i + 1], node.partition)
        lower = _Node(upper, cut, node.text[k:], count, node.ids[n:], node.offsets[2 * n:], node.cuts[i + 1:],
                      node.counts[i + 1:], node.partition)
        lower.children = node.children
        for child in lower.children:
            child.parent = lower
        upper.children = [lower]
        parent = node.parent
        assert parent is not None
        siblings = parent.children
        _remove(siblings, node)
        siblings.insert(bisect.bisect_left(siblings, upper.text, key=_text_of), upper)
        node.alive = False
        if node in self._leaves:  # the leaf is now `lower`, as just used (its beginning is)
            del self._leaves[node]
            self._leaves[lower] = None
        return upper

    def _ahead(self, text: str, part: str, cached: int) -> _Flight | None:
        """A prompt of partition `part` being encoded that shares at least MIN_FLIGHT_GAIN more
        characters with `text` than the `cached` prefix does."""
        need = cached + MIN_FLIGHT_GAIN
        if len(text) <= need:
            return None
        for flight in self._flights:
            if flight.partition == part and flight.text[:need] == text[:need]:  # (one width each: a memcmp)
                return flight
        return None


def _text_of(node: _Node) -> str:
    return node.text


def _remove(siblings: list[_Node], node: _Node) -> None:
    at = bisect.bisect_left(siblings, node.text, key=_text_of)
    while siblings[at] is not node:  # (two encodes at once may each have kept the same text)
        at += 1
    del siblings[at]


def _beside(children: list[_Node], text: str, pos: int) -> list[_Node]:
    """The children (sorted by text) that share the most with `text[pos:]`: the one or two beside
    where it would go. Compared by their first `width` characters, doubled while several share
    them, so no comparison reads a long shared run (at mixed string widths, characters one by one)."""
    lo, hi = 0, len(children)
    width = 64
    while True:
        q = text[pos:pos + width]
        a = bisect.bisect_left(children, q, lo, hi, key=lambda c: c.text[:width])
        b = bisect.bisect_right(children, q, a, hi, key=lambda c: c.text[:width])
        if b - a == 1 or (b - a > 1 and pos + width >= len(text)):
            return [children[a]]  # (several: each holds all of `text[pos:]`)
        if b == a:
            return children[max(a - 1, lo):min(a + 1, hi)]
        lo, hi, width = a, b, width * 2


def _shared(text: str, pos: int, run: str) -> int:
    """How many characters of `run` `text` holds from `pos` on. Compared as equal slices, which are
    of one width when equal (a string is stored at the narrowest width its characters allow): a
    comparison is a memcmp, however wide `text` is."""
    hi = min(len(run), len(text) - pos)
    if text[pos:pos + hi] == run[:hi]:
        return hi
    lo = 0  # run[:lo] is shared, run[:hi] is not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if text[pos + lo:pos + mid] == run[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo


def _from_encoding(ids: list[int], offsets: list[tuple[int, int]]) -> Encoded:
    enc = Encoded(ids, array("I"))
    enc._offsets = offsets
    return enc


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
