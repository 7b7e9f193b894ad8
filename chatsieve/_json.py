"""Compact JSON to bytes and back: orjson when it is installed (the server extra brings it),
else the standard library, with the same output (UTF-8, no spaces, non-ASCII unescaped; floats
may be spelled differently, 1e-07 / 1e-7). Reading, orjson turns an integer beyond 64 bits
into a float where the standard library keeps an int (tests/test_json_codec.py)."""

from __future__ import annotations

import json
from typing import Any

try:
    import orjson
except ImportError:  # pragma: no cover - the core library stays stdlib-only
    orjson = None


def _std_dumps(obj: Any) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()


if orjson is not None:
    _orjson_dumps = orjson.dumps
    _orjson_loads = orjson.loads

    def dumps(obj: Any) -> bytes:
        try:
            return _orjson_dumps(obj)
        except TypeError:  # what orjson refuses (ints over 64 bits, non-str keys): the slow path
            return _std_dumps(obj)

    def loads(data: bytes | str) -> Any:
        """Raises ValueError on invalid JSON; NaN and Infinity are accepted, as json.loads does."""
        try:
            return _orjson_loads(data)
        except ValueError:
            return json.loads(data)

else:  # pragma: no cover
    dumps = _std_dumps
    loads = json.loads
