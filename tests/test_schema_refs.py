"""Typing by schemas that use local references and combinators (chatsieve.tools.ToolSchema):
a `$ref` reads as its target, a loop or an over-long chain is refused (untyped), and
nothing about a schema's shape can make the typing raise or run on without end."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chatsieve.tools import (
    MAX_REF_HOPS,
    coerce_json,
    items_schema,
    property_names,
    property_schema,
    schema_types,
    typing_schemas,
)

TYPES = ("string", "integer", "number", "boolean", "null", "object", "array")
LEAF = st.builds(lambda t: {"type": t}, st.sampled_from(TYPES))
SCHEMA = st.recursive(
    LEAF,
    lambda sub: st.one_of(
        st.builds(lambda xs: {"anyOf": xs}, st.lists(sub, min_size=1, max_size=3)),
        st.builds(lambda xs: {"oneOf": xs}, st.lists(sub, min_size=1, max_size=3)),
        st.builds(lambda x: {"type": "array", "items": x}, sub),
        st.builds(lambda x: {"type": "object", "properties": {"k": x}}, sub),
    ),
    max_leaves=8,
)


def _tool(params: dict):
    return typing_schemas({"f": params})["f"]


@settings(max_examples=200, deadline=None)
@given(schema=SCHEMA, hops=st.integers(1, MAX_REF_HOPS))
def test_a_reference_chain_types_as_its_target(schema: dict, hops: int) -> None:
    """`x` through `hops` definitions reads exactly as `x` written in place."""
    defs = {f"D{i}": {"$ref": f"#/$defs/D{i + 1}"} for i in range(hops - 1)}
    defs[f"D{hops - 1}"] = schema
    inline = _tool({"type": "object", "properties": {"x": schema}})
    via = _tool({"$defs": defs, "type": "object", "properties": {"x": {"$ref": "#/$defs/D0"}}})
    a, b = property_schema(inline, "x"), property_schema(via, "x")
    assert schema_types(a) == schema_types(b) == schema_types(schema)
    assert schema_types(items_schema(a)) == schema_types(items_schema(b))
    assert schema_types(property_schema(a, "k")) == schema_types(property_schema(b, "k"))
    for raw in ("40917", "true", "null", "[1]", "x"):
        assert coerce_json(raw, a) == coerce_json(raw, b)


@settings(max_examples=200, deadline=None)
@given(edges=st.lists(st.tuples(st.integers(0, 5), st.integers(0, 6), st.sampled_from(("ref", "anyOf", "allOf", "items")))))
def test_any_reference_graph_ends(edges: list) -> None:
    """Definitions that refer to each other in any way (loops included) are typed in bounded time."""
    defs: dict[str, dict] = {f"D{i}": {} for i in range(6)}
    for a, b, how in edges:
        target = {"$ref": f"#/$defs/D{b}"} if b < 6 else {"$ref": "#/nowhere"}
        node = defs[f"D{a}"]
        if how == "ref":
            node["$ref"] = target["$ref"]
        elif how == "items":
            node.update(type="array", items=target)
        else:
            node.setdefault(how, []).append(target)
    tool = _tool({"$defs": defs, "type": "object", "properties": {f"p{i}": {"$ref": f"#/$defs/D{i}"} for i in range(6)}})
    for i in range(6):
        s = property_schema(tool, f"p{i}")
        for _ in range(8):  # descend as a deep value would
            schema_types(s)
            property_names(s)
            json.loads(coerce_json("1", s))
            s = items_schema(s)


def test_a_reference_loop_is_refused() -> None:
    tool = _tool({
        "$defs": {"A": {"$ref": "#/$defs/B"}, "B": {"$ref": "#/$defs/A"}},
        "type": "object", "properties": {"x": {"$ref": "#/$defs/A"}, "y": {"$ref": "#/$defs/A", "type": "string"}},
    })  # fmt: skip
    assert schema_types(property_schema(tool, "x")) == set()
    assert schema_types(property_schema(tool, "y")) == {"string"}  # the keywords beside it still apply


def test_a_chain_past_the_bound_is_refused() -> None:
    n = MAX_REF_HOPS + 1
    defs = {f"D{i}": {"$ref": f"#/$defs/D{i + 1}"} for i in range(n)}
    defs[f"D{n}"] = {"type": "string"}
    tool = _tool({"$defs": defs, "properties": {"x": {"$ref": "#/$defs/D0"}, "y": {"$ref": f"#/$defs/D{n - MAX_REF_HOPS + 1}"}}})
    assert schema_types(property_schema(tool, "x")) == set()
    assert schema_types(property_schema(tool, "y")) == {"string"}


@pytest.mark.parametrize(
    "ref",
    ["https://example.com/s.json#/$defs/A", "other.json", "#anchor", "#/$defs/Missing", "#/$defs/A/type", "#/properties/x/0"],
)
def test_what_is_not_a_local_schema_is_not_followed(ref: str) -> None:
    tool = _tool({"$defs": {"A": {"type": "string"}}, "properties": {"x": {"$ref": ref}}})
    assert schema_types(property_schema(tool, "x")) == set()


def test_pointer_escapes_and_the_root() -> None:
    tool = _tool({
        "$defs": {"a/b": {"type": "string"}, "c~d": {"type": "integer"}, "e f": {"type": "boolean"}},
        "type": "object",
        "properties": {"x": {"$ref": "#/$defs/a~1b"}, "y": {"$ref": "#/$defs/c~0d"}, "z": {"$ref": "#/$defs/e%20f"},
                       "me": {"$ref": "#"}},
    })  # fmt: skip
    assert [schema_types(property_schema(tool, k)) for k in "xyz"] == [{"string"}, {"integer"}, {"boolean"}]
    # the root itself: a recursive schema, read as deep as asked
    s = tool
    for _ in range(50):
        s = property_schema(s, "me")
    assert schema_types(property_schema(s, "x")) == {"string"}


def test_pydantic_shapes() -> None:
    """What pydantic writes: enums and nested models as `$defs`, Optional as anyOf with null,
    v1's `allOf: [$ref]` beside a description, and alternative argument sets as a root oneOf."""
    tool = _tool({
        "$defs": {"Color": {"enum": ["red", "green"], "type": "string"}, "Code": {"enum": [1, 2]},
                  "Point": {"type": "object", "properties": {"x": {"type": "string"}}}},
        "type": "object",
        "properties": {
            "color": {"anyOf": [{"$ref": "#/$defs/Color"}, {"type": "null"}], "default": None},
            "code": {"allOf": [{"$ref": "#/$defs/Code"}], "description": "a code"},
            "points": {"type": "array", "items": {"$ref": "#/$defs/Point"}},
        },
        "oneOf": [{"properties": {"sku": {"type": "string"}}}, {"$ref": "#/$defs/Point"}],
    })  # fmt: skip
    assert schema_types(property_schema(tool, "color")) == {"string", "null"}
    assert schema_types(property_schema(tool, "code")) == {"integer"}
    assert schema_types(property_schema(items_schema(property_schema(tool, "points")), "x")) == {"string"}
    assert property_names(tool) == {"color", "code", "points", "sku", "x"}
    assert json.loads(coerce_json("40917", property_schema(tool, "sku"))) == "40917"
    assert json.loads(coerce_json("40917", property_schema(tool, "x"))) == "40917"
    assert json.loads(coerce_json("null", property_schema(tool, "color"))) is None
    assert json.loads(coerce_json("2", property_schema(tool, "code"))) == 2
