"""Compact JSON to bytes and back: orjson when it is installed (the server extra brings it),
else the standard library, with the same output (UTF-8, no spaces, non-ASCII unescaped; floats
may be spelled differently, 1e-07 / 1e-7). Reading, orjson turns an integer beyond 64 bits
into a float where the standard library keeps an int (tests/test_json_codec.py).

`Raw(json_bytes)` anywhere in a value is written as those bytes, unchanged: a part encoded
earlier (a long answer's logprob entries) goes into a larger object without being decoded again."""

from __future__ import annotations

import json
import os
from typing import Any

try:
    import orjson
except ImportError:  # pragma: no cover - the core library stays stdlib-only
    orjson = None


class Raw:
    """JSON text (bytes) that `dumps` writes as it is, where this object stands."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data

    def __repr__(self) -> str:
        return f"Raw({len(self.data)} bytes)"

    def __eq__(self, other: object) -> bool:
        return type(other) is Raw and self.data == other.data

    __hash__ = None  # type: ignore[assignment]


def _std_dumps(obj: Any) -> bytes:
    raws: list[bytes] = []
    nonce = os.urandom(8).hex()  # placeholders no string in `obj` can spell

    def default(o: Any) -> Any:
        if type(o) is Raw:
            raws.append(o.data)
            return f"\x00{nonce}:{len(raws) - 1}\x00"
        raise TypeError(f"Object of type {type(o).__name__} is not JSON serializable")

    out = json.dumps(obj, ensure_ascii=False, separators=(",", ":"), default=default).encode()
    for i, data in enumerate(raws):  # the placeholders, as json.dumps escaped them
        out = out.replace(b'"\\u0000%s:%d\\u0000"' % (nonce.encode(), i), data, 1)
    return out


if orjson is not None:
    _orjson_dumps = orjson.dumps
    _orjson_loads = orjson.loads
    _Fragment = orjson.Fragment

    def _default(o: Any) -> Any:
        if type(o) is Raw:
            return _Fragment(o.data)
        raise TypeError

    def dumps(obj: Any) -> bytes:
        try:
            return _orjson_dumps(obj, default=_default)
        except TypeError:  # what orjson refuses (ints over 64 bits, non-str keys): the slow path
            return _std_dumps(obj)

    def loads(data: bytes | str) -> Any:
        """Raises ValueError on invalid JSON; NaN and Infinity are accepted, as json.loads does."""
        try:
            return _orjson_loads(data)
        except ValueError:
            return json.loads(data)

    # for the server's per-token path, one call less: `string` is the JSON of a str (only), and
    # `loads_strict` is orjson's, which raises ValueError on NaN and Infinity too (a caller that
    # gets one then reads the data with `loads`)
    string = _orjson_dumps
    loads_strict = _orjson_loads

else:  # pragma: no cover
    dumps = _std_dumps
    loads = loads_strict = json.loads

    def string(text: str) -> bytes:
        return json.dumps(text, ensure_ascii=False).encode()
