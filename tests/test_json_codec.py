"""chatsieve._json: orjson (the server extra) and the standard-library fallback give the same
compact JSON, so a server without orjson streams the same bytes."""

from __future__ import annotations

import importlib.util
import json
import math
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from models import DEV_INSTALL, require_module

import chatsieve._json as fast


def load_codec(block_orjson: bool):
    """A fresh copy of chatsieve._json, imported with orjson unavailable when `block_orjson`."""
    saved = sys.modules.get("orjson", ...)
    if block_orjson:
        sys.modules["orjson"] = None  # `import orjson` raises ImportError
    try:
        spec = importlib.util.find_spec("chatsieve._json")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        if block_orjson:
            if saved is ...:
                del sys.modules["orjson"]
            else:
                sys.modules["orjson"] = saved
    return module


std = load_codec(block_orjson=True)

scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.text())
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=12,
)


def test_the_fallback_is_the_standard_library():
    assert std.orjson is None
    assert std.dumps({"a": "é", "b": [1, None]}) == '{"a":"é","b":[1,null]}'.encode()
    assert std.loads(b'{"x": NaN}')["x"] != std.loads(b'{"x": NaN}')["x"]  # NaN accepted, as json.loads does
    with pytest.raises(ValueError):
        std.loads(b'{"x": ')


@pytest.mark.parametrize("codec", [fast, std], ids=["orjson", "stdlib"])
def test_raw_json_is_spliced_as_it_is(codec):
    raw = codec.Raw(b'[{"token":"a","logprob":-0.5}]')
    value = {"logprobs": raw, "text": "\x00raw0\x00", "nested": [codec.Raw(b"{}"), 2**70]}
    out = codec.dumps(value)
    assert json.loads(out) == {"logprobs": [{"token": "a", "logprob": -0.5}], "text": "\x00raw0\x00",
                               "nested": [{}, 2**70]}
    assert out == std.dumps({**value, "logprobs": std.Raw(raw.data), "nested": [std.Raw(b"{}"), 2**70]})


@pytest.fixture(scope="module")
def with_orjson():
    require_module("orjson", DEV_INSTALL)  # the server extra brings it; skips (fails under CI) without


@settings(max_examples=300, deadline=None)
@given(value=values)
def test_orjson_and_the_fallback_write_the_same_bytes(with_orjson, value):
    assert fast.dumps(value) == std.dumps(value)
    assert std.loads(fast.dumps(value)) == value
    if not _has_huge_int(value):  # orjson reads an integer beyond 64 bits as a float
        assert fast.loads(std.dumps(value)) == value


@settings(max_examples=200, deadline=None)
@given(text=st.text())
def test_a_string_is_written_the_same_by_string_and_dumps(with_orjson, text):
    assert fast.string(text) == std.string(text) == fast.dumps(text) == std.dumps(text)
    assert fast.loads_strict(fast.string(text)) == std.loads_strict(std.string(text)) == text


def test_loads_strict_refuses_what_loads_accepts_beyond_json():
    for codec in (fast, std) if fast.orjson is not None else (std,):
        assert math.isnan(codec.loads(b"NaN"))
    if fast.orjson is not None:
        with pytest.raises(ValueError):  # the caller then reads it with `loads`
            fast.loads_strict(b"NaN")


def _has_huge_int(value) -> bool:
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return False
    if isinstance(value, int):
        return not -(2**63) <= value < 2**64
    items = value.values() if isinstance(value, dict) else value
    return any(_has_huge_int(v) for v in items)


@settings(max_examples=200, deadline=None)
@given(value=st.floats(allow_nan=False, allow_infinity=False) | st.lists(st.floats(allow_nan=False,
                                                                              allow_infinity=False)))
def test_floats_read_back_the_same_either_way(value):
    # the digits may be spelled differently (1e-07 / 1e-7); the numbers are the same
    assert fast.loads(fast.dumps(value)) == std.loads(std.dumps(value)) == value
    assert json.loads(fast.dumps(value)) == value


def test_what_orjson_refuses_falls_back():
    huge = 2**80  # beyond orjson's 64-bit integers
    assert fast.dumps({"n": huge}) == std.dumps({"n": huge}) == b'{"n":%d}' % huge
    assert math.isnan(fast.loads(b"NaN"))
