"""Typing untyped argument text (chatsieve.tools.coerce_json): a value becomes a number
only when its text is a JSON number, and then keeps exactly that text; anything else
that is no JSON literal stays the text itself. Never lossy, never raising."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from chatsieve.tools import JSON_NUMBER, coerce_json, schema_types

NUMBERISH = st.text(alphabet="0123456789+-.eE ", min_size=1, max_size=12)


@settings(max_examples=400, deadline=None)
@given(raw=st.one_of(NUMBERISH, st.text(max_size=12)))
def test_untyped_text_is_a_number_only_as_json_writes_it(raw: str) -> None:
    out = coerce_json(raw, None)
    value = json.loads(out)
    if isinstance(value, int | float) and not isinstance(value, bool):
        assert JSON_NUMBER.fullmatch(raw.strip()) and out == raw.strip()
    elif isinstance(value, str):
        assert value == raw
    else:  # true / false / null, spelled in any case
        assert raw.strip().lower() in ("true", "false", "null", "none", "nil")


def test_leading_zeros_and_signs_stay_text() -> None:
    for raw in ("02134", "007", "+1", "1.", ".5", "-01", "1e400"):
        assert json.loads(coerce_json(raw, None)) == raw


def test_python_type_names_are_schema_types() -> None:
    names = {"int": "integer", "float": "number", "bool": "boolean", "str": "string", "dict": "object", "list": "array"}
    for py, js in names.items():
        assert schema_types({"type": py}) == {js}
        assert schema_types({"type": [py, "null"]}) == {js, "null"}
    assert json.loads(coerce_json("007", {"type": "int"})) == 7
    assert json.loads(coerce_json("007", {"type": "str"})) == "007"
