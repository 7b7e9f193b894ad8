"""Forced calls and structured output through the real server, on all three engine protocols.

The fake engine honours the constraint it is sent (tests/fake_engines.py `Script.constrained`):
it refuses a request without one, or whose scripted output the constraint does not allow, so a
forced call or a schema that never reaches the engine fails here. Paths (README "Forced calls
and structured output"): qwen3 on llama.cpp keeps its own `<tool_call>` syntax by token id;
vLLM and SGLang get a JSON list of calls; with thinking on, vLLM and SGLang generate the
reasoning first (stopping at its end token) and the constrained answer in a second request.
"""

from __future__ import annotations

import contextlib
import json

import jsonschema
import openai
import pytest
from fake_engines import FakeEngine, Script, ServerThread
from test_server_agent_loop import FAMILIES, _tokenizer

from chatsieve.server.app import create_app
from chatsieve.server.config import ServerConfig

MODEL = "structured-model"
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}, "temp": {"type": "integer"}},
          "required": ["city", "temp"], "additionalProperties": False}  # fmt: skip
RESPONSE_FORMAT = {"type": "json_schema", "json_schema": {"name": "weather", "schema": SCHEMA}}
CALL_LIST = '[{"name": "get_weather", "arguments": {"city": "Paris"}}]'
ANSWER = '{"city": "Paris", "temp": 18}'
REASONING = {"[forced]": "The user wants Paris; I use the tool.", "[schema]": "The user wants Paris as JSON.",
             "[either-call]": "Tools first: I call it.", "[either-answer]": "I know it: the answer."}

# (family, engine) -> (phase-1 reasoning script or None, the constrained output) for a forced call
_END = {"qwen3": "<|im_end|>", "gemma4": "<turn|>", "gpt_oss": "<|return|>"}


def _think(family: str, key: str) -> str:
    if family == "qwen3":
        return f"<think>\n{REASONING[key]}\n</think>"
    return f"<|channel|>analysis<|message|>{REASONING[key]}<|end|>"


def _forced(family: str, engine: str, key: str = "[forced]") -> tuple[str | None, str]:
    if family == "qwen3" and engine == "llamacpp":  # its own syntax, reasoning and all, in one grammar
        return None, (f"{_think('qwen3', key)}\n\n<tool_call>\n" + '{"name": "get_weather", "arguments": {"city": "Paris"}}'
                      "\n</tool_call><|im_end|>")
    if family in ("gemma4", "gpt_oss"):  # gpt-oss: the constraint covers the whole output (README)
        return None, CALL_LIST + _END[family]
    return _think(family, key), CALL_LIST + _END[family]


def _structured(family: str, engine: str, key: str = "[schema]") -> tuple[str | None, str]:
    if family == "qwen3" and engine == "llamacpp":
        return None, f"{_think('qwen3', key)}\n\n{ANSWER}<|im_end|>"
    if family in ("gemma4", "gpt_oss"):
        return None, ANSWER + _END[family]
    return _think(family, key), ANSWER + _END[family]


@pytest.fixture(scope="module", params=[(f, e) for f in ("qwen3", "gemma4", "gpt_oss")
                                        for e in ("vllm", "sglang", "llamacpp")],
                ids=lambda p: f"{p[0]}-{p[1]}")
def server(request, tmp_path_factory):
    family, engine_kind = request.param
    tok = _tokenizer(FAMILIES[family])
    scripts = {}
    for key, (think, out) in (("[forced]", _forced(family, engine_kind)), ("[schema]", _structured(family, engine_kind)),
                              ("[either-call]", _forced(family, engine_kind, "[either-call]")),
                              ("[either-answer]", _structured(family, engine_kind, "[either-answer]"))):
        ids = tok.encode(out)
        if think is None:
            scripts[key] = Script(ids, batch=2, constrained=True)
        else:  # phase 1 plays the reasoning; phase 2's prompt holds it, and plays the answer
            scripts[key] = Script(tok.encode(think), batch=2, unconstrained=True)
            scripts[REASONING[key]] = Script(ids, batch=2, constrained=True)
    engine = FakeEngine(tok.decode, scripts)
    with contextlib.ExitStack() as stack:
        url = stack.enter_context(ServerThread(engine.app)).url
        cfg = ServerConfig(model_dir=tmp_path_factory.mktemp(family), format=family, backend_url=url,
                           backend_kind=engine_kind, served_model_name=MODEL, warm_up=False,
                           check_engine_model=False)  # fmt: skip
        url = stack.enter_context(ServerThread(create_app(cfg, tokenizer=tok))).url
        yield family, engine_kind, openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=60), \
            engine, tok


def _collect(stream) -> tuple[str, str, list[dict], dict | None]:
    reasoning, content, calls, usage = "", "", {}, None
    for chunk in stream:
        if chunk.usage:
            usage = chunk.usage.model_dump()
        if not chunk.choices:
            continue
        d = chunk.choices[0].delta
        reasoning += getattr(d, "reasoning_content", None) or ""
        content += d.content or ""
        for tc in d.tool_calls or []:
            if tc.id:
                calls[tc.index] = {"name": tc.function.name, "arguments": ""}
            calls[tc.index]["arguments"] += tc.function.arguments or ""
    return reasoning, content, [calls[i] for i in sorted(calls)], usage


def _gpt_oss_llamacpp(family, engine_kind):
    return False  # every engine serves gpt-oss' constraints (over its whole output)


@pytest.mark.parametrize("choice", ["required", "named"])
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_forced_call(server, choice, stream):
    family, engine_kind, c, engine, tok = server
    tool_choice = "required" if choice == "required" else {"type": "function", "function": {"name": "get_weather"}}
    kw = {"model": MODEL, "messages": [{"role": "user", "content": "[forced] Weather in Paris?"}],
          "tools": [WEATHER], "tool_choice": tool_choice}  # fmt: skip
    if _gpt_oss_llamacpp(family, engine_kind):
        # llama.cpp cannot stop at <|end|> nor name gpt-oss' channels in a grammar: a clear 400
        with pytest.raises(openai.BadRequestError, match="thinking on"):
            c.chat.completions.create(**kw)
        return
    before = len(engine.requests)
    if stream:
        reasoning, content, calls, usage = _collect(
            c.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kw))
    else:
        r = c.chat.completions.create(**kw)
        m = r.choices[0].message
        assert r.choices[0].finish_reason == "tool_calls"
        reasoning, content = getattr(m, "reasoning_content", None) or "", m.content or ""
        calls = [{"name": t.function.name, "arguments": t.function.arguments} for t in m.tool_calls]
        usage = r.usage.model_dump()
    assert [(x["name"], json.loads(x["arguments"])) for x in calls] == [("get_weather", {"city": "Paris"})]
    assert content == ""
    sent = engine.requests[before:]
    if family in ("gemma4", "gpt_oss") or engine_kind == "llamacpp":
        assert len(sent) == 1 and reasoning == ("" if family in ("gemma4", "gpt_oss") else REASONING["[forced]"])
    else:  # two phases: the reasoning unconstrained, then the call list; usage counts both
        assert len(sent) == 2 and reasoning == REASONING["[forced]"]
        think, out = _forced(family, engine_kind)
        assert usage["completion_tokens"] == len(tok.encode(think)) + len(tok.encode(out))


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_response_format_with_thinking(server, stream):
    family, engine_kind, c, engine, tok = server
    kw = {"model": MODEL, "messages": [{"role": "user", "content": "[schema] Weather in Paris as JSON"}],
          "response_format": RESPONSE_FORMAT}  # fmt: skip
    if stream:
        reasoning, content, calls, usage = _collect(
            c.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kw))
    else:
        r = c.chat.completions.create(**kw)
        m = r.choices[0].message
        reasoning, content, calls = getattr(m, "reasoning_content", None) or "", m.content, m.tool_calls or []
        usage = r.usage.model_dump()
    jsonschema.validate(json.loads(content), SCHEMA)
    assert json.loads(content) == json.loads(ANSWER) and not calls
    think, out = _structured(family, engine_kind)
    assert reasoning == (REASONING["[schema]"] if think or family == "qwen3" else "")
    produced = len(tok.encode(out)) + (len(tok.encode(think)) if think else 0)
    assert usage["completion_tokens"] == produced


@pytest.mark.parametrize("case", ["call", "answer"])
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_tools_with_response_format_give_the_calls_or_the_constrained_answer(server, case, stream):
    family, engine_kind, c, engine, tok = server
    key = f"[either-{case}]"
    kw = {"model": MODEL, "messages": [{"role": "user", "content": f"{key} Weather in Paris?"}],
          "tools": [WEATHER], "response_format": RESPONSE_FORMAT}  # fmt: skip
    if _gpt_oss_llamacpp(family, engine_kind):
        with pytest.raises(openai.BadRequestError, match="thinking on"):
            c.chat.completions.create(**kw)
        return
    if stream:
        reasoning, content, calls, _ = _collect(c.chat.completions.create(stream=True, **kw))
    else:
        m = c.chat.completions.create(**kw).choices[0].message
        reasoning, content = getattr(m, "reasoning_content", None) or "", m.content or ""
        calls = [{"name": t.function.name, "arguments": t.function.arguments} for t in m.tool_calls or []]
    if case == "call":
        assert [(x["name"], json.loads(x["arguments"])) for x in calls] == [("get_weather", {"city": "Paris"})]
        assert content == ""
    else:
        assert not calls and json.loads(content) == json.loads(ANSWER)
    assert reasoning == ("" if family in ("gemma4", "gpt_oss") else REASONING[key])
