"""`strict` tools with `tool_choice: auto` (issue 34), through the real SDKs on all three routes,
streamed and whole, for every family whose call syntax chatsieve constrains (qwen3, glm47, gpt_oss,
qwen3_coder), on all three engines -- against a stand-in engine that refuses what the real engine
refuses and enforces what it is sent (tests/strict_engine.py: vLLM's own request validation and
xgrammar's matcher over the family's real tokenizer; llama-server's request rules and lazy
arming over tests/gbnf.py).

The model's first choice is a call whose arguments break the schema (a wrong type, a missing
required key, a key too many); where the constraint refuses it, the engine plays its next choice.
Every call returned to a strict tool validates (jsonschema, strict mode); a non-strict tool offered
beside it keeps an unconstrained body; free text is untouched. A family whose syntax has no
constraint here (kimi_k2, gemma4) is checked after the fact: a call that fails is not returned,
and the turn says why.
"""

from __future__ import annotations

import json
from collections import Counter

import jsonschema
import pytest
from agent_families import encode, model_output, served, thinks, tokenizer
from fake_engines import Script
from three_routes import ROUTES, ask, tool

from chatsieve import formats
from chatsieve.strict_tools import strict_schema

MODEL = "strict-model"
WEATHER = {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
           "required": ["city", "days"]}  # fmt: skip
TIME = {"type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]}
# (first choice, what the model writes where that is refused) per scenario
SCENARIOS = {
    "bad-type": (("get_weather", {"city": "Paris", "days": "three"}), ("get_weather", {"city": "Paris", "days": 3})),
    "missing": (("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Paris", "days": 2})),
    "extra": (("get_weather", {"city": "Paris", "days": 1, "country": "FR"}), ("get_weather", {"city": "Paris", "days": 1})),
    "unknown": (("no_such_tool", {"x": 1}), ("get_weather", {"city": "Oslo", "days": 5})),  # only offered names
    "good": (("get_weather", {"city": "Rome", "days": 4}), None),
    "loose": (("get_time", {"zone": "Mars", "extra": "yes"}), None),  # the non-strict tool: a key too many
    "text": (None, None),
}  # fmt: skip
CONSTRAINED = ("qwen3", "glm47", "gpt_oss", "qwen3_coder")
NOTE = "[chatsieve: a tool call the model wrote was not run:"
TALLY: Counter = Counter()  # (family, engine, route, "returned" | "valid") -> calls, for the report


def _switch(route: str) -> bool | None:
    """The thinking switch each route's request below leaves: Messages without `thinking` is off."""
    return False if route == "messages" else None


def _write(family: str, route: str, call: tuple | None) -> str:
    thinking = thinks(family, _switch(route))
    if call is None:
        return model_output(family, thinking=thinking, reasoning="Easy.", text="Plain answer.")
    return model_output(family, thinking=thinking, reasoning="Look it up.", calls=(call,))


def _eog(family: str) -> frozenset[int]:
    """llama.cpp's end-of-generation ids: the stop tokens and the family's end-of-turn markers."""
    tok = tokenizer(family)
    ends = {tok.single_token_id(m) for m in formats.get(family).end} - {None}
    return frozenset(tok.stop_token_ids) | ends


def _scripts(family: str) -> dict[str, Script]:
    scripts = {}
    for route in ROUTES:
        for name, (first, then) in SCENARIOS.items():
            fallbacks = () if then is None else (encode(family, _write(family, route, then)),)
            scripts[f"[s:{name}:{route}]"] = Script(encode(family, _write(family, route, first)), batch=3,
                                                   fallbacks=fallbacks)  # fmt: skip
    return scripts


def _tools(route: str) -> list[dict]:
    """get_weather strict, get_time not, in each route's words (Responses: strict unless false)."""
    strict, loose = {"chat": (True, None), "responses": (None, False), "messages": (True, None)}[route]
    return [tool(route, "get_weather", WEATHER, strict=strict, description="Weather for a city"),
            tool(route, "get_time", TIME, strict=loose, description="Time in a zone")]  # fmt: skip


# qwen3_coder on llama.cpp has no constraint (a raw XML value a GBNF cannot end): test_checked_after_the_fact
@pytest.fixture(scope="module", params=[(f, e) for f in CONSTRAINED for e in ("vllm", "sglang", "llamacpp")
                                        if (f, e) != ("qwen3_coder", "llamacpp")],
                ids=lambda p: f"{p[0]}-{p[1]}")
def server(request, tmp_path_factory):
    family, kind = request.param
    options = {"tokenizer": tokenizer(family), "eog": _eog(family)}
    with served(tmp_path_factory.mktemp(family), family, _scripts(family), model=MODEL, backend_kind=kind,
                engine_options=options) as (url, engine, _):  # fmt: skip
        yield family, kind, url, engine


@pytest.fixture(scope="module", autouse=True)
def _tally():
    """The validation rate per family, engine and route (printed with -s)."""
    yield
    for (family, kind, route, what), n in sorted(TALLY.items()):
        if what == "returned":
            print(f"strict calls {family} {kind} {route}: {TALLY[family, kind, route, 'valid']}/{n} validate")


def _check(family: str, kind: str, route: str, calls: list[tuple[str, str]]) -> None:
    for name, args in calls:
        if name == "get_weather":
            TALLY[family, kind, route, "returned"] += 1
            jsonschema.validate(json.loads(args), strict_schema(WEATHER))
            TALLY[family, kind, route, "valid"] += 1


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("route", ROUTES)
def test_every_returned_strict_call_validates(server, route, stream):
    family, kind, url, engine = server
    for name, (first, then) in SCENARIOS.items():
        before = len(engine.chosen)
        got = ask(route, url, f"[s:{name}:{route}] Weather in Paris?", model=MODEL, stream=stream, tools=_tools(route))
        assert len(engine.chosen) == before + 1, "the request carried no strict constraint"
        _check(family, kind, route, got.calls)
        want = then or first
        if want is None:  # free text: untouched
            assert got.calls == [] and got.content.strip() == "Plain answer." and engine.chosen[-1] == 0
            continue
        assert [(n, json.loads(a)) for n, a in got.calls] == [want], name
        assert NOTE not in got.content
        assert engine.chosen[-1] == (1 if then is not None else 0), name  # the constraint bit where it had to


def test_the_request_shapes(server):
    """What each engine is sent: vLLM's structured_outputs.structural_tag, SGLang's structural_tag
    sampling parameter (JSON text), llama.cpp's lazy grammar with its trigger (and preserved tokens
    for a one-token trigger word); the stand-in already refused any shape the engine would."""
    family, kind, url, engine = server
    ask("chat", url, "[s:good:chat] hi", model=MODEL, stream=False, tools=_tools("chat"))
    sent = engine.requests[-1][1]
    if kind == "vllm":
        tag = json.loads(sent["structured_outputs"]["structural_tag"])
    elif kind == "sglang":
        tag = json.loads(sent["sampling_params"]["structural_tag"])
    else:
        trigger = sent["grammar_triggers"]
        assert sent["grammar_lazy"] is True and len(trigger) == 1 and trigger[0]["type"] == 1
        single = tokenizer(family).single_token_id(trigger[0]["value"]) is not None
        assert sent["preserved_tokens"] == ([trigger[0]["value"]] if single else [])
        return
    fmt = tag["format"]
    assert fmt["type"] == "triggered_tags" and fmt["at_least_one"] is False and fmt["stop_after_first"] is False


def test_no_strict_tool_sends_no_constraint(server):
    """Chat completions without `strict: true` (and Responses with `strict: false`): nothing is
    sent, nothing checked: the model's first choice comes back, as before."""
    family, kind, url, engine = server
    loose = [tool("chat", "get_weather", WEATHER), tool("chat", "get_time", TIME)]
    got = ask("chat", url, "[s:bad-type:chat] hi", model=MODEL, stream=False, tools=loose)
    assert [(n, json.loads(a)) for n, a in got.calls] == [SCENARIOS["bad-type"][0]]
    sent = engine.requests[-1][1]
    assert "structured_outputs" not in sent and "structural_tag" not in sent.get("sampling_params", {})
    assert "grammar" not in sent
    responses = [tool("responses", "get_weather", WEATHER, strict=False), tool("responses", "get_time", TIME, strict=False)]
    got = ask("responses", url, "[s:missing:responses] hi", model=MODEL, stream=False, tools=responses)
    assert [(n, json.loads(a)) for n, a in got.calls] == [SCENARIOS["missing"][0]]


def test_parallel_tool_calls_false_keeps_one_call(server):
    """llama.cpp's grammar admits one call (its end of generation follows); the structural tag does
    not stop after the first (only a stop token would be admitted then, and GLM's end of turn need
    not be one): the server keeps the first call."""
    family, kind, url, engine = server
    got = ask("chat", url, "[s:good:chat] hi", model=MODEL, stream=False, tools=_tools("chat"),
              parallel_tool_calls=False)  # fmt: skip
    assert [(n, json.loads(a)) for n, a in got.calls] == [SCENARIOS["good"][0]]
    if kind == "llamacpp":
        assert "(nl call)*" not in engine.requests[-1][1]["grammar"]


# ---------------------------------------------------------------- checked after the fact




@pytest.mark.parametrize("family,kind", [("kimi_k2", "vllm"), ("gemma4", "sglang"), ("qwen3_coder", "llamacpp")])
@pytest.mark.parametrize("route", ROUTES)
def test_checked_after_the_fact(tmp_path, family, kind, route):
    """No constraint can be sent (kimi_k2's and gemma4's call syntaxes have no strict builder;
    qwen3_coder's raw XML values end at an ordinary-text tag a GBNF cannot cut): a strict tool's
    call whose arguments fail is not returned, and the turn ends with a note saying why; a valid
    one is returned; the non-strict tool's call is not checked."""
    options = {"tokenizer": tokenizer(family), "eog": _eog(family)}
    with served(tmp_path, family, _scripts(family), model=MODEL, backend_kind=kind, engine_options=options) as (
            url, engine, _):  # fmt: skip
        for stream in (False, True):
            bad = ask(route, url, f"[s:bad-type:{route}] hi", model=MODEL, stream=stream, tools=_tools(route))
            assert bad.calls == [] and NOTE in bad.content and "`get_weather` was called with arguments" in bad.content
            assert "days" in bad.content and "not of type 'integer'" in bad.content
            good = ask(route, url, f"[s:good:{route}] hi", model=MODEL, stream=stream, tools=_tools(route))
            assert [(n, json.loads(a)) for n, a in good.calls] == [SCENARIOS["good"][0]] and NOTE not in good.content
            loose = ask(route, url, f"[s:loose:{route}] hi", model=MODEL, stream=stream, tools=_tools(route))
            assert [(n, json.loads(a)) for n, a in loose.calls] == [SCENARIOS["loose"][0]]
        sent = engine.requests[-1][1]
        assert "structured_outputs" not in sent and "grammar" not in sent
        assert "structural_tag" not in sent.get("sampling_params", {})
        assert engine.chosen == []  # nothing strict reached the engine


# ---------------------------------------------------------------- the check itself


def test_the_filter_checks_each_strict_call_as_it_ends():
    from chatsieve.events import ContentDelta, ToolCallArgsDelta, ToolCallEnd, ToolCallStart
    from chatsieve.protocols.common import ChatRequest

    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}},
             {"type": "function", "function": {"name": "get_time", "parameters": TIME}}]  # fmt: skip
    req = ChatRequest(messages=[], tools=tools, strict_tools=("get_weather",),
                      tool_aliases=(("ns__get_weather", "get_weather"),))  # fmt: skip

    def call(i: int, name: str, args: dict, incomplete: bool = False) -> list:
        text = json.dumps(args)
        return [ToolCallStart(i, f"c{i}", name), ToolCallArgsDelta(i, text[:5]), ToolCallArgsDelta(i, text[5:]),
                ToolCallEnd(i, incomplete)]  # fmt: skip

    f = req.tool_call_filter()
    out = f.apply([ContentDelta("Let me see."), *call(0, "get_weather", {"city": "Paris", "days": "x"}),
                   *call(1, "ns__get_weather", {"city": "Oslo", "days": 1}),
                   *call(2, "get_time", {"zone": 3, "more": True})])  # fmt: skip
    f.finish()
    starts = [(e.index, e.name) for e in out if isinstance(e, ToolCallStart)]
    assert starts == [(0, "get_weather"), (1, "get_time")]  # the bad one dropped, the alias checked and kept
    assert [e.json_text for e in out if isinstance(e, ToolCallArgsDelta) and e.index == 0] == ['{"cit', 'y": "Oslo", "days": 1}']
    assert len(f.unusable) == 1 and "`get_weather` was called with arguments" in f.unusable[0]
    assert "at days: 'x' is not of type 'integer'" in f.unusable[0]
    assert f.note().startswith("\n\n[chatsieve: a tool call the model wrote was not run:")  # text came first
    # one held across batches, and a call cut short (max tokens) is not judged
    g = req.tool_call_filter()
    first, rest = call(0, "get_weather", {"city": "Rome"}, incomplete=True)[:2], call(0, "get_weather", {"city": "Rome"},
                                                                                      incomplete=True)[2:]  # fmt: skip
    assert g.apply(first) == [] and len(g.apply(rest)) == 4 and g.unusable == []
    # never ended: dropped, said
    h = req.tool_call_filter()
    assert h.apply(call(0, "get_weather", {"city": "Rome", "days": 1})[:2]) == []
    h.finish()
    assert h.unusable == ["`get_weather` was called, but the call never ended"]


def test_the_strict_tools_example_runs(tmp_path, capsys):
    """docs/serving.md "Strict tools": the client as written (its port only), against a Qwen3
    stand-in on vLLM whose model first writes `"days": "three"`."""
    from readme_recipes import readme_blocks

    (snippet,) = readme_blocks("Strict tools")
    family = "qwen3"
    first = model_output(family, thinking=True, reasoning="Three days.", calls=(("get_weather", {"city": "Paris", "days": "three"}),))
    then = model_output(family, thinking=True, reasoning="Three days.", calls=(("get_weather", {"city": "Paris", "days": 3}),))
    scripts = {"Weather in Paris for three days?": Script(encode(family, first), fallbacks=(encode(family, then),))}
    with served(tmp_path, family, scripts, model="Qwen3-8B", engine_options={"tokenizer": tokenizer(family)}) as (
            url, engine, _):  # fmt: skip
        assert "http://127.0.0.1:8000/v1" in snippet
        exec(compile(snippet.replace("http://127.0.0.1:8000/v1", url + "/v1"), "docs/serving.md", "exec"), {})
    assert capsys.readouterr().out == 'get_weather {"city":"Paris","days":3}\n'
    assert engine.chosen == [1]


def test_which_tools_are_strict_per_route_and_a_bad_flag_is_a_400():
    from chatsieve.protocols.anthropic import parse_messages_request
    from chatsieve.protocols.common import RequestError
    from chatsieve.protocols.openai_chat import parse_chat_request
    from chatsieve.protocols.openai_responses_request import parse_responses_request

    chat = parse_chat_request({"messages": [{"role": "user", "content": "hi"}], "tools": _tools("chat")})
    responses = parse_responses_request({"input": "hi", "tools": _tools("responses")}).chat_request()
    messages = parse_messages_request({"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}],
                                       "tools": _tools("messages")}).chat  # fmt: skip
    assert chat.strict_tools == responses.strict_tools == messages.strict_tools == ("get_weather",)
    # Messages: the flag stays out of the function the template renders (the prompt is the same either way)
    assert "strict" not in messages.tools[0]["function"]
    bad = {"chat": lambda: parse_chat_request({"messages": [{"role": "user", "content": "hi"}], "tools": [
               {"type": "function", "function": {"name": "f", "strict": "yes"}}]}),
           "responses": lambda: parse_responses_request({"input": "hi", "tools": [
               {"type": "function", "name": "f", "strict": 1}]}),
           "messages": lambda: parse_messages_request({"model": "m", "max_tokens": 10, "messages": [
               {"role": "user", "content": "hi"}], "tools": [{"name": "f", "input_schema": {}, "strict": "true"}]})}  # fmt: skip
    for route, parse in bad.items():
        with pytest.raises(RequestError) as e:
            parse()
        assert e.value.status == 400 and e.value.param.endswith("strict"), route
