"""Request bodies whose tools the same caller sent before, byte for byte: decoded without them.

A team's agents send the same tools with every request. Twenty of them are most of such a body and,
decoded, thousands of dicts, lists and strings per request, which the decoder makes and the cyclic
collector then counts. Here the bytes of a body's `tools` value, once a caller has sent the same
bytes twice in a row, are kept with their decoded value; a later body of that caller with those
bytes where its first `"tools":` key's value begins is decoded with a short placeholder in their
place, and the kept value is put where the placeholder came out.

Why the body is the same as decoding it whole:

- In valid JSON the bytes `"tools":` can only be an object's key `tools`: the quote before `tools`
  cannot close a string (a letter may not follow one) and so opens one, and a string followed by a
  colon is a key. What follows the colon (and any whitespace) is that key's value. The first few
  such keys are looked at in order, since a nested one may come before the body's own.
- The kept bytes are one whole JSON array (the standard library's decoder read exactly them), and an
  array ends at its own closing bracket: a value that begins with those bytes is those bytes.
- A value replaced by another leaves every other value of the text as it was (JSON is context-free),
  and a text that fails to decode with the placeholder is decoded whole, for its own error.
- The placeholder is a string holding a secret of this process, so no caller can write it. Where
  the decoded body's `tools` is that string, the replaced value was the body's own `tools`, and the
  last one of that name (duplicate keys: the last counts, in both decoders). Where it is not (the
  bytes were under a nested `tools`), the next place is tried; a later `tools` key of the body's
  own, or no place left, and the body is decoded whole.

The kept value is then the same object in every request that sent those bytes. Nothing changes it:
no request data is changed anywhere (the immutable sandbox renders it as it is, the mutable one gets
a copy), and a test sends such requests and checks the kept value after each. Its depth is known
(chatsieve/shared.py), so the depth check does not walk it again, and what is derived from it alone
is derived once.

The memo is per caller (the prompt cache's partition): how fast a body is read says nothing of what
another API key sent. It is bounded: PER_CALLER values a caller, values of MIN_BYTES to MAX_BYTES,
MAX_KEPT_BYTES in all (the callers seen longest ago are forgotten first).
"""

from __future__ import annotations

import json
import secrets
import threading
from collections.abc import Callable
from typing import Any

from chatsieve import shared
from chatsieve.protocols.common import json_depth

_KEY = b'"tools":'
_SPACE = frozenset(b" \t\r\n")
MIN_BYTES = 1024  # tools shorter than this are decoded as they come: not worth a memo
MAX_BYTES = 512 << 10
PER_CALLER = 4  # the tools a caller's agents send (several agents, one key)
MAX_KEPT_BYTES = 8 << 20  # of tools as sent: decoded, about 4.5 times that (the bench's), more with what is derived
_HEAD = 256  # the bytes that say a caller sent its tools again: the second time, they are read alone
_MAX_CALLERS_SEEN = 4096
_MAX_PLACES = 4  # the `"tools":` keys looked at, in the order they come

_SECRET = "chatsieve-kept-tools-" + secrets.token_hex(16)
_PLACEHOLDER = json.dumps(_SECRET).encode()
_DECODER = json.JSONDecoder()


class _Kept:
    __slots__ = ("raw", "value", "depth")

    def __init__(self, raw: bytes, value: list, depth: int) -> None:
        self.raw, self.value, self.depth = raw, value, depth


class KnownTools:
    """The tools each caller sent (see the module's doc); `decode` reads a body with them."""

    def __init__(self) -> None:
        self._kept: dict[str, tuple[_Kept, ...]] = {}  # by caller, newest first; oldest caller first
        self._kept_bytes = 0
        self._last_head: dict[str, tuple[frozenset[bytes], int]] = {}  # each caller's last body whose
        # tools were not kept: the first bytes of its `tools` arrays, and how many bodies in a row had one so
        self._lock = threading.Lock()  # (bodies are decoded on the event loop and in worker threads)
        self.hits = 0  # bodies read with kept tools (for tests and the benchmarks)

    def decode(self, raw: bytes, caller: str, whole: Callable[[bytes], Any]) -> Any:
        """`whole(raw)` (a body's decoder), with the kept tools of `caller` not decoded again."""
        places = _places(raw)
        if not places:
            return whole(raw)
        kept_ones = self._kept.get(caller, ())
        for at in places:
            for kept in kept_ones:
                if raw.startswith(kept.raw, at):
                    body = _with(raw, at, kept, whole)
                    if body is not None:
                        self.hits += 1
                        return body
                    break  # (not the body's own tools: the next place, if any)
        body = whole(raw)
        tools = body.get("tools") if type(body) is dict else None
        if type(tools) is list and tools:
            self._seen(raw, places, caller, tools)
        return body

    def clear(self) -> None:
        """Forget every caller's tools (the server stops): they are no longer shared."""
        with self._lock:
            while self._kept:
                self._forget(self._kept.pop(next(iter(self._kept))))
            self._last_head.clear()

    def _seen(self, raw: bytes, places: list[int], caller: str, tools: list) -> None:
        """Tools `caller` sent that were not kept: where a `tools` array of its last body began with
        the same bytes as one of this body's, the one at `places` that is the body's own is read
        alone and kept. Tried on the 1st, 2nd, 4th, 8th, ... such body in a row, so a caller whose
        tools cannot be kept (too short or long, NaN in them) or change every time after the same
        beginning pays for the reading on fewer and fewer of its requests."""
        heads = frozenset(raw[at:at + _HEAD] for at in places)
        last = self._last_head.get(caller)
        if last is None or not last[0] & heads:
            with self._lock:
                if len(self._last_head) >= _MAX_CALLERS_SEEN:
                    self._last_head.clear()
                self._last_head[caller] = (heads, 0)
            return
        n = last[1] + 1
        self._last_head[caller] = (heads, n)
        if n & (n - 1):
            return
        for at in places:
            if len(raw) - at < MIN_BYTES:
                break
            try:
                text = raw[at:].decode("utf-8", "surrogatepass")  # (as json.loads decodes a body)
                value, end = _DECODER.raw_decode(text)
            except (UnicodeDecodeError, ValueError, RecursionError):
                return
            if type(value) is not list or value != tools:
                continue  # (a nested `tools`: the body's own may be at a later place)
            spelled = text[:end]
            size = end if spelled.isascii() else len(spelled.encode("utf-8", "surrogatepass"))
            if MIN_BYTES <= size <= MAX_BYTES:
                self._keep(caller, _Kept(raw[at:at + size], value, json_depth(value)))
            return

    def _keep(self, caller: str, kept: _Kept) -> None:
        with self._lock:
            old = self._kept.pop(caller, ())  # (put back last: the callers seen longest ago go first)
            if any(k.raw == kept.raw for k in old):
                self._kept[caller] = old
                return
            self._kept[caller] = (kept, *old[: PER_CALLER - 1])
            shared.share(kept.value, kept.depth)
            self._kept_bytes += len(kept.raw)
            self._forget(old[PER_CALLER - 1:])
            while self._kept_bytes > MAX_KEPT_BYTES and len(self._kept) > 1:
                self._forget(self._kept.pop(next(iter(self._kept))))

    def _forget(self, gone: tuple[_Kept, ...]) -> None:
        for k in gone:
            self._kept_bytes -= len(k.raw)
            shared.unshare(k.value)


def _places(raw: bytes) -> list[int]:
    """Where the arrays of the body's first _MAX_PLACES `"tools":` keys begin: the body's own may
    come after a nested one (a message's tool input with a `tools` key, when messages come first)."""
    places: list[int] = []
    at = raw.find(_KEY)
    while at >= 0 and len(places) < _MAX_PLACES:
        at += len(_KEY)
        while at < len(raw) and raw[at] in _SPACE:
            at += 1
        if raw[at:at + 1] == b"[":
            places.append(at)
        at = raw.find(_KEY, at)
    return places


def _with(raw: bytes, at: int, kept: _Kept, whole: Callable[[bytes], Any]) -> Any:
    """The body `raw` whose tools at `at` are `kept`, decoded without them; None where the
    placeholder did not come out as the body's own `tools` (then it is decoded whole)."""
    try:
        body = whole(b"".join((raw[:at], _PLACEHOLDER, raw[at + len(kept.raw):])))
    except (ValueError, RecursionError):
        return None
    if type(body) is not dict or body.get("tools") != _SECRET:
        return None
    body["tools"] = kept.value
    return body
