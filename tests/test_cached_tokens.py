"""Cached prompt tokens reach the client (issue 34): each engine says how much of the prompt its
prefix cache served -- vLLM in the usage chunk `stream_options.include_usage` asks for (with
`--enable-prompt-tokens-details`), SGLang in `meta_info.cached_tokens`, llama.cpp in the last
event's `timings.cache_n` -- and each API reports it its own way: chat completions
`usage.prompt_tokens_details.cached_tokens`, Responses `usage.input_tokens_details.cached_tokens`
(both counted inside the prompt), Messages `usage.cache_read_input_tokens` with `input_tokens` the
uncached rest. Through the real SDKs, streamed and whole, for qwen3, glm47 and gpt_oss on all
three engines; the stand-in engine (tests/fake_engines.py) caches the longest prefix an earlier
prompt shares, vLLM's in blocks of 16."""

from __future__ import annotations

import pytest
from agent_families import encode, model_output, served, thinks
from fake_engines import Script
from three_routes import ROUTES, ask

from chatsieve.server.backends import LlamacppReader, SglangReader, TokenBatch, VllmReader, merge

MODEL = "cache-model"
SYSTEM = "You are a careful assistant for a weather service. " * 40  # a long shared prefix
OFF = {"chat": {"extra_body": {"chat_template_kwargs": {"enable_thinking": False}}},
       "responses": {"reasoning": {"effort": "none"}}, "messages": {}}  # fmt: skip
FAMILIES = ("qwen3", "glm47", "gpt_oss")
ENGINES = ("vllm", "sglang", "llamacpp")


@pytest.fixture(scope="module", params=[(f, e) for f in FAMILIES for e in ENGINES], ids=lambda p: f"{p[0]}-{p[1]}")
def server(request, tmp_path_factory):
    family, kind = request.param
    out = model_output(family, thinking=thinks(family, False), reasoning="Hm.", text="Plain answer.")
    scripts = {"[cache]": Script(encode(family, out), batch=3)}
    with served(tmp_path_factory.mktemp(family), family, scripts, model=MODEL, backend_kind=kind,
                engine_options={"prefix_cache": True}) as (url, engine, _):  # fmt: skip
        yield family, kind, url, engine


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("route", ROUTES)
def test_the_engines_cached_tokens_reach_every_route(server, route, stream):
    family, kind, url, engine = server
    first = ask(route, url, f"[cache] first question {route} {stream}", model=MODEL, stream=stream, system=SYSTEM,
                **OFF[route])  # fmt: skip
    assert first.content.endswith("Plain answer.")
    told_first = engine.cached[-1]
    second = ask(route, url, f"[cache] a second question {route} {stream}", model=MODEL, stream=stream,
                 system=SYSTEM, **OFF[route])  # fmt: skip
    told = engine.cached[-1]
    prompt = len(engine.requests[-1][1].get("prompt") or engine.requests[-1][1].get("input_ids"))
    assert told > 100  # the long system prompt, served from the cache
    assert second.cached_tokens == told and first.cached_tokens == told_first
    assert second.prompt_tokens == prompt  # the whole prompt; Messages: input_tokens + cache_read_input_tokens
    if route == "messages":
        assert second.raw_usage["input_tokens"] == prompt - told
        assert second.raw_usage["cache_read_input_tokens"] == told


def test_vllm_without_prompt_tokens_details_reports_none_cached(tmp_path):
    """vLLM says nothing of its cache without --enable-prompt-tokens-details: 0, on every route."""
    family = "qwen3"
    out = model_output(family, thinking=False, text="Plain answer.")
    with served(tmp_path, family, {"[cache]": Script(encode(family, out))}, model=MODEL, backend_kind="vllm") as (
            url, engine, _):  # fmt: skip
        for route in ROUTES:
            for i in range(2):
                got = ask(route, url, f"[cache] q{i}", model=MODEL, stream=bool(i), system=SYSTEM, **OFF[route])
                assert got.cached_tokens == 0 and got.prompt_tokens > 100
        sent = engine.requests[-1][1]
        assert sent["stream_options"] == {"include_usage": True}


# ---------------------------------------------------------------- the readers


def _text(i: int) -> str:
    return str(i)


def test_each_reader_takes_the_engines_own_cached_count():
    vllm = VllmReader(_text)
    assert vllm.read({"choices": [{"token_ids": [5], "finish_reason": "stop", "text": "x"}]}).finish_reason == "stop"
    batch = vllm.read({"choices": [], "usage": {"prompt_tokens": 90, "prompt_tokens_details": {"cached_tokens": 64}}})
    assert batch == TokenBatch((), None, None, 64)
    assert vllm.read({"choices": [], "usage": {"prompt_tokens": 90}}) is None  # the flag is off: nothing said
    sglang = SglangReader(_text)
    first = sglang.read({"output_ids": [1], "meta_info": {"completion_tokens": 1, "cached_tokens": 37}})
    later = sglang.read({"output_ids": [2], "meta_info": {"completion_tokens": 2, "cached_tokens": 37}})
    assert first.cached_tokens == 37 and later.cached_tokens is None  # said once
    llama = LlamacppReader(_text)
    assert llama.read({"tokens": [3], "stop": False}).cached_tokens is None
    last = llama.read({"tokens": [], "stop": True, "stop_type": "eos", "tokens_cached": 120,
                       "timings": {"cache_n": 80, "prompt_n": 20}})  # fmt: skip
    assert last.cached_tokens == 80  # cache_n, not tokens_cached (the slot's whole length)
    for bad in (-1, True, "80", None):
        assert LlamacppReader(_text).read({"tokens": [], "stop": True, "timings": {"cache_n": bad}}).cached_tokens is None
    assert merge([TokenBatch((1,), None, None, 7), TokenBatch((2,), None, "stop")]).cached_tokens == 7
