"""Values shared by many requests, and what is derived from them, derived once.

A caller's tools, sent again byte for byte, are decoded once and the same list is handed to every
request that sent them (server/known_tools.py). What depends on that list alone (its checks, the
names a call may use, the parser's schemas, each tool's `tojson`) is then the same for all of
those requests: `once` derives it the first time and keeps it with the list, for as long as the
list is shared.

Nothing changes a shared value or a result derived from one: no request data is changed anywhere,
and every use of `once` derives an immutable result or one its callers only read.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

T = TypeVar("T")

__all__ = ["depth", "is_shared", "once", "share", "unshare"]


class _Shared:
    __slots__ = ("value", "depth", "root", "derived", "items")

    def __init__(self, value: Any, depth: int | None, root: _Shared | None = None) -> None:
        self.value, self.depth = value, depth
        self.root = self if root is None else root  # the shared list it came with, or from
        self.derived: dict[Hashable, Any] = {}
        self.items: list[Any] = []  # (a root's) the values shared with it: elements, derived results


_SHARED: dict[int, _Shared] = {}  # by id: (the value is held, so its id is not reused meanwhile)
_lock = threading.Lock()


def share(value: list, depth: int) -> None:
    """`value` (and each of its elements) is handed to many requests from now on; `depth` is how
    deep objects and arrays nest in it."""
    with _lock:
        _SHARED[id(value)] = entry = _Shared(value, depth)
        _add(entry, value, top=True)


def _add(root: _Shared, value: Any, top: bool = False) -> None:
    """`value` shared with `root`: a list or dict, a list's objects and arrays, a tuple's lists
    and dicts (a derivation's several results). Under the lock."""
    kind = type(value)
    if kind is tuple:
        for x in value:
            _add(root, x)
        return
    if kind is not dict and kind is not list:
        return
    if not top:
        if id(value) in _SHARED:
            return
        _SHARED[id(value)] = _Shared(value, None, root)
        root.items.append(value)
    if kind is list:
        for item in value:
            if (type(item) is dict or type(item) is list) and id(item) not in _SHARED:
                _SHARED[id(item)] = _Shared(item, None, root)
                root.items.append(item)


def unshare(value: list) -> None:
    """`value` is no longer handed out: what was derived from it is let go."""
    with _lock:
        entry = _SHARED.get(id(value))
        if entry is None or entry.value is not value:
            return
        del _SHARED[id(value)]
        for item in entry.items:
            got = _SHARED.get(id(item))
            if got is not None and got.value is item:
                del _SHARED[id(item)]


def _entry(value: Any) -> _Shared | None:
    got = _SHARED.get(id(value)) if _SHARED else None
    return got if got is not None and got.value is value else None


def is_shared(value: Any) -> bool:
    return _entry(value) is not None


def depth(value: Any) -> int | None:
    """How deep objects and arrays nest in `value`, where it is a shared list; else None."""
    got = _entry(value)
    return got.depth if got is not None else None


def once(value: Any, what: Hashable, derive: Callable[..., T], *args: Any) -> T:
    """`derive(value, *args)`; where `value` is shared, derived the first time only (`what` names
    the derivation: `derive` and everything it depends on besides `value`). A derivation that
    raises is not kept: it raises again for the next request."""
    got = _entry(value)
    if got is None:
        return derive(value, *args)
    try:
        return got.derived[what]
    except KeyError:
        out = got.derived[what] = derive(value, *args)
    if type(out) in _CONTAINERS:  # shared in turn, with the same root: what is derived from it, once too
        with _lock:
            root = got.root
            if _entry(value) is got and _entry(root.value) is root:
                _add(root, out)
    return out


_CONTAINERS = frozenset({dict, list, tuple})
