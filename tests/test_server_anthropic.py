"""`POST /v1/messages` with the real `anthropic` SDK against the real server and a scripted
stand-in engine replaying real-tokenizer ids, for six families: calls (one, two, after text),
thinking blocks, a tool loop, streaming equal to whole, stop reasons, usage and errors.

Every request asks for thinking, as Claude Code does; each family's output is written the way
its template renders an assistant turn.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from dataclasses import dataclass

import anthropic
import httpx
import openai
import pytest
from fake_engines import FakeEngine, Script, ServerThread
from readme_recipes import readme_blocks
from test_server_agent_loop import FAMILIES as LOOP_FAMILIES
from test_server_agent_loop import Family as LoopFamily
from test_server_agent_loop import _tokenizer

from chatsieve.server.app import create_app
from chatsieve.server.config import ServerConfig
from chatsieve.server.security import SecurityPolicy

MODEL = "anthropic-model"
WEATHER = {
    "name": "get_weather",
    "description": "Weather for a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
THINKING = {"type": "enabled", "budget_tokens": 2000}
OFF = {"type": "disabled"}
RESULT = "18C and sunny"
BUDGET_REASONING = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho"
ANSWER = "It is 18C and sunny in Paris."
Calls = list[tuple[str, dict]]


@dataclass(frozen=True)
class Family:
    name: str
    loop: LoopFamily  # tokenizer and template (tests/test_server_agent_loop.py)
    think: Callable[[str], str]  # reasoning, as the turn writes it
    text: Callable[[str], str]  # final text and the turn's end
    calls: Callable[[Calls], str]  # calls and the turn's end
    lead: Callable[[str], str] = lambda t: t  # text written before calls
    parallel: bool = True
    loop_thinks: bool = True  # the prompt after a tool result lets the model think again


def _json(args: dict) -> str:
    return json.dumps(args)


def _gemma_args(args: dict) -> str:
    return ",".join(f'{k}:<|"|>{v}<|"|>' for k, v in args.items())


def _glm_args(args: dict) -> str:
    return "".join(f"<arg_key>{k}</arg_key><arg_value>{v}</arg_value>" for k, v in args.items())


def _harmony_call(name: str, args: dict) -> str:
    return f"<|channel|>commentary to=functions.{name} <|constrain|>json<|message|>{_json(args)}<|call|>"


DS_END = "<｜end▁of▁sentence｜>"
FAMILIES = {
    "qwen3": Family(
        "qwen3",
        LOOP_FAMILIES["qwen3"],
        think=lambda r: f"<think>\n{r}\n</think>\n\n",
        text=lambda t: t + "<|im_end|>",
        calls=lambda cs: "\n".join(
            f'<tool_call>\n{{"name": "{n}", "arguments": {_json(a)}}}\n</tool_call>' for n, a in cs
        )
        + "<|im_end|>",
        lead=lambda t: t + "\n",
    ),
    "gemma4": Family(
        "gemma4",
        LOOP_FAMILIES["gemma4"],
        think=lambda r: f"<|channel>thought\n{r}<channel|>",
        text=lambda t: t + "<turn|>",
        calls=lambda cs: "".join(f"<|tool_call>call:{n}{{{_gemma_args(a)}}}<tool_call|>" for n, a in cs) + "<turn|>",
    ),
    "gpt_oss": Family(
        "gpt_oss",
        LOOP_FAMILIES["gpt_oss"],
        think=lambda r: f"<|channel|>analysis<|message|>{r}<|end|><|start|>assistant",
        text=lambda t: f"<|channel|>final<|message|>{t}<|return|>",
        calls=lambda cs: "<|start|>assistant".join(_harmony_call(n, a) for n, a in cs),
        lead=lambda t: f"<|channel|>commentary<|message|>{t}<|end|><|start|>assistant",
        parallel=False,  # harmony ends the turn at <|call|>, a stop token: one call per turn
    ),
    "deepseek_v31": Family(
        "deepseek_v31",
        LoopFamily("deepseek_v31", "deepseek", "deepseek/chat_template.v3.1.jinja", "", ""),
        think=lambda r: f"{r}</think>",
        text=lambda t: t + DS_END,
        calls=lambda cs: "<｜tool▁calls▁begin｜>"
        + "".join(f"<｜tool▁call▁begin｜>{n}<｜tool▁sep｜>{_json(a)}<｜tool▁call▁end｜>" for n, a in cs)
        + "<｜tool▁calls▁end｜>"
        + DS_END,
        loop_thinks=False,  # V3.1 thinks only before its first call: the template closes the block
    ),
    "kimi_k2": Family(
        "kimi_k2",
        LOOP_FAMILIES["kimi_k2"],
        think=lambda r: f"<think>{r}</think>",
        text=lambda t: t + "<|im_end|>",
        calls=lambda cs: "<|tool_calls_section_begin|>"
        + "".join(
            f"<|tool_call_begin|>functions.{n}:{i}<|tool_call_argument_begin|>{_json(a)}<|tool_call_end|>"
            for i, (n, a) in enumerate(cs)
        )
        + "<|tool_calls_section_end|><|im_end|>",
    ),
    "glm47": Family(
        "glm47",
        LOOP_FAMILIES["glm47"],
        think=lambda r: f"{r}</think>",
        text=lambda t: t + "<|user|>",
        calls=lambda cs: "".join(f"<tool_call>{n}{_glm_args(a)}</tool_call>" for n, a in cs) + "<|observation|>",
    ),
}

PARIS = ("get_weather", {"city": "Paris"})
LONDON = ("get_weather", {"city": "London"})


def scripts(f: Family) -> dict[str, str]:
    """Prompt key -> the model's output."""
    return {
        "[single]": f.think("I need the weather.") + f.calls([PARIS]),
        "[parallel]": f.think("Two cities.") + f.calls([PARIS, LONDON]),
        "[text-call]": f.think("Check first.") + f.lead("Let me check.") + f.calls([PARIS]),
        "[think]": f.think("The user wants a capital.") + f.text("Paris."),
        f"{RESULT} [loop]": (f.think("I have the result.") if f.loop_thinks else "") + f.text(ANSWER),
        "[long]": f.text("one two three four five six seven eight nine ten"),  # asked with thinking off
        "[budget]": f.think(BUDGET_REASONING) + f.text("Too late."),
        # what the engine plays once the server has closed the reasoning at the budget
        BUDGET_REASONING[:12]: f.text("The answer is 7."),
    }


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def served(request, tmp_path_factory):
    family = FAMILIES[request.param]
    tok = _tokenizer(family.loop)
    engine = FakeEngine(tok.decode, {k: Script(tok.encode(v), batch=2) for k, v in scripts(family).items()})
    with contextlib.ExitStack() as stack:
        engine_url = stack.enter_context(ServerThread(engine.app)).url
        cfg = ServerConfig(
            model_dir=tmp_path_factory.mktemp(family.name),
            format=family.name,
            backend_url=engine_url,
            served_model_name=MODEL,
            warm_up=False,
        )
        url = stack.enter_context(ServerThread(create_app(cfg, tokenizer=tok))).url
        yield family, url, engine, tok


def client(url: str, **kw) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key="none", max_retries=0, timeout=60, **kw)


def ask(url: str, key: str, *, messages: list | None = None, **kw) -> tuple:
    """The same request whole and streamed: (message, streamed final message, stream events)."""
    args = {
        "model": MODEL,
        "max_tokens": 4000,
        "thinking": THINKING,
        "tools": [WEATHER],
        "messages": messages or [{"role": "user", "content": f"{key} What is the weather?"}],
        **kw,
    }
    c = client(url)
    whole = c.messages.create(**args)
    with c.messages.stream(**args) as s:
        events = list(s)
        streamed = s.get_final_message()
    return whole, streamed, events


def comparable(message) -> dict:
    """The message without what differs between two requests (ids)."""
    d = message.model_dump(exclude_none=True)
    d.pop("id")
    for block in d["content"]:
        if block["type"] == "tool_use":
            block.pop("id")
    return d


def blocks(message) -> list[tuple]:
    out = []
    for b in message.content:
        if b.type == "thinking":
            out.append(("thinking", b.thinking))
        elif b.type == "text":
            out.append(("text", b.text))
        else:
            out.append(("tool_use", b.name, b.input))
    return out


def check_pair(whole, streamed, events) -> None:
    """Streamed equals whole; the event sequence is Anthropic's."""
    assert comparable(streamed) == comparable(whole)
    assert whole.id.startswith("msg_") and whole.type == "message" and whole.role == "assistant"
    assert whole.model == MODEL
    for b in whole.content:
        if b.type == "tool_use":
            assert b.id.startswith("toolu_")
        if b.type == "thinking":
            assert isinstance(b.signature, str) and b.signature
    kinds = [e.type for e in events]
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop" and kinds[-2] == "message_delta"
    # blocks open and close in order, numbered 0, 1, ...
    opened = [e.index for e in events if e.type == "content_block_start"]
    closed = [e.index for e in events if e.type == "content_block_stop"]
    assert opened == closed == list(range(len(whole.content)))


def test_single_call(served):
    family, url, engine, tok = served
    whole, streamed, events = ask(url, "[single]")
    check_pair(whole, streamed, events)
    assert blocks(whole) == [("thinking", "I need the weather."), ("tool_use", "get_weather", {"city": "Paris"})]
    assert whole.stop_reason == "tool_use" and whole.stop_sequence is None
    # the call's input arrives as input_json_delta fragments that concatenate to the input
    parts = [e.delta.partial_json for e in events if e.type == "content_block_delta" and e.delta.type == "input_json_delta"]
    assert json.loads("".join(parts)) == {"city": "Paris"}


def test_two_parallel_calls(served):
    family, url, engine, tok = served
    if not family.parallel:
        pytest.skip(f"{family.name}: the format ends the turn after one call")
    whole, streamed, events = ask(url, "[parallel]")
    check_pair(whole, streamed, events)
    assert blocks(whole) == [
        ("thinking", "Two cities."),
        ("tool_use", "get_weather", {"city": "Paris"}),
        ("tool_use", "get_weather", {"city": "London"}),
    ]
    ids = [b.id for b in whole.content if b.type == "tool_use"]
    assert len(set(ids)) == 2 and whole.stop_reason == "tool_use"


def test_disable_parallel_tool_use_keeps_the_first_call(served):
    family, url, engine, tok = served
    if not family.parallel:
        pytest.skip(f"{family.name}: the format ends the turn after one call")
    choice = {"type": "auto", "disable_parallel_tool_use": True}
    whole, streamed, events = ask(url, "[parallel]", tool_choice=choice)
    check_pair(whole, streamed, events)
    assert [b for b in blocks(whole) if b[0] == "tool_use"] == [("tool_use", "get_weather", {"city": "Paris"})]


def test_text_then_call(served):
    family, url, engine, tok = served
    whole, streamed, events = ask(url, "[text-call]")
    check_pair(whole, streamed, events)
    got = blocks(whole)
    assert got[0] == ("thinking", "Check first.") and got[-1] == ("tool_use", "get_weather", {"city": "Paris"})
    assert [b for b in got if b[0] == "text"] == [("text", "Let me check.")]
    assert whole.stop_reason == "tool_use"


def test_thinking_block_then_text(served):
    family, url, engine, tok = served
    whole, streamed, events = ask(url, "[think]")
    check_pair(whole, streamed, events)
    assert blocks(whole) == [("thinking", "The user wants a capital."), ("text", "Paris.")]
    assert whole.stop_reason == "end_turn"
    deltas = [e.delta.type for e in events if e.type == "content_block_delta"]
    assert "thinking_delta" in deltas and "signature_delta" in deltas and "text_delta" in deltas


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_tool_loop(served, stream):
    """tool_use -> tool_result -> final text, sending back the assistant turn as the SDK has it."""
    family, url, engine, tok = served
    c = client(url)
    args = {"model": MODEL, "max_tokens": 4000, "thinking": THINKING, "tools": [WEATHER]}
    messages: list = [{"role": "user", "content": "[single] What is the weather in Paris?"}]
    if stream:
        with c.messages.stream(messages=messages, **args) as s:
            first = s.get_final_message()
    else:
        first = c.messages.create(messages=messages, **args)
    (call,) = [b for b in first.content if b.type == "tool_use"]
    messages += [
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": call.id, "content": f"{RESULT} [loop]"}],
        },
    ]
    final = c.messages.create(messages=messages, **args)
    assert blocks(final)[-1] == ("text", ANSWER) and final.stop_reason == "end_turn"
    prompt = engine.decode(engine.requests[-1][1]["prompt"])
    turn1 = prompt.split("[single]", 1)[1]
    assert "Paris" in turn1 and RESULT in turn1
    if family.name == "kimi_k2":  # the template renders ids: it sees its own one back
        assert "functions.get_weather:0" in turn1


def test_max_tokens_stop_reason_and_usage(served):
    family, url, engine, tok = served
    c = client(url)
    kw = {"model": MODEL, "messages": [{"role": "user", "content": "[long] count"}], "max_tokens": 3, "thinking": OFF}
    whole = c.messages.create(**kw)
    with c.messages.stream(**kw) as s:
        streamed = s.get_final_message()
    assert comparable(streamed) == comparable(whole)
    assert whole.stop_reason == "max_tokens" and whole.usage.output_tokens == 3
    sent = engine.requests[-1][1]
    prompt_ids = sent.get("prompt") or sent.get("input_ids")
    assert whole.usage.input_tokens == len(prompt_ids)
    counted = c.messages.count_tokens(model=MODEL, messages=kw["messages"], thinking=OFF)
    assert counted.input_tokens == whole.usage.input_tokens


def test_end_turn_usage_counts_every_generated_token(served):
    family, url, engine, tok = served
    whole = client(url).messages.create(
        model=MODEL, max_tokens=4000, thinking=THINKING, messages=[{"role": "user", "content": "[think] capital?"}]
    )
    script = tok.encode(scripts(family)["[think]"])
    stops = set(tok.stop_token_ids)
    played = next((i + 1 for i, t in enumerate(script) if t in stops), len(script))
    assert whole.usage.output_tokens == played and whole.stop_reason == "end_turn"


def test_stop_sequence(served):
    family, url, engine, tok = served
    c = client(url)
    kw = {
        "model": MODEL,
        "max_tokens": 4000,
        "messages": [{"role": "user", "content": "[long] count"}],
        "stop_sequences": ["four"],
        "thinking": OFF,
    }
    whole = c.messages.create(**kw)
    with c.messages.stream(**kw) as s:
        streamed = s.get_final_message()
    assert comparable(streamed) == comparable(whole)
    assert whole.stop_reason == "stop_sequence" and whole.stop_sequence == "four"
    assert blocks(whole)[-1] == ("text", "one two three")  # the field is trimmed, as always


def test_count_tokens_is_the_rendered_prompt(served):
    family, url, engine, tok = served
    from chatsieve import render_prompt
    from chatsieve.protocols.anthropic import parse_messages_request

    body = {"model": MODEL, "system": "Be brief.", "messages": [{"role": "user", "content": "hi"}], "tools": [WEATHER]}
    counted = client(url).messages.count_tokens(**body)
    req = parse_messages_request(body, count_tokens=True, format=family.name).chat
    prompt = render_prompt(req.messages, tokenizer=tok, tools=req.tools, format=family.name, **req.template_kwargs)
    assert counted.input_tokens == len(prompt.token_ids)
    without = client(url).messages.count_tokens(model=MODEL, messages=body["messages"])
    assert without.input_tokens < counted.input_tokens
    # a forced tool renders the same tools (only that one, when named): counted, nothing planned
    forced = client(url).messages.count_tokens(**body, tool_choice={"type": "any"})
    named = client(url).messages.count_tokens(**body, tool_choice={"type": "tool", "name": "get_weather"})
    assert forced.input_tokens == named.input_tokens == counted.input_tokens


# ---------------------------------------------------------------- errors (one family suffices)


@pytest.fixture(scope="module")
def qwen(tmp_path_factory):
    family = FAMILIES["qwen3"]
    tok = _tokenizer(family.loop)
    engine = FakeEngine(tok.decode, {k: Script(tok.encode(v)) for k, v in scripts(family).items()})
    engine.scripts["[fail]"] = Script(tok.encode("x"), fail="status")
    engine.scripts["[slow]"] = Script(tok.encode("<think>\nHm.\n</think>\n\nSlow.<|im_end|>"), batch=4, delay=0.4)
    with contextlib.ExitStack() as stack:
        engine_url = stack.enter_context(ServerThread(engine.app)).url
        cfg = ServerConfig(
            model_dir=tmp_path_factory.mktemp("qwen"),
            format="qwen3",
            backend_url=engine_url,
            served_model_name=MODEL,
            warm_up=False,
            model_aliases=("claude-sonnet-4-5", "claude-haiku-4-5"),
        )
        yield stack.enter_context(ServerThread(create_app(cfg, tokenizer=tok))).url, engine


def _error(url: str, body: dict, **headers) -> tuple[int, dict]:
    r = httpx.post(url + "/v1/messages", json=body, headers=headers, timeout=30)
    return r.status_code, r.json()


def test_sdk_errors(qwen):
    url, _ = qwen
    c = client(url)
    with pytest.raises(anthropic.NotFoundError) as info:
        c.messages.create(model="nope", max_tokens=10, messages=[{"role": "user", "content": "hi"}])
    assert info.value.body["error"]["type"] == "not_found_error" and "nope" in info.value.body["error"]["message"]
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}
    with pytest.raises(anthropic.BadRequestError) as info:
        c.messages.create(model=MODEL, max_tokens=10, messages=[{"role": "user", "content": [image]}])
    assert "messages[0].content[0]" in info.value.message and "'image'" in info.value.message
    with pytest.raises(anthropic.InternalServerError) as info:  # the engine fails: 502, api_error
        c.messages.create(model=MODEL, max_tokens=10, messages=[{"role": "user", "content": "[fail]"}])
    assert info.value.status_code == 502 and info.value.body["error"]["type"] == "api_error"


def test_an_engine_failure_mid_stream_is_an_error_event(qwen):
    url, _ = qwen
    with pytest.raises(anthropic.APIStatusError) as info:
        with client(url).messages.stream(
            model=MODEL, max_tokens=10, messages=[{"role": "user", "content": "[fail]"}]
        ) as s:
            list(s)
    assert "request id" in str(info.value)
    with httpx.stream(
        "POST",
        url + "/v1/messages",
        json={"model": MODEL, "max_tokens": 10, "stream": True, "messages": [{"role": "user", "content": "[fail]"}]},
        timeout=30,
    ) as r:
        text = r.read().decode()
    assert r.status_code == 200 and text.startswith("event: message_start")
    last = text.strip().split("\n\n")[-1]
    assert last.startswith("event: error\ndata: ")
    assert json.loads(last.split("data: ", 1)[1])["error"]["type"] == "api_error"


@pytest.mark.parametrize(
    ("patch", "needle"),
    [
        ({"max_tokens": None}, "max_tokens"),
        ({"model": None}, "model"),
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0].role"),
        ({"messages": [{"role": "user", "content": [{"type": "document", "source": {}}]}]}, "'document'"),
        ({"tools": [{"type": "code_execution_20250825", "name": "code_execution"}]}, "tools[0].type"),
        ({"tools": [WEATHER, {"type": "web_search_20250305", "name": "web_search"}]}, "tools[1].type"),
        ({"tools": [{"name": "f"}]}, "tools[0].input_schema"),
        ({"tool_choice": {"type": "tool", "name": "missing"}, "tools": [WEATHER]}, "tool_choice"),
        ({"tool_choice": {"type": "sometimes"}}, "tool_choice"),
        ({"thinking": {"type": "enabled", "budget_tokens": 50}, "max_tokens": 10}, "budget_tokens"),
        ({"thinking": {"type": "maybe"}}, "thinking"),
        ({"temperature": 1.5}, "temperature"),
        ({"stop_sequences": [1]}, "stop_sequences"),
        ({"stop_sequences": ["x"] * 17}, "stop_sequences"),
        ({"system": [{"type": "image"}]}, "system[0]"),
    ],
)
def test_bad_requests_are_invalid_request_errors(qwen, patch, needle):
    url, _ = qwen
    body = {"model": MODEL, "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
    body.update(patch)
    body = {k: v for k, v in body.items() if v is not None}
    status, err = _error(url, body)
    assert status == 400 and err["type"] == "error" and err["error"]["type"] == "invalid_request_error"
    assert needle in err["error"]["message"]


def test_not_json_and_unknown_routes_answer_in_anthropics_shape(qwen):
    url, _ = qwen
    r = httpx.post(url + "/v1/messages", content=b"{nope", headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
    r = httpx.get(url + "/v1/messages")
    assert r.status_code == 405 and r.json()["type"] == "error"
    r = httpx.post(url + "/v1/messages/batches", json={})
    assert r.status_code == 404 and r.json()["error"]["type"] == "not_found_error"
    # chat completions keeps OpenAI's shape
    r = httpx.get(url + "/v1/chat/completions")
    assert r.status_code == 405 and set(r.json()["error"]) == {"message", "type", "param", "code"}


def test_aliases_versions_betas_and_the_beta_query(qwen):
    url, _ = qwen
    body = {"model": "claude-haiku-4-5", "max_tokens": 100, "messages": [{"role": "user", "content": "[think] hi"}]}
    r = httpx.post(
        url + "/v1/messages?beta=true",
        json=body,
        headers={"anthropic-version": "2023-06-01", "anthropic-beta": "interleaved-thinking-2025-05-14"},
        timeout=30,
    )
    assert r.status_code == 200 and r.json()["model"] == "claude-haiku-4-5"
    assert r.json()["content"][-1] == {"type": "text", "text": "Paris."}


def test_fields_claude_code_sends_are_accepted(qwen):
    """What Claude Code 2.1.328 sends: a system block list with cache_control, a system-role
    message, tools with extra keys (defer_loading: rendered all the same), adaptive thinking,
    metadata, output_config; and Anthropic's tool search (left out, and said so)."""
    url, engine = qwen
    body = {
        "model": MODEL,
        "max_tokens": 100,
        "system": [
            {"type": "text", "text": "You are a CLI."},
            {"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}},
        ],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "[think] hi", "cache_control": {"type": "ephemeral"}}]},
            {"role": "system", "content": [{"type": "text", "text": "# Environment: linux"}]},
        ],
        "tools": [
            {**WEATHER, "cache_control": {"type": "ephemeral"}, "strict": True},
            {"name": "Deferred", "input_schema": {"type": "object", "properties": {}}, "defer_loading": True},
            {"type": "tool_search_tool_regex_20251119", "name": "tool_search_tool_regex"},
        ],
        "thinking": {"type": "adaptive", "display": "updates"},
        "metadata": {"user_id": "u-1"},
        "service_tier": "auto",
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        "output_config": {"effort": "high"},
        "stream": False,
    }
    r = httpx.post(url + "/v1/messages?beta=true", json=body, timeout=30)
    assert r.status_code == 200, r.text
    assert r.headers["x-chatsieve-tools-left-out"] == "tool_search_tool_regex"
    prompt = engine.decode(engine.requests[-1][1]["prompt"])
    assert "You are a CLI.\n\nBe brief." in prompt and "# Environment: linux" in prompt
    assert "get_weather" in prompt and "Deferred" in prompt and "tool_search" not in prompt


def test_the_readme_sdk_snippet_runs_as_written(tmp_path_factory, capsys):
    """docs/agents.md, "Claude Code with any open model": the anthropic SDK snippet, its URL pointed at a
    server (with the recipe's key) before a stand-in engine."""
    snippet = next(b for b in readme_blocks("Claude Code with any open model") if b.startswith("import anthropic"))
    family = FAMILIES["qwen3"]
    tok = _tokenizer(family.loop)
    out = family.think("Paris needs a lookup.") + family.calls([PARIS])
    engine = FakeEngine(tok.decode, {"Weather in Paris?": Script(tok.encode(out), batch=2)})
    with contextlib.ExitStack() as stack:
        engine_url = stack.enter_context(ServerThread(engine.app)).url
        cfg = ServerConfig(
            model_dir=tmp_path_factory.mktemp("snippet"),
            format="qwen3",
            backend_url=engine_url,
            served_model_name="qwen3",
            warm_up=False,
            security=SecurityPolicy(api_keys=("local-key",)),
        )
        url = stack.enter_context(ServerThread(create_app(cfg, tokenizer=tok))).url
        assert 'base_url="http://127.0.0.1:8000"' in snippet
        exec(compile(snippet.replace("http://127.0.0.1:8000", url), "docs/agents.md", "exec"), {})
    printed = capsys.readouterr().out
    assert printed == "Paris needs a lookup.\ntool_use ['thinking', 'tool_use']\n"


def test_budget_tokens_closes_the_reasoning_where_it_runs_out(served):
    """thinking.budget_tokens is enforced here: at the budget the server cancels the engine
    request, writes the family's closing marker and goes on from there in a second request."""
    family, url, engine, tok = served
    c = client(url)
    kw = {
        "model": MODEL,
        "max_tokens": 200,
        "thinking": {"type": "enabled", "budget_tokens": 6},
        "messages": [{"role": "user", "content": "[budget] think briefly"}],
    }
    before = len(engine.requests)
    whole = c.messages.create(**kw)
    assert len(engine.requests) - before == 2
    with c.messages.stream(**kw) as s:
        streamed = s.get_final_message()
    assert comparable(streamed) == comparable(whole)
    (kind, thought), answer = blocks(whole)
    assert kind == "thinking" and thought and BUDGET_REASONING.startswith(thought)
    assert len(thought) < len(BUDGET_REASONING) and answer == ("text", "The answer is 7.")
    assert whole.stop_reason == "end_turn"
    # the second request went on from the prompt, the budget's tokens and the closing marker
    first, second = (engine.requests[i][1] for i in (before, before + 1))
    ids = lambda r: r.get("prompt") or r.get("input_ids")  # noqa: E731
    assert ids(second)[: len(ids(first))] == ids(first)
    answer_ids = tok.encode(family.text("The answer is 7."))
    stops = set(tok.stop_token_ids)
    played = next((i + 1 for i, t in enumerate(answer_ids) if t in stops), len(answer_ids))
    assert whole.usage.output_tokens == 6 + played


def test_pings_while_the_engine_is_silent(qwen, monkeypatch):
    from chatsieve.protocols.anthropic import ANTHROPIC

    url, _ = qwen
    monkeypatch.setattr(ANTHROPIC, "ping_interval", 0.1)
    body = {"model": MODEL, "max_tokens": 50, "stream": True, "messages": [{"role": "user", "content": "[slow] hi"}]}
    with httpx.stream("POST", url + "/v1/messages", json=body, timeout=30) as r:
        kinds = [line[len("event: "):] for line in r.iter_lines() if line.startswith("event: ")]
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop" and "ping" in kinds
    with client(url).messages.stream(**{k: v for k, v in body.items() if k != "stream"}) as s:
        assert blocks(s.get_final_message()) == [("thinking", "Hm."), ("text", "Slow.")]


def test_models_list_in_the_shape_each_sdk_reads(qwen):
    url, _ = qwen
    names = [m.id for m in client(url).models.list()]
    assert names == [MODEL, "claude-sonnet-4-5", "claude-haiku-4-5"]
    got = client(url).models.retrieve("claude-haiku-4-5")
    assert got.id == "claude-haiku-4-5" and got.type == "model"
    with pytest.raises(anthropic.NotFoundError):
        client(url).models.retrieve("nope")
    # the same routes without anthropic-version: OpenAI's list
    oc = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0)
    assert [m.id for m in oc.models.list()] == names and oc.models.retrieve(MODEL).id == MODEL
