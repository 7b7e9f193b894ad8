"""Call grammars grow linearly with the tools' schemas, and past a bound are refused (issue 19,
item 2): anyOf / oneOf options and type lists share the rules of the subschemas they reach."""

from __future__ import annotations

import json

import pytest
from gbnf import accepts

from chatsieve import grammar
from chatsieve.grammar import MAX_SCHEMA_NODES, GrammarTooLarge, ValueGrammar, call_grammar


def nested(depth: int) -> dict:
    """Each level: a type list and anyOf options that all reach the level below (4 ways)."""
    s: dict = {"type": "string"}
    for _ in range(depth):
        s = {"type": ["object", "object"], "properties": {"a": s},
             "anyOf": [{"required": ["a"]}, {"type": "object"}]}
    return s


def tools(schema: dict) -> list[dict]:
    return [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"x": schema}, "required": ["x"]}}}]


def test_nested_anyof_and_type_lists_cost_linear_work_and_size(monkeypatch):
    calls = [0]
    real = ValueGrammar.value

    def counting(self, schema, where):
        calls[0] += 1
        return real(self, schema, where)

    monkeypatch.setattr(ValueGrammar, "value", counting)

    def expansions(depth: int) -> tuple[int, int]:
        """Schema objects visited (ValueGrammar.value calls) and grammar bytes for `nested(depth)`."""
        calls[0] = 0
        text = call_grammar("llama3_json", tools(nested(depth)), engine="vllm")
        return calls[0], len(text)

    # before: every option re-expanded the object's properties, 4 ** depth visits
    small, big = expansions(4), expansions(8)
    assert big[0] <= 2.5 * small[0], (small, big)
    assert big[1] <= 2.5 * small[1], (small, big)
    assert expansions(40)[0] < 2_000


def test_shared_rules_still_enforce_the_schema():
    g = call_grammar("llama3_json", tools(nested(5)), engine="vllm")
    inner: object = "leaf"
    for _ in range(5):
        inner = {"a": inner}
    ok = json.dumps({"name": "f", "parameters": {"x": inner}})
    assert accepts(g, ok)
    inner = 3
    for _ in range(5):
        inner = {"a": inner}
    assert not accepts(g, json.dumps({"name": "f", "parameters": {"x": inner}}))  # the leaf is a string


def test_too_many_schema_nodes_is_a_clear_error():
    props = {f"p{i}": {"type": "object", "properties": {"q": {"type": "integer"}}} for i in range(MAX_SCHEMA_NODES)}
    with pytest.raises(GrammarTooLarge, match="fewer or simpler tool schemas"):
        call_grammar("llama3_json", tools({"type": "object", "properties": props}), engine="vllm")


def test_grammar_bytes_are_bounded(monkeypatch):
    monkeypatch.setattr(grammar, "MAX_GRAMMAR_BYTES", 4096)
    enum = {"enum": [f"value-{i}" for i in range(1000)]}
    with pytest.raises(GrammarTooLarge, match="more than 4096 bytes"):
        call_grammar("llama3_json", tools(enum), engine="vllm")
