"""Call grammars and JSON constraints (chatsieve.grammar), the request fields behind them,
and what each engine is sent.

Grammars are checked with a small GBNF recognizer (tests/gbnf.py): every schema-valid call,
written in the family's syntax, is accepted, and chatsieve's own parser reads it back to the
same arguments; invalid ones are rejected. tests/test_real_engine.py runs them in llama.cpp.
"""

from __future__ import annotations

import json

import jsonschema
import models
import pytest
from gbnf import accepts, parse, token_char
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chatsieve import parse as parse_output
from chatsieve.constraints import plan
from chatsieve.grammar import (
    Constraint,
    GrammarError,
    call_grammar,
    json_schema_grammar,
    response_format_constraint,
    supported_formats,
)
from chatsieve.protocols.openai_chat import RequestError, parse_chat_request
from chatsieve.server.backends import (
    GenerationRequest,
    llamacpp_payload,
    sglang_payload,
    vllm_payload,
)

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "a city"},
                "days": {"type": "integer"},
                "unit": {"enum": ["celsius", "fahrenheit"]},
                "metric": {"type": "boolean"},
            },
            "required": ["city"],
        },
    },
}
SEARCH = {
    "type": "function",
    "function": {
        "name": "search",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "tags": {"type": "array", "items": {"type": "string"}},
                "limit": {"type": ["integer", "null"]},
                "score": {"type": "number"},
                "filters": {
                    "type": "object",
                    "properties": {"lang": {"type": "string"}, "safe": {"type": "boolean"}},
                    "required": ["lang"],
                },
                "extra": {},
            },
            "required": ["query", "filters"],
        },
    },
}
NOW = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}
TOOLS = [WEATHER, SEARCH, NOW]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}


# ---------------------------------------------------------------- values from a schema

_text = st.text(st.characters(blacklist_categories=("Cs",), max_codepoint=0x2FFFF), max_size=12)
_json_scalar = st.none() | st.booleans() | st.integers(-(10**6), 10**6) | _text


def values(schema: dict) -> st.SearchStrategy:
    if not schema:
        return st.recursive(_json_scalar, lambda inner: st.lists(inner, max_size=2), max_leaves=4)
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    kind = schema.get("type")
    if isinstance(kind, list):
        return st.one_of([values({**schema, "type": k}) for k in kind])
    if kind == "string":
        return _text
    if kind == "integer":
        return st.integers(-(10**9), 10**9)
    if kind == "number":
        return st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False).map(lambda f: round(f, 4))
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    if kind == "array":
        return st.lists(values(schema.get("items", {})), max_size=3)
    if kind == "object":
        props = schema.get("properties", {})
        required = schema.get("required", [])
        return st.fixed_dictionaries(
            {k: values(s) for k, s in props.items() if k in required},
            optional={k: values(s) for k, s in props.items() if k not in required},
        ).map(lambda d: {k: d[k] for k in props if k in d})  # declared order
    raise AssertionError(schema)


calls = st.sampled_from(sorted(SCHEMAS)).flatmap(lambda n: st.tuples(st.just(n), values(SCHEMAS[n])))


def python_literal(v) -> str:
    if v is True:
        return "True"
    if v is False:
        return "False"
    if v is None:
        return "None"
    if isinstance(v, list):
        return "[" + ", ".join(map(python_literal, v)) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{json.dumps(k)}: {python_literal(x)}" for k, x in v.items()) + "}"
    return json.dumps(v, ensure_ascii=False)


def pythonic(call_list) -> str:
    return "[" + ", ".join(f"{n}(" + ", ".join(f"{k}={python_literal(v)}" for k, v in a.items()) + ")"
                           for n, a in call_list) + "]"  # fmt: skip


# ---------------------------------------------------------------- pythonic (gemma3)


GEMMA3_GRAMMAR = call_grammar("gemma3", TOOLS)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(calls, min_size=1, max_size=3))
def test_gemma3_grammar_accepts_every_valid_call_list_and_the_parser_agrees(call_list):
    text = pythonic(call_list)
    assert accepts(GEMMA3_GRAMMAR, text), text
    msg = parse_output(text + "<end_of_turn>", "gemma3", tools=TOOLS)
    got = [(c.name, json.loads(c.arguments)) for c in msg.tool_calls]
    assert got == [(n, a) for n, a in call_list] and msg.content is None
    for name, args in got:
        jsonschema.validate(args, SCHEMAS[name])


@pytest.mark.parametrize(
    "text",
    [
        "",
        "[]",  # required: at least one call
        "The weather is nice.",
        "[get_weather()]",  # the required city is missing
        "[get_weather(city=3)]",  # wrong type
        "[get_weather(city='Paris')]",  # single quotes are Python, but the grammar writes one form
        '[get_weather(city="Paris", unit="kelvin")]',  # not in the enum
        '[get_weather(unit="celsius", city="Paris")]',  # declared order
        '[get_weather(city="Paris", country="FR")]',  # undeclared argument
        '[delete_all(confirm=True)]',  # not a tool
        '[get_weather(city="Paris")] and more',
        '[search(query="x", filters={})]',  # nested required lang missing
        '[get_weather(city="a\\/b")]',  # an escape Python reads differently from JSON
    ],
)
def test_gemma3_grammar_rejects(text):
    assert not accepts(GEMMA3_GRAMMAR, text)


def test_named_function_and_no_parallel_calls():
    g = call_grammar("gemma3", [WEATHER], parallel=False)
    assert accepts(g, '[get_weather(city="Oslo")]')
    assert not accepts(g, '[get_weather(city="Oslo"), get_weather(city="Rome")]')
    assert not accepts(g, "[get_time()]")


def test_grammar_text_is_plain_gbnf_without_token_references():
    parse(GEMMA3_GRAMMAR)  # every rule defined
    assert "<[" not in GEMMA3_GRAMMAR
    assert call_grammar("gemma3", TOOLS, engine="vllm") == call_grammar("gemma3", TOOLS, engine="sglang")


# ---------------------------------------------------------------- JSON syntaxes


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(calls, min_size=1, max_size=2))
def test_qwen3_grammar_names_its_tags_by_token_id(call_list):
    tok = models.tokenizer("qwen3")
    g = call_grammar("qwen3", TOOLS, token_id=tok.single_token_id, thinking=False)
    assert "<[151657]>" in g and "<[151658]>" in g
    tag, end = token_char(151657), token_char(151658)
    body = "\n".join(
        f'{tag}\n{{"name": {json.dumps(n)}, "arguments": {json.dumps(a, ensure_ascii=False)}}}\n{end}'
        for n, a in call_list
    )
    assert accepts(g, body)
    spelled = body.replace(tag, "<tool_call>").replace(end, "</tool_call>")
    assert not accepts(g, spelled)  # the tags spelled from sub-word text are not the tokens
    msg = parse_output(spelled, "qwen3", tools=TOOLS, thinking=False)
    assert [(c.name, json.loads(c.arguments)) for c in msg.tool_calls] == list(call_list)


def test_qwen3_with_thinking_leaves_room_for_the_reasoning_block():
    tok = models.tokenizer("qwen3")
    g = call_grammar("qwen3", [NOW], token_id=tok.single_token_id, thinking=True)
    think, done = token_char(151667), token_char(151668)
    call = f'{token_char(151657)}\n{{"name": "get_time", "arguments": {{}}}}\n{token_char(151658)}'
    assert accepts(g, f"{think}I should call it.{done}\n\n{call}")
    assert accepts(g, call)
    assert not accepts(g, "I should call it." + call)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(calls)
def test_llama3_json_grammar(call):
    name, args = call
    g = call_grammar("llama3_json", TOOLS)
    text = json.dumps({"name": name, "parameters": args}, ensure_ascii=False)
    assert accepts(g, text)
    msg = parse_output(text, "llama3_json", tools=TOOLS)
    assert [(c.name, json.loads(c.arguments)) for c in msg.tool_calls] == [(name, args)]


@settings(max_examples=40, deadline=None)
@given(values(SCHEMAS["search"]))
def test_json_schema_grammar_accepts_valid_documents(doc):
    g = json_schema_grammar(SCHEMAS["search"])
    assert accepts(g, json.dumps(doc, ensure_ascii=False))
    assert not accepts(g, json.dumps({k: v for k, v in doc.items() if k != "query"}))


# ---------------------------------------------------------------- what cannot be expressed


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"format": "gemma4", "tools": [NOW]}, "no call grammar for its syntax; supported: exaone4, gemma3"),
        ({"format": "qwen3", "tools": [NOW], "engine": "vllm"}, "a vllm grammar cannot name"),
        ({"format": "qwen3", "tools": [NOW], "engine": "llamacpp"}, "not a single token"),  # no tokenizer
        (
            {"format": "gemma3", "tools": [{"name": "f", "parameters": {"properties": {"a": {"pattern": "x+"}}}}]},
            "'pattern' cannot be enforced",
        ),
        (
            {"format": "gemma3", "tools": [{"name": "f", "parameters": {"$ref": "#/$defs/x"}}]},
            "'$ref' cannot be enforced",
        ),
        ({"format": "gemma3", "tools": [{"name": "f", "parameters": {"properties": {"not-id": {}}}}]}, "keyword"),
        ({"format": "gemma3", "tools": [{"name": "f", "parameters": {"required": ["a"], "properties": {}}}]},
         "not declared"),
        ({"format": "gemma3", "tools": []}, "at least one tool"),
    ],
)
def test_clear_errors_for_what_a_grammar_cannot_express(kwargs, message):
    with pytest.raises(GrammarError, match=message.replace("$", r"\$").replace("(", r"\(")):
        call_grammar(**kwargs)


def test_supported_formats_are_the_families_with_a_call_syntax():
    # granite4 is the Hermes wire format (formats/granite.py), so it shares the tool-call-tags grammar
    # exaone4 and holo2 write Hermes calls too; granite_pythonic's forced calls are the pythonic list
    assert supported_formats() == ["exaone4", "gemma3", "granite4", "granite_pythonic", "hermes", "holo2",
                                   "llama3_json", "pythonic", "qwen3"]


def test_plan_picks_the_call_grammar_then_the_response_format():
    common = {"engine": "llamacpp", "token_id": None, "response_format": {"type": "json_object"}}
    c = plan("gemma3", tools=[NOW], tool_choice="required", **common)
    assert c.kind == "grammar" and "get_time" in c.grammar
    # tools with a response_format: the calls or the JSON answer
    either = plan("gemma3", tools=[NOW], tool_choice="auto", **common)
    assert either.kind == "grammar"
    assert accepts(either.grammar, "[get_time()]") and accepts(either.grammar, '{"a": [1, true]}')
    assert not accepts(either.grammar, "plain text")
    assert plan("gemma3", tools=None, tool_choice="auto", **common) == Constraint("json_object", schema={"type": "object"})
    assert plan("gemma3", tools=None, tool_choice="auto", engine="vllm", token_id=None, response_format=None) is None
    with pytest.raises(GrammarError, match="not a single token.*turn thinking off"):
        plan("qwen3", tools=None, tool_choice="auto", **common)
    assert plan("qwen3", tools=None, tool_choice="auto", thinking=False, **common).kind == "json_object"


def test_response_format_with_thinking_leaves_room_for_the_reasoning():
    ids = {"<think>": 151667, "</think>": 151668}.get
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    rf = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
    # llama.cpp: one grammar, an optional reasoning block by token id, then the JSON
    c = plan("qwen3", tools=None, tool_choice="auto", engine="llamacpp", token_id=ids, response_format=rf)
    assert c.kind == "grammar" and c.reasoning_end is None
    think, end = token_char(151667), token_char(151668)
    assert accepts(c.grammar, f'{think}\nplan: a is 1{end}\n\n{{"a": 1}}')
    assert accepts(c.grammar, '{"a": 1}')
    assert not accepts(c.grammar, f'{think}plan{end}{{"a": "x"}}')
    assert not accepts(c.grammar, f'{think}plan{end}{{"a": 1}} trailing')
    # vLLM / SGLang: the schema as it is, after the reasoning (two phases, up to `</think>`)
    for engine in ("vllm", "sglang"):
        c = plan("qwen3", tools=None, tool_choice="auto", engine=engine, token_id=ids, response_format=rf)
        assert c == Constraint("json_schema", schema=schema, reasoning_end="</think>")
        off = plan("qwen3", tools=None, tool_choice="auto", engine=engine, token_id=ids, response_format=rf,
                   thinking=False)
        assert off == Constraint("json_schema", schema=schema)


def test_forced_calls_become_a_json_call_list_where_the_engine_cannot_name_the_call_tokens():
    ids = {"<tool_call>": 151657, "</tool_call>": 151658, "<think>": 151667, "</think>": 151668}.get
    tools = [WEATHER, NOW]
    for engine in ("vllm", "sglang"):
        c = plan("qwen3", tools=tools, tool_choice="required", engine=engine, token_id=ids, response_format=None,
                 thinking=False)
        assert c.kind == "json_schema" and c.calls and c.reasoning_end is None
        good = [{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "get_time", "arguments": {}}]
        jsonschema.validate(good, c.schema)
        for bad in ([], [{"name": "nope", "arguments": {}}], [{"name": "get_weather", "arguments": {}}],
                    [{"name": "get_weather", "arguments": {"city": "Paris"}, "extra": 1}]):
            with pytest.raises(jsonschema.ValidationError):
                jsonschema.validate(bad, c.schema)
        one = plan("qwen3", tools=tools, tool_choice="required", engine=engine, token_id=ids, response_format=None,
                   thinking=False, parallel=False)
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(good, one.schema)
        jsonschema.validate(good[:1], one.schema)
        # thinking on: the reasoning first, then the list
        on = plan("qwen3", tools=tools, tool_choice="required", engine=engine, token_id=ids, response_format=None)
        assert on.calls and on.reasoning_end == "</think>"
        # a family without a call grammar at all (gemma4) gets the list on every engine
        g = plan("gemma4", tools=tools, tool_choice="required", engine=engine, token_id=ids, response_format=None)
        assert g.calls and g.reasoning_end is None
    # llama.cpp keeps the family's own syntax, by token id
    c = plan("qwen3", tools=tools, tool_choice="required", engine="llamacpp", token_id=ids, response_format=None,
             thinking=False)
    assert c.kind == "grammar" and "<[151657]>" in c.grammar
    g = plan("gemma4", tools=tools, tool_choice="required", engine="llamacpp", token_id=ids, response_format=None)
    assert g.calls


def test_a_forced_call_list_on_llama_cpp_leaves_room_for_the_reasoning():
    """Gemma 4 with thinking on, on llama.cpp: no grammar for its own calls, so one grammar of an
    optional thought (its markers by token id) and then the JSON call list, held to one call when
    parallel calls are off."""
    ids = {"<|channel>": 100, "<channel|>": 101}.get
    c = plan("gemma4", tools=[WEATHER, NOW], tool_choice="required", engine="llamacpp", token_id=ids,
             response_format=None, thinking=True, parallel=False)
    assert c.kind == "grammar" and c.calls and c.reasoning_end is None
    think, end = token_char(100), token_char(101)
    one = '[{"name": "get_time", "arguments": {}}]'
    assert accepts(c.grammar, f"{think}thought\nthe time, then.{end}\n{one}")
    assert accepts(c.grammar, one)
    assert not accepts(c.grammar, "[]")
    assert not accepts(c.grammar, f"{think}thought{end}" + one[:-1] + ', {"name": "get_time", "arguments": {}}]')
    assert not accepts(c.grammar, "the time, then." + one)
    with pytest.raises(GrammarError, match="with thinking on.*not a single token.*turn thinking off"):
        plan("gemma4", tools=[NOW], tool_choice="required", engine="llamacpp", token_id=None, response_format=None,
             thinking=True)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 4), st.one_of(st.none(), st.integers(0, 4)), st.lists(st.integers(-9, 9), max_size=6))
def test_array_item_bounds_are_enforced(low, high, items):
    schema = {"type": "array", "items": {"type": "integer"}, "minItems": low}
    if high is not None:
        schema["maxItems"] = high
    if high is not None and high < low:
        with pytest.raises(GrammarError, match="'maxItems' is below 'minItems'"):
            json_schema_grammar(schema)
        return
    ok = low <= len(items) and (high is None or len(items) <= high)
    assert accepts(json_schema_grammar(schema), json.dumps(items)) == ok


def test_tools_with_a_response_format_allow_the_calls_or_the_answer():
    ids = {"<tool_call>": 151657, "</tool_call>": 151658, "<think>": 151667, "</think>": 151668}.get
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    rf = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
    for engine in ("vllm", "sglang"):
        c = plan("qwen3", tools=[NOW], tool_choice="auto", engine=engine, token_id=ids, response_format=rf)
        assert c.calls and c.reasoning_end == "</think>"
        jsonschema.validate([{"name": "get_time", "arguments": {}}], c.schema)
        jsonschema.validate({"a": 1}, c.schema)
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate({"b": 1}, c.schema)
    c = plan("qwen3", tools=[NOW], tool_choice="auto", engine="llamacpp", token_id=ids, response_format=rf)
    think, end, open_, close = (token_char(i) for i in (151667, 151668, 151657, 151658))
    assert accepts(c.grammar, f'{think}hm{end}\n{open_}\n{{"name": "get_time", "arguments": {{}}}}\n{close}')
    assert accepts(c.grammar, f'{think}hm{end}\n{{"a": 2}}')
    assert not accepts(c.grammar, f'{think}hm{end}\n{{"b": 2}}')


def test_call_lists_keep_the_schemas_local_references():
    """Pydantic's `$defs`: each tool's `$ref`s, and the response format's, still point at their own
    definitions once those schemas stand inside the call list (or beside it)."""
    ids = {"<tool_call>": 151657, "</tool_call>": 151658, "<think>": 151667, "</think>": 151668}.get
    paint = {"name": "paint", "parameters": {"$defs": {"Color": {"enum": ["red", "green"]}}, "type": "object",
                                             "properties": {"color": {"$ref": "#/$defs/Color"}}, "required": ["color"]}}
    answer = {"$defs": {"N": {"type": "integer"}}, "type": "object", "properties": {"n": {"$ref": "#/$defs/N"}},
              "required": ["n"]}  # fmt: skip
    rf = {"type": "json_schema", "json_schema": {"name": "x", "schema": answer}}
    for tools in ([paint], [NOW, paint]):
        c = plan("qwen3", tools=tools, tool_choice="required", engine="vllm", token_id=ids, response_format=None,
                 thinking=False)
        jsonschema.validate([{"name": "paint", "arguments": {"color": "red"}}], c.schema)
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate([{"name": "paint", "arguments": {"color": "blue"}}], c.schema)
        c = plan("qwen3", tools=tools, tool_choice="auto", engine="sglang", token_id=ids, response_format=rf)
        jsonschema.validate([{"name": "paint", "arguments": {"color": "green"}}], c.schema)
        jsonschema.validate({"n": 1}, c.schema)
        for bad in ({"n": "x"}, [{"name": "paint", "arguments": {"color": "blue"}}]):
            with pytest.raises(jsonschema.ValidationError):
                jsonschema.validate(bad, c.schema)
    assert paint["parameters"]["properties"]["color"] == {"$ref": "#/$defs/Color"}  # the request's own is untouched


def test_response_format_constraints():
    assert response_format_constraint(None) is None
    assert response_format_constraint({"type": "text"}) is None
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    got = response_format_constraint({"type": "json_schema", "json_schema": {"name": "x", "schema": schema}})
    assert got == Constraint("json_schema", schema=schema)


# ---------------------------------------------------------------- requests and payloads


def test_request_fields_for_sampling_and_response_format():
    msgs = [{"role": "user", "content": "hi"}]
    r = parse_chat_request({
        "messages": msgs, "top_k": -1, "min_p": 0.05, "presence_penalty": 0.5, "frequency_penalty": -0.5,
        "repetition_penalty": 1.1, "logit_bias": {"42": -100, "7": 2.5},
        "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}},
    })  # fmt: skip
    assert (r.top_k, r.min_p, r.presence_penalty, r.frequency_penalty, r.repetition_penalty) == (0, 0.05, 0.5, -0.5, 1.1)
    assert r.logit_bias == ((7, 2.5), (42, -100.0))
    assert r.response_format["json_schema"]["schema"] == {"type": "object"}
    assert parse_chat_request({"messages": msgs, "response_format": {"type": "text"}}).response_format is None
    for bad, param in [
        ({"top_k": -2}, "top_k"),
        ({"min_p": 1.5}, "min_p"),
        ({"presence_penalty": 3}, "presence_penalty"),
        ({"logit_bias": {"x": 1}}, "logit_bias"),
        ({"logit_bias": {"1": 101}}, "logit_bias"),
        ({"logit_bias": [1]}, "logit_bias"),
        ({"response_format": {"type": "yaml"}}, "response_format"),
        ({"response_format": {"type": "json_schema", "json_schema": {"schema": []}}}, "response_format.json_schema"),
    ]:
        with pytest.raises(RequestError) as info:
            parse_chat_request({"messages": msgs, **bad})
        assert info.value.param == param


SAMPLED = GenerationRequest(
    prompt_token_ids=[1, 2],
    top_k=0,
    min_p=0.1,
    presence_penalty=0.2,
    frequency_penalty=0.3,
    repetition_penalty=1.2,
    logit_bias=((5, -100.0),),
    seed=7,
)


def test_sampling_fields_reach_each_engine_under_its_own_name():
    v = vllm_payload(SAMPLED, None)
    assert (v["top_k"], v["min_p"], v["presence_penalty"], v["frequency_penalty"], v["repetition_penalty"]) == (
        -1, 0.1, 0.2, 0.3, 1.2)  # fmt: skip
    assert v["logit_bias"] == {"5": -100.0} and v["seed"] == 7
    s = sglang_payload(SAMPLED, None)["sampling_params"]
    assert (s["top_k"], s["min_p"], s["repetition_penalty"], s["logit_bias"], s["sampling_seed"]) == (
        -1, 0.1, 1.2, {"5": -100.0}, 7)  # fmt: skip
    ll = llamacpp_payload(SAMPLED, None)
    assert (ll["top_k"], ll["min_p"], ll["repeat_penalty"], ll["presence_penalty"], ll["frequency_penalty"]) == (
        0, 0.1, 1.2, 0.2, 0.3)  # fmt: skip
    assert ll["logit_bias"] == [[5, -100.0]] and ll["seed"] == 7
    bare = llamacpp_payload(GenerationRequest(prompt_token_ids=[1]), None)
    assert not {"top_k", "min_p", "repeat_penalty", "logit_bias", "grammar", "json_schema"} & bare.keys()


@pytest.mark.parametrize(
    ("constraint", "vllm", "sglang", "llamacpp"),
    [
        (Constraint("grammar", grammar="root ::= \"x\"\n"), {"grammar": 'root ::= "x"\n'},
         {"ebnf": 'root ::= "x"\n'}, {"grammar": 'root ::= "x"\n'}),
        (Constraint("json_schema", schema={"type": "array"}), {"json": {"type": "array"}},
         {"json_schema": '{"type": "array"}'}, {"json_schema": {"type": "array"}}),
        (Constraint("json_object", schema={"type": "object"}), {"json_object": True},
         {"json_schema": '{"type": "object"}'}, {"json_schema": {"type": "object"}}),
    ],
)  # fmt: skip
def test_constraints_reach_each_engine_under_its_own_name(constraint, vllm, sglang, llamacpp):
    req = GenerationRequest(prompt_token_ids=[1], constraint=constraint)
    assert vllm_payload(req, None)["structured_outputs"] == vllm
    params = sglang_payload(req, None)["sampling_params"]
    assert {k: params[k] for k in sglang} == sglang
    p = llamacpp_payload(req, None)
    assert {k: p[k] for k in llamacpp} == llamacpp


def test_a_tool_without_declared_properties_takes_any_keyword_arguments():
    g = call_grammar("gemma3", [{"name": "anything", "parameters": {"type": "object"}}])
    assert accepts(g, '[anything(a=1, b_2=[True, None], c={"k": "v"})]')
    assert accepts(g, "[anything()]")
    assert not accepts(g, "[anything(1)]")


def test_the_server_answers_400_for_a_constraint_it_cannot_express(tmp_path):
    from starlette.testclient import TestClient

    from chatsieve.server.app import create_app
    from chatsieve.server.config import ServerConfig

    tok = models.tokenizer("qwen3")

    def app(format):
        cfg = ServerConfig(model_dir=tmp_path, format=format, backend_url="http://127.0.0.1:9",
                           backend_kind="llamacpp", served_model_name="m", warm_up=False, check_engine_model=False)
        return TestClient(create_app(cfg, tokenizer=tok), base_url="http://127.0.0.1")

    # llama.cpp cannot stop at a token id, so thinking on needs the reasoning in the grammar, by its
    # markers' token ids: a tokenizer without them (Gemma 4's format on Qwen's vocabulary) cannot
    with app("gemma4") as http:
        body = {"messages": [{"role": "user", "content": "hi"}], "tools": [NOW], "tool_choice": "required",
                "chat_template_kwargs": {"enable_thinking": True}}
        r = http.post("/v1/chat/completions", json=body)
        assert r.status_code == 400
        err = r.json()["error"]
        assert err["param"] == "tool_choice" and err["code"] == "unsupported_constraint"
        assert "with thinking on" in err["message"] and "enable_thinking" in err["message"]
    with app("qwen3") as http:
        # a schema keyword the grammar cannot enforce, with the reasoning (thinking by default) in front of it
        rf = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "string", "pattern": "^a"}}}
        body = {"messages": [{"role": "user", "content": "hi"}], "response_format": rf}
        r = http.post("/v1/chat/completions", json=body)
        assert r.status_code == 400 and r.json()["error"]["param"] == "response_format"
        assert "pattern" in r.json()["error"]["message"]
