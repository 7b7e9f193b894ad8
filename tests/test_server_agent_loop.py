"""An agent loop with the real openai client: call -> tool result -> answer, for every family
whose chat template in shared/models renders tools, streamed and whole.

Turn 2 sends back the assistant message exactly as the client received it (`content: null`
with `tool_calls`, or the streamed pieces folded the same way), then the tool result; the
fake engine (replaying real-tokenizer ids) answers only once the tool result is in the prompt.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass

import openai
import pytest
from fake_engines import FakeEngine, Script, ServerThread
from models import chat_tokenizer, gemma4_tokenizer, model_path, tokenizer

import chatsieve
from chatsieve.server.app import create_app
from chatsieve.server.config import ServerConfig

MODEL = "loop-model"
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
RESULT = "18C and sunny"
ANSWER = "It is 18C and sunny in Paris."


@dataclass(frozen=True)
class Family:
    format: str
    tokenizer: str  # tests/models.py name
    template: str  # under shared/models
    call: str  # the model's output for turn 1
    answer_end: str  # appended to ANSWER for turn 2
    kwargs: tuple = ()  # chat_template_kwargs


FAMILIES = {
    "qwen3": Family(
        "qwen3",
        "qwen3",
        "qwen3/chat_template.jinja",
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>',
        "<|im_end|>",
        (("enable_thinking", False),),
    ),
    "qwen3_coder": Family(
        "qwen3_coder",
        "qwen3",
        "qwen3/chat_template.qwen3-coder.jinja",
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>"
        "<|im_end|>",
        "<|im_end|>",
    ),
    "gemma4": Family(
        "gemma4",
        "gemma4",
        "gemma4/chat_template.jinja",
        '<|tool_call>call:get_weather{city:<|"|>Paris<|"|>}<tool_call|><turn|>',
        "<turn|>",
    ),
    "deepseek_v32": Family(
        "deepseek_v32",
        "deepseek",
        "deepseek/chat_template.v3.2.jinja",
        '<｜DSML｜function_calls>\n<｜DSML｜invoke name="get_weather">\n'
        '<｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>\n</｜DSML｜invoke>\n'
        "</｜DSML｜function_calls><｜end▁of▁sentence｜>",
        "<｜end▁of▁sentence｜>",
    ),
    "glm47": Family(
        "glm47",
        "glm",
        "glm/chat_template.glm-4.7-flash.jinja",
        "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value></tool_call><|observation|>",
        "<|user|>",
        (("enable_thinking", False),),
    ),
    "gpt_oss": Family(
        "gpt_oss",
        "gpt-oss",
        "gpt-oss/chat_template.jinja",
        '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>',
        "<|return|>",
    ),
    "kimi_k2": Family(
        "kimi_k2",
        "kimi_k2",
        "kimi-k2/chat_template.kimi-k2-instruct.jinja",
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>"
        '{"city": "Paris"}<|tool_call_end|><|tool_calls_section_end|><|im_end|>',
        "<|im_end|>",
    ),
    "llama3_json": Family(
        "llama3_json",
        "llama3",
        "llama3/chat_template.llama-3.2.jinja",
        '{"name": "get_weather", "parameters": {"city": "Paris"}}<|eot_id|>',
        "<|eot_id|>",
    ),
    "mistral": Family(
        "mistral",
        "mistral",
        "mistral/chat_template.mistral-nemo-2407.jinja",
        '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}]</s>',
        "</s>",
    ),
}


def _tokenizer(family: Family):
    """The family's real tokenizer with its template."""
    if family.tokenizer == "glm":
        base = chatsieve.load_tokenizer(model_path("glm/glm-5"))
    elif family.tokenizer == "kimi_k2":  # the real tiktoken vocabulary, converted at load
        base = tokenizer("kimi_k2")
    elif family.tokenizer == "gemma4":
        base = gemma4_tokenizer()
    elif family.tokenizer in ("qwen3", "deepseek", "gpt-oss", "llama3"):
        base = chat_tokenizer(family.tokenizer) if family.tokenizer != "llama3" else tokenizer("llama3")
    else:
        base = tokenizer(family.tokenizer)
    config = {k: v for k, v in base.config.items() if k in ("bos_token", "eos_token", "pad_token")}
    if family.tokenizer == "gemma4":
        config = {"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>"}
    if family.tokenizer == "glm":
        config = {"eos_token": "<|endoftext|>"}
    if family.tokenizer == "kimi_k2":
        config = {"bos_token": "[BOS]", "eos_token": "[EOS]"}
    config["chat_template"] = model_path(family.template).read_text(encoding="utf-8")
    return chatsieve.load_tokenizer(base.hf, config=config)


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def loop_server(request, tmp_path_factory):
    family = FAMILIES[request.param]
    tok = _tokenizer(family)
    scripts = {
        f"[loop:{family.format}]": Script(tok.encode(family.call), batch=2),
        f"{RESULT} for {family.format}": Script(tok.encode(ANSWER + family.answer_end), batch=3),
    }
    engine = FakeEngine(tok.decode, scripts)
    cfg = ServerConfig(
        model_dir=tmp_path_factory.mktemp(family.format),
        format=family.format,
        backend_url="",
        served_model_name=MODEL,
        warm_up=False,
    )
    with contextlib.ExitStack() as stack:
        engine_url = stack.enter_context(ServerThread(engine.app)).url
        cfg = ServerConfig(**{**cfg.__dict__, "backend_url": engine_url})
        url = stack.enter_context(ServerThread(create_app(cfg, tokenizer=tok))).url
        yield family, url, engine


def _client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=60)


def _turn(c: openai.OpenAI, family: Family, messages: list, stream: bool) -> dict:
    """One request; the assistant message as a client appends it to the conversation."""
    kw = {"model": MODEL, "messages": messages, "tools": [WEATHER]}
    if family.kwargs:
        kw["extra_body"] = {"chat_template_kwargs": dict(family.kwargs)}
    if not stream:
        r = c.chat.completions.create(**kw)
        assert r.choices[0].finish_reason in ("tool_calls", "stop")
        return r.choices[0].message.model_dump(exclude_none=False, exclude={"reasoning_content"})
    content, calls = None, {}
    for chunk in c.chat.completions.create(stream=True, **kw):
        if not chunk.choices:
            continue
        d = chunk.choices[0].delta
        if d.content:
            content = (content or "") + d.content
        for tc in d.tool_calls or []:
            if tc.id:
                calls[tc.index] = {"id": tc.id, "type": "function", "function": {"name": tc.function.name,
                                                                                  "arguments": ""}}
            calls[tc.index]["function"]["arguments"] += tc.function.arguments or ""
    return {"role": "assistant", "content": content, "tool_calls": [calls[i] for i in sorted(calls)] or None}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_agent_loop_call_result_answer(loop_server, stream):
    family, url, engine = loop_server
    c = _client(url)
    messages = [{"role": "user", "content": f"[loop:{family.format}] What is the weather in Paris?"}]
    assistant = _turn(c, family, messages, stream)
    assert assistant["content"] in (None, "")
    (call,) = assistant["tool_calls"]
    assert call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {"city": "Paris"}
    if not stream:
        assert assistant["content"] is None  # exactly what OpenAI sends for a call-only turn
    messages += [
        assistant,
        {"role": "tool", "tool_call_id": call["id"], "content": f"{RESULT} for {family.format}"},
    ]
    final = _turn(c, family, messages, stream)
    assert final["content"] == ANSWER and not final["tool_calls"]
    # the engine saw the whole conversation: the call it made and the tool's result
    prompt = engine.decode(engine.requests[-1][1]["prompt"])
    assert "Paris" in prompt.split(f"[loop:{family.format}]", 1)[1] and f"{RESULT} for" in prompt
