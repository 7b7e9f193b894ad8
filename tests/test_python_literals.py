"""The shared Python-literal reader (pythonic calls, XML values typed object/array) on
random literals: dicts, sets (a JSON list in the order written), lists, tuples, scalars."""

from __future__ import annotations

import ast
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from chatsieve.args.pythonic import python_literal_json
from chatsieve.events import ToolCallArgsDelta
from chatsieve.parser import StreamParser, parse


class PySet(list):
    """A set literal's items in the order they are written."""


SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**20), 10**20),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
    st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12),
)
HASHABLE = st.one_of(SCALARS, st.tuples(SCALARS, SCALARS))


def _unique_keys(d: dict) -> bool:
    return len({str(k) for k in d}) == len(d)


VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.tuples(inner, inner),
        st.dictionaries(st.one_of(st.text(max_size=6), st.integers(-99, 99)), inner, max_size=4).filter(_unique_keys),
        st.lists(HASHABLE, min_size=1, max_size=4).map(PySet),
    ),
    max_leaves=12,
)


def source(v, spaced: bool) -> str:
    """`v` written as Python source (sets from PySet, items in their order)."""
    sep = ", " if spaced else ","
    if isinstance(v, PySet):
        return "{" + sep.join(source(x, spaced) for x in v) + "}"
    if isinstance(v, tuple):
        return "(" + sep.join(source(x, spaced) for x in v) + ("," if len(v) == 1 else "") + ")"
    if isinstance(v, list):
        return "[" + sep.join(source(x, spaced) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + sep.join(f"{source(k, spaced)}: {source(x, spaced)}" for k, x in v.items()) + "}"
    return repr(v)


def as_json(v):
    """What the reader must give for `v`: sets and tuples as lists, dict keys as strings."""
    if isinstance(v, (list, tuple)):
        return [as_json(x) for x in v]
    if isinstance(v, dict):
        return {str(k): as_json(x) for k, x in v.items()}
    return v


@settings(max_examples=300, deadline=None)
@given(value=VALUES, spaced=st.booleans())
def test_literal_reads_as_json(value, spaced: bool) -> None:
    src = source(value, spaced)
    ast.literal_eval(src)  # the generator writes real Python
    got = python_literal_json(src)
    assert got is not None, src
    assert json.loads(got) == as_json(value)


@settings(max_examples=150, deadline=None)
@given(value=VALUES, data=st.data())
def test_streamed_arguments_equal_final_at_any_split(value, data) -> None:
    text = f"<|tool_call_start|>[f(v={source(value, True)})]<|tool_call_end|>"
    stream = data.draw(st.booleans(), label="stream_arguments")
    cuts = data.draw(st.lists(st.integers(0, len(text)), max_size=12), label="cuts")
    bounds = sorted({0, len(text), *cuts})
    p = StreamParser("lfm2", stream_arguments=stream)
    events = []
    for a, b in zip(bounds, bounds[1:]):
        events += p.feed(text[a:b])
    events += p.finish()
    (call,) = p.message.tool_calls
    assert json.loads(call.arguments) == {"v": as_json(value)}
    assert "".join(e.json_text for e in events if isinstance(e, ToolCallArgsDelta)) == call.arguments
    assert p.message.tool_calls[0].arguments == parse(text, "lfm2", stream_arguments=stream).tool_calls[0].arguments


@settings(max_examples=200, deadline=None)
@given(text=st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=20), raw_prefix=st.booleans())
def test_placeholder_free_fstrings_read_as_strings(text: str, raw_prefix: bool) -> None:
    body = repr(text).replace("{", "{{").replace("}", "}}")
    src = "f" + body
    ast.parse(src, mode="eval")  # real Python
    assert json.loads(python_literal_json(src)) == text
    if raw_prefix and "\\" not in body:
        assert json.loads(python_literal_json("r" + src)) == text
    assert python_literal_json("f'{x}'") is None
