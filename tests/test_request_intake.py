"""A request body's intake: `decode_body` reads every body as json.loads does (orjson only where
the two agree), and `check_json_depth` (one level at a time) refuses exactly the bodies nested
deeper than the limit."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chatsieve.protocols.common import RequestError, check_json_depth
from chatsieve.server.intake import decode_body

_numbers = st.one_of(
    st.integers(),  # beyond 64 bits too
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.floats(allow_nan=True, allow_infinity=True),
)
_strings = st.one_of(st.text(), st.sampled_from(["\ud800", "a\udc00b", "\x00", "é中🌦", "12345678901234567890"]))
_json = st.recursive(
    st.one_of(st.none(), st.booleans(), _numbers, _strings),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(_strings, inner, max_size=4)),
    max_leaves=30,
)


@settings(max_examples=400, deadline=None, derandomize=True)
@given(value=_json, ascii=st.booleans(), spaced=st.booleans())
def test_a_body_decodes_as_json_loads_reads_it(value, ascii, spaced):
    raw = json.dumps(value, ensure_ascii=ascii, separators=(", ", ": ") if spaced else (",", ":"))
    try:
        data = raw.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate written as itself: no UTF-8 body can carry it
        data = raw.encode("utf-8", "surrogatepass")
    try:
        want = json.loads(data)
    except ValueError:
        with pytest.raises(ValueError):
            decode_body(data)
        return
    got = decode_body(data)
    assert repr(got) == repr(want)  # the same types (an int stays an int) and the same order


@pytest.mark.parametrize("data", [b"\xef\xbb\xbf{}", '{"a": 1}'.encode("utf-16"), b"[NaN, -Infinity]",
                                  b'{"seed": 123456789012345678901}', b"[1] x", b"{"])
def test_what_orjson_refuses_or_reads_otherwise_goes_to_json_loads(data):
    try:
        want = repr(json.loads(data))
    except ValueError as e:
        with pytest.raises(type(e)):
            decode_body(data)
    else:
        assert repr(decode_body(data)) == want


def _depth(value) -> int:
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    return 0


@settings(max_examples=300, deadline=None, derandomize=True)
@given(value=st.recursive(st.integers(), lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=2), inner, max_size=3)), max_leaves=25),
    limit=st.integers(1, 8))
def test_the_depth_check_refuses_exactly_what_nests_deeper_than_the_limit(value, limit):
    if _depth(value) > limit:
        with pytest.raises(RequestError) as e:
            check_json_depth(value, limit)
        assert e.value.code == "too_deeply_nested"
    else:
        check_json_depth(value, limit)


class _Dict(dict):
    pass


class _List(list):
    pass


@pytest.mark.parametrize("make", [_Dict, _List, dict, list])
def test_the_depth_check_counts_subclasses_of_dict_and_list_as_containers(make):
    """Not what a JSON decoder makes, but a library caller's body may hold them."""
    value = 0
    for _ in range(5):
        value = make({"a": value}) if make in (dict, _Dict) else make([value])
    value = [value]  # six levels, the five inner ones `make`'s
    check_json_depth(value, 6)
    with pytest.raises(RequestError):
        check_json_depth(value, 5)
