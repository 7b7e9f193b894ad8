"""Process-wide tuning for a server whose event loop shares the GIL and the heap with threads
preparing large requests: a short switch interval, the heap trimmed and the mmap threshold fixed
(glibc), cyclic garbage collection paused while requests are prepared.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import threading
import time
from collections.abc import Iterator
from typing import Any


@functools.cache
def _libc() -> Any:
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc if hasattr(libc, "malloc_trim") else None
    except OSError:
        return None


_gc_lock = threading.Lock()
_gc_holds = 0  # requests being parsed and prepared now
_gc_large_holds = 0  # of which large ones
_gc_was_enabled = False
_gc_off_since = 0.0
MAX_GC_OFF = 60.0  # seconds: under steady large traffic, cyclic collection runs again past this
# Objects made and not yet freed (the collector's count) past which, with no large request among
# the holds, cyclic collection runs again under steady traffic: 128 agent requests prepared together
# in one process peak at about 53,000 (bench_request), 64 at about 26,000; an agent request leaves
# about 35 objects in cycles.
MAX_YOUNG = 200_000


@contextlib.contextmanager
def no_cycle_collection(large: bool = False) -> Iterator[None]:
    """No cyclic garbage collection while requests are parsed and prepared.

    A `large` request's body becomes hundreds of thousands of short-lived dicts and lists, which
    reference counting frees; every full collection meanwhile walks all of them with the GIL held
    (0.1-0.85 s each, measured with 4 MB bodies on two busy cores), and /health waited that long.
    A burst of small ones (agents' requests) does the same on a smaller scale: each collection
    meanwhile walks every request still queued or in preparation, and stops them all (a full one
    took 15-20 ms in each worker of a 128-request burst). Held, the collections of a burst come
    after its last preparation: bench_request with 64 at once made 77 collections per 1,024
    requests instead of 636, at about the same cost (0.16-0.20 ms per request unheld, 0.15-0.19 held).

    Collection runs again, however many holds overlap, after MAX_GC_OFF seconds, and with no
    large request held once the collector counts more than MAX_YOUNG new objects; a large request
    that comes while the young bound has it running pauses it again."""
    global _gc_holds, _gc_large_holds, _gc_was_enabled, _gc_off_since
    with _gc_lock:
        _gc_holds += 1
        _gc_large_holds += large
        if _gc_holds == 1:
            _gc_was_enabled, _gc_off_since = gc.isenabled(), time.monotonic()
            gc.disable()
        elif _gc_was_enabled:
            if time.monotonic() - _gc_off_since > MAX_GC_OFF:
                gc.enable()
            elif _gc_large_holds:  # paused again for a large one, even where the young bound resumed it
                gc.disable()
            elif gc.get_count()[0] > MAX_YOUNG:
                gc.enable()
    try:
        yield
    finally:
        with _gc_lock:
            _gc_holds -= 1
            _gc_large_holds -= large
            if _gc_holds == 0 and _gc_was_enabled:
                gc.enable()


def trim_heap() -> None:
    """glibc's malloc_trim: free heap pages back to the system (a no-op elsewhere)."""
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)


# How often a thread holding the GIL is asked to let another run (Python's default is 5 ms). The
# event loop shares the GIL with the worker threads that parse and prepare requests; it needs it
# back after every system call, and with several workers busy each time could cost it 5 ms or
# more: /health took 0.5-0.9 s while five 4 MB bodies were prepared on two busy cores, 0.16-0.44 s
# with 1 ms.
SWITCH_INTERVAL = 0.001
M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter
MMAP_THRESHOLD = 128 * 1024  # glibc's default, kept fixed


def fix_mmap_threshold() -> None:
    """Blocks of 128 KiB and more (a request's long strings, a loaded conversation) are mapped
    and unmapped on their own, so freeing one gives its memory back at once. glibc otherwise
    raises the threshold to the largest block freed, after which such blocks stay in the worker
    threads' arenas: eight continuations of a 4 MB conversation left about 100 MB resident."""
    libc = _libc()
    if libc is not None and hasattr(libc, "mallopt"):
        libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)


def freeze_startup_objects() -> None:
    """What start-up made (the tokenizer's tables, the modules) lives as long as the server: moved
    out of the cyclic garbage collector's sight, so no collection walks it again (about 0.1 s per
    full collection otherwise)."""
    import gc

    gc.collect()
    gc.freeze()
