"""What the coding agents send, through the real SDKs (anthropic, openai) against `chatsieve serve`
and a stand-in engine, for the six families whose templates differ (qwen3, qwen3_coder, gemma4,
glm47, kimi_k2, gpt_oss) -- issue 32's items, protocol by protocol:

- a gpt-oss turn with analysis, a commentary preamble and a call, sent back on all three routes;
- images in tool results (placeholders, named in the left-out header) and in user messages (400);
- max_tokens above the room left: lowered on /v1/messages and /v1/responses, kept (400) on chat
  completions unless --fit-max-tokens;
- Anthropic `thread` requests: a 400 the SDK reads as "cannot thread" (its tool runner goes on);
- parallel results in any order reach the model in call order; an unknown id is a 400;
- unusable calls leave a visible note on the agent routes; namespaced names resolve;
- reasoning summaries filled when Codex asks for them;
- the effort and thinking switches, per family, as docs/agents.md's table says;
- the billing header dropped; prompts of recorded Claude Code and Codex sessions that extend
  each other step by step;
- keepalive events while the engine is silent, until the backend timeout ends the request.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import anthropic
import httpx
import openai
import pytest
from agent_families import (
    CONTEXT,
    SIX,
    encode,
    model_output,
    prefix_breaks,
    prompts,
    reasoning_head,
    served,
    thinks,
    tokenizer,
    unfinished_call,
)
from fake_engines import Script

from chatsieve import formats, render_prompt
from chatsieve.protocols.common import RequestLimits
from chatsieve.protocols.openai_responses import OpenAIResponses

MODEL = "agent-model"
SESSIONS = Path(__file__).resolve().parent / "data" / "agent_sessions"
WEATHER = {"name": "get_weather", "description": "Weather for a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}  # fmt: skip
FN = {"type": "function", "name": "get_weather", "description": "Weather for a city", "parameters": WEATHER["input_schema"]}
CHAT_FN = {"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
                                            "parameters": WEATHER["input_schema"]}}  # fmt: skip
PARIS = ("get_weather", {"city": "Paris"})
PIXEL = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGNgYPiPBgAFAgH/2PzWKwAAAABJRU5ErkJggg=="
PLACEHOLDER = "[image (image/png) left out: the served model reads text only"
NOTE = "[chatsieve: a tool call the model wrote was not run:"
LEFT_OUT = "x-chatsieve-tools-left-out"
LOWERED = "x-chatsieve-max-tokens-lowered"
OFF = {"effort": "none"}  # Responses: thinking off, as the "-off" scripts are written


def _scripts(family: str) -> dict[str, Script]:
    off, on = thinks(family, False), thinks(family, True)
    plays = {
        "[t:answer-off]": model_output(family, thinking=off, reasoning="Hm.", text="Plain answer."),
        "[t:answer-on]": model_output(family, thinking=on, reasoning="Thinking it over.", text="Thought answer."),
        "[t:call-off]": model_output(family, thinking=off, reasoning="Look it up.", text="Let me check.", calls=(PARIS,)),
        "[t:malformed]": reasoning_head(family, "Call it.", thinking=off)
        + unfinished_call(family, *PARIS, cut="Paris"),
        "[t:unknown]": model_output(family, thinking=off, reasoning="Call it.", calls=(("no_such_tool", {"x": 1}),)),
        "[t:namespaced]": model_output(family, thinking=off, reasoning="Fetch.",
                                       calls=(("mcp__srv__fetch_page", {"url": "http://x"}),)),
        "RESULT-B-2": model_output(family, thinking=off, reasoning="Both in.", text="Both results are in."),
    }  # fmt: skip
    scripts = {k: Script(encode(family, v), batch=4) for k, v in plays.items()}
    quiet = encode(family, model_output(family, thinking=off, reasoning="Slow.", text="After a pause."))
    scripts["[t:silent]"] = Script(quiet, batch=4, first_delay=1.0)
    return scripts


@pytest.fixture(scope="module", params=SIX)
def server(request, tmp_path_factory):
    family = request.param
    with served(tmp_path_factory.mktemp(family), family, _scripts(family), model=MODEL) as (url, engine, recorder):
        yield family, url, engine, recorder


def claude(url: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key="none", max_retries=0, timeout=60)


def codex(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=60)


def last_prompt(family: str, engine) -> str:
    return tokenizer(family).decode(engine.requests[-1][1]["prompt"])


def _raw(url: str, path: str, body: dict) -> httpx.Response:
    return httpx.post(url + path, json=body, timeout=60)


# ---------------------------------------------------------------- 1. gpt-oss preamble turns, every route


def _turn_back(route: str) -> tuple[str, dict]:
    """A conversation whose assistant turn has reasoning, text and a call, then the call's result,
    in the route's own shape (as each client sends the turn back)."""
    ask, result = "[t:answer-off] Weather in Paris?", "18C, sunny"
    if route == "messages":
        return "/v1/messages", {"model": MODEL, "max_tokens": 50, "tools": [WEATHER], "messages": [
            {"role": "user", "content": ask},
            {"role": "assistant", "content": [{"type": "thinking", "thinking": "Look it up.", "signature": "x"},
                                              {"type": "text", "text": "Let me check."},
                                              {"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                                               "input": {"city": "Paris"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": result}]}]}
    if route == "responses":
        return "/v1/responses", {"model": MODEL, "tools": [FN], "reasoning": OFF, "input": [
            {"role": "user", "content": ask},
            {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "Look it up."}]},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Let me check."}]},
            {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": '{"city": "Paris"}'},
            {"type": "function_call_output", "call_id": "c1", "output": result}]}
    return "/v1/chat/completions", {"model": MODEL, "tools": [CHAT_FN], "messages": [
        {"role": "user", "content": ask},
        {"role": "assistant", "reasoning_content": "Look it up.", "content": "Let me check.",
         "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": result}]}  # fmt: skip


@pytest.mark.parametrize("route", ["chat", "messages", "responses"])
def test_a_turn_with_reasoning_text_and_a_call_goes_back(server, route):
    family, url, engine, _ = server
    path, body = _turn_back(route)
    r = _raw(url, path, body)
    assert r.status_code == 200, r.text
    prompt = last_prompt(family, engine)
    assert "Let me check." in prompt and "18C, sunny" in prompt  # (Gemma 4's template writes the text after the results)
    if family == "gpt_oss":  # as the model wrote it: analysis, commentary preamble, call
        assert ("<|start|>assistant<|channel|>analysis<|message|>Look it up.<|end|>"
                "<|start|>assistant<|channel|>commentary<|message|>Let me check.<|end|>"
                "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>") in prompt  # fmt: skip


def test_caller_text_spelling_reasoning_markers_does_not_move_the_answer(server):
    """An edited file that ends in `</think> <think>` (every delimiter of the family, spelled) comes
    back in a tool result: the answer after it is still the answer, not hidden as reasoning."""
    family, url, engine, _ = server
    spelled = " ".join(formats.get(family).delimiters)
    r = _raw(url, "/v1/messages", {"model": MODEL, "max_tokens": 50, "tools": [WEATHER], "messages": [
        {"role": "user", "content": "[t:answer-off] Read it."},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "x"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": spelled}]}]})  # fmt: skip
    assert r.status_code == 200, r.text
    assert [b["type"] for b in r.json()["content"]] == (["thinking", "text"] if thinks(family, False) else ["text"])
    assert r.json()["content"][-1]["text"] == "Plain answer."


# ---------------------------------------------------------------- 2. images


def test_images_in_tool_results_become_placeholders(server):
    family, url, engine, _ = server
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PIXEL}}
    r = _raw(url, "/v1/messages", {"model": MODEL, "max_tokens": 50, "tools": [WEATHER], "messages": [
        {"role": "user", "content": "[t:answer-off] Show me."},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [
            {"type": "text", "text": "A radar picture:"}, {**image, "title": "rain over Paris"}]}]}]})  # fmt: skip
    assert r.status_code == 200, r.text
    assert r.headers[LEFT_OUT] == "image:messages[2].content[0].content[1]"
    assert f"A radar picture:\n{PLACEHOLDER}; caption: rain over Paris]" in last_prompt(family, engine).replace("\\n", "\n")
    r = _raw(url, "/v1/responses", {"model": MODEL, "tools": [FN], "reasoning": OFF, "input": [
        {"role": "user", "content": "[t:answer-off] Show me."},
        {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": [
            {"type": "input_image", "image_url": f"data:image/png;base64,{PIXEL}"}]}]})  # fmt: skip
    assert r.status_code == 200, r.text
    assert r.headers[LEFT_OUT] == "input_image:input[2].output[0]"
    assert PLACEHOLDER in last_prompt(family, engine)


@pytest.mark.parametrize("route", ["chat", "messages", "responses"])
def test_an_image_in_a_user_message_is_a_400_naming_it(server, route):
    _, url, _, _ = server
    path, body = {
        "messages": ("/v1/messages", {"model": MODEL, "max_tokens": 50, "messages": [{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PIXEL}}]}]}),
        "responses": ("/v1/responses", {"model": MODEL, "input": [{"role": "user", "content": [
            {"type": "input_image", "image_url": f"data:image/png;base64,{PIXEL}"}]}]}),
        "chat": ("/v1/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PIXEL}"}}]}]}),
    }[route]  # fmt: skip
    r = _raw(url, path, body)
    assert r.status_code == 400
    assert "content[0]" in r.text and ("image" in r.text)


# ---------------------------------------------------------------- 3. max_tokens fitted to the context


def test_max_tokens_above_the_room_left_is_lowered_on_the_agent_routes(server):
    family, url, engine, _ = server
    raw = claude(url).messages.with_raw_response.create(
        model=MODEL, max_tokens=128_000, messages=[{"role": "user", "content": "[t:answer-off] hi"}]
    )
    assert raw.parse().content[-1].text == "Plain answer."
    prompt_len = len(engine.requests[-1][1]["prompt"])
    assert raw.headers[LOWERED] == f"128000 -> {CONTEXT - prompt_len}"
    assert engine.requests[-1][1]["max_tokens"] == CONTEXT - prompt_len
    raw = codex(url).responses.with_raw_response.create(model=MODEL, input="[t:answer-off] hi", max_output_tokens=10**6,
                                                       reasoning=OFF)
    assert raw.parse().output_text == "Plain answer." and raw.headers[LOWERED].startswith("1000000 -> ")
    # the prompt alone does not fit: still a 400, in the protocol's shape
    huge = "word " * CONTEXT
    with pytest.raises(anthropic.BadRequestError, match="context is 40960 tokens"):
        claude(url).messages.create(model=MODEL, max_tokens=10, messages=[{"role": "user", "content": huge}])


def test_chat_completions_keeps_the_400_unless_asked_to_fit(tmp_path):
    family = "qwen3"
    body = {"model": MODEL, "max_tokens": 10**6, "messages": [{"role": "user", "content": "[t:answer-off] hi"}]}
    with served(tmp_path, family, _scripts(family), model=MODEL) as (url, _, _):
        r = _raw(url, "/v1/chat/completions", body)
        assert r.status_code == 400 and r.json()["error"]["param"] == "max_tokens"
    with served(tmp_path, family, _scripts(family), model=MODEL, limits=RequestLimits(fit_max_tokens=True)) as (
        url, engine, _):  # fmt: skip
        r = _raw(url, "/v1/chat/completions", body)
        assert r.status_code == 200 and r.headers[LOWERED] == f"1000000 -> {engine.requests[-1][1]['max_tokens']}"


# ---------------------------------------------------------------- 4. Anthropic threads


def test_thread_requests_are_refused_and_the_tool_runner_goes_on(server):
    family, url, engine, recorder = server
    c = claude(url)
    with pytest.raises(anthropic.BadRequestError) as e:
        c.beta.messages.create(model=MODEL, max_tokens=50, thread={"type": "continue", "previous_message_id": "msg_1"},
                               messages=[{"role": "user", "content": "[t:answer-off] go on"}])  # fmt: skip
    assert "'thread'" in e.value.message and e.value.body["error"]["details"]["error_code"] == "thread_unsupported_request"

    @anthropic.beta_tool
    def get_weather(city: str) -> str:
        """Weather for a city."""
        return "RESULT-B-2"

    before = len(recorder.requests)
    final = c.beta.messages.tool_runner(
        model=MODEL, max_tokens=200, tools=[get_weather], messages=[{"role": "user", "content": "[t:call-off] Paris?"}]
    ).until_done()
    assert final.content[-1].text == "Both results are in."
    sent = [b.get("thread") for _, b in recorder.requests[before:]]
    assert sent == [{"type": "create"}, None, None]  # refused once, then the whole conversation each turn


# ---------------------------------------------------------------- 5. results in call order


@pytest.mark.parametrize("route", ["chat", "messages", "responses"])
def test_results_reach_the_model_in_call_order(server, route):
    family, url, engine, _ = server
    calls = [("c1", "Paris"), ("c2", "Rome")]
    results = [("c2", "RESULT-B-2"), ("c1", "RESULT-A-1")]  # as the tools finished
    ask = "[t:answer-off] Both?"
    if route == "messages":
        path, body = "/v1/messages", {"model": MODEL, "max_tokens": 50, "tools": [WEATHER], "messages": [
            {"role": "user", "content": ask},
            {"role": "assistant", "content": [{"type": "tool_use", "id": f"toolu_{i}", "name": "get_weather",
                                               "input": {"city": c}} for i, c in calls]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": t}
                                         for i, t in results]}]}  # fmt: skip
    elif route == "responses":
        path, body = "/v1/responses", {"model": MODEL, "tools": [FN], "reasoning": OFF, "input": [
            {"role": "user", "content": ask},
            *({"type": "function_call", "call_id": i, "name": "get_weather", "arguments": json.dumps({"city": c})}
              for i, c in calls),
            *({"type": "function_call_output", "call_id": i, "output": t} for i, t in results)]}  # fmt: skip
    else:
        path, body = "/v1/chat/completions", {"model": MODEL, "tools": [CHAT_FN], "messages": [
            {"role": "user", "content": ask},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": i, "type": "function", "function": {"name": "get_weather", "arguments": json.dumps({"city": c})}}
                for i, c in calls]},
            *({"role": "tool", "tool_call_id": i, "content": t} for i, t in results)]}  # fmt: skip
    r = _raw(url, path, body)
    assert r.status_code == 200, r.text
    prompt = last_prompt(family, engine)
    assert prompt.index("RESULT-A-1") < prompt.index("RESULT-B-2")
    # a result for a call the turn did not make is a 400
    bad = json.loads(json.dumps(body))
    if route == "messages":
        bad["messages"][2]["content"][0]["tool_use_id"] = "toolu_c9"
    elif route == "responses":
        bad["input"][3]["call_id"] = "c9"
    else:
        bad["messages"][2]["tool_call_id"] = "c9"
    r = _raw(url, path, bad)
    assert r.status_code == 400 and "'c9'" in r.text and "did not make" in r.text


# ---------------------------------------------------------------- 7. unusable calls


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_unusable_calls_leave_a_note_on_the_agent_routes(server, stream):
    family, url, engine, _ = server
    for key, why in (("[t:malformed]", "could not be read"), ("[t:unknown]", "`no_such_tool` is not a tool offered")):
        kw = {"model": MODEL, "max_tokens": 50, "tools": [WEATHER], "messages": [{"role": "user", "content": f"{key} go"}]}
        if stream:
            with claude(url).messages.stream(**kw) as s:
                message = s.get_final_message()
        else:
            message = claude(url).messages.create(**kw)
        assert [b.type for b in message.content if b.type != "thinking"] == ["text"]
        assert message.content[-1].text.startswith(NOTE) and why in message.content[-1].text
        # not strict: a strict tool (Responses' default) would have the engine refuse such a call
        # (tests/test_strict_tools.py), so this one is the parser's and the filter's to catch
        r = codex(url).responses.create(model=MODEL, input=f"{key} go", tools=[{**FN, "strict": False}], reasoning=OFF)
        assert r.output_text.startswith(NOTE) and why in r.output_text
    # chat completions keeps OpenAI's contract: a call that cannot be used is dropped (logged)
    r = _raw(url, "/v1/chat/completions", {"model": MODEL, "tools": [CHAT_FN],
                                           "messages": [{"role": "user", "content": "[t:unknown] go"}]})  # fmt: skip
    assert r.status_code == 200 and not (r.json()["choices"][0]["message"]["content"] or "")


def test_a_namespaced_name_resolves_to_the_namespace_tool(server):
    family, url, engine, _ = server
    ns = {"type": "namespace", "name": "mcp__srv", "description": "MCP tools",
          "tools": [{"type": "function", "name": "fetch_page", "description": "A page.", "parameters": {"type": "object", "properties": {
              "url": {"type": "string"}}}}]}  # fmt: skip
    r = codex(url).responses.create(model=MODEL, input="[t:namespaced] fetch", tools=[ns], reasoning=OFF)
    (call,) = [o for o in r.output if o.type == "function_call"]
    assert (call.name, call.namespace, json.loads(call.arguments)) == ("fetch_page", "mcp__srv", {"url": "http://x"})


# ---------------------------------------------------------------- 8. reasoning summaries


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_reasoning_summaries_are_filled_when_asked(server, stream):
    family, url, engine, _ = server
    c = codex(url)
    kw = {"model": MODEL, "input": "[t:answer-on] think", "reasoning": {"effort": "high", "summary": "auto"}}
    if stream:
        with c.responses.stream(**kw) as s:
            deltas = "".join(e.delta for e in s if e.type == "response.reasoning_summary_text.delta")
            r = s.get_final_response()
    else:
        r, deltas = c.responses.create(**kw), None
    reasoning = [o for o in r.output if o.type == "reasoning"]
    if not thinks(family, True):  # Qwen3-Coder and Kimi K2 Instruct do not reason
        assert reasoning == [] and r.output_text == "Thought answer."
        return
    (item,) = reasoning
    assert [p.text for p in item.summary] == [p.text for p in item.content] == ["Thinking it over."]
    if stream:
        assert deltas == "Thinking it over."
    unasked = c.responses.create(model=MODEL, input="[t:answer-on] think", reasoning={"effort": "high"})
    assert [o.summary for o in unasked.output if o.type == "reasoning"] == [[]]


# ---------------------------------------------------------------- 9. effort and thinking switches

# docs/agents.md, "What each agent control does": the template variables each control sets, per
# kind of family (a thinking switch; none; gpt-oss's effort)
SWITCHED = ("qwen3", "gemma4", "glm47")
ANTHROPIC_CONTROLS = {
    "absent": {},
    "disabled": {"thinking": {"type": "disabled"}},
    "adaptive": {"thinking": {"type": "adaptive"}},
    "enabled": {"thinking": {"type": "enabled", "budget_tokens": 40}},
    "adaptive, effort low": {"thinking": {"type": "adaptive"}, "output_config": {"effort": "low"}},
    "adaptive, effort max": {"thinking": {"type": "adaptive"}, "output_config": {"effort": "max"}},
    "disabled, effort high": {"thinking": {"type": "disabled"}, "output_config": {"effort": "high"}},
}
RESPONSES_CONTROLS = {"absent": None, **{e: e for e in ("none", "minimal", "low", "medium", "high", "xhigh")}}


def _expected(family: str, route: str, control: str) -> dict:
    """The template variables the table promises."""
    if route == "messages":
        on = control.split(",")[0] in ("adaptive", "enabled")
        effort = control.partition("effort ")[2] or None
        if family == "gpt_oss":
            return {"reasoning_effort": "low" if not on else {None: None, "low": "low", "max": "high"}[effort]}
        return {"enable_thinking": on, "thinking": on} if family in SWITCHED else {}
    effort = RESPONSES_CONTROLS[control]
    if family == "gpt_oss":
        return {"reasoning_effort": {None: None, "none": "low", "minimal": "low", "xhigh": "high"}.get(effort, effort)}
    if effort is None:
        return {}
    on = effort not in ("none", "minimal")
    switch = {"enable_thinking": on, "thinking": on} if family in SWITCHED else {}
    return {**switch, "reasoning_effort": "none" if effort == "minimal" else effort}


@pytest.mark.parametrize(("route", "control"), [("messages", c) for c in ANTHROPIC_CONTROLS]
                         + [("responses", c) for c in RESPONSES_CONTROLS])  # fmt: skip
def test_effort_and_thinking_switches_follow_the_table(server, route, control):
    family, url, engine, _ = server
    ask = "[t:answer-off] hi"
    if route == "messages":
        claude(url).messages.create(model=MODEL, max_tokens=100, messages=[{"role": "user", "content": ask}],
                                    **ANTHROPIC_CONTROLS[control])  # fmt: skip
    else:
        effort = RESPONSES_CONTROLS[control]
        codex(url).responses.create(model=MODEL, input=ask, **({"reasoning": {"effort": effort}} if effort else {}))
    variables = {k: v for k, v in _expected(family, route, control).items() if v is not None}
    expected = render_prompt([{"role": "user", "content": ask}], tokenizer=tokenizer(family), format=family,
                             request_variables=variables)  # fmt: skip
    assert engine.requests[-1][1]["prompt"] == expected.token_ids
    text = last_prompt(family, engine)
    if family == "gpt_oss":
        assert f"Reasoning: {variables.get('reasoning_effort', 'medium')}" in text


def test_the_switches_follow_the_detected_format(tmp_path):
    """`serve --format auto`: the table applies to the family the template was detected as."""
    family = "gpt_oss"
    with served(tmp_path, family, _scripts(family), model=MODEL, format="auto") as (url, engine, _):
        claude(url).messages.create(model=MODEL, max_tokens=50, messages=[{"role": "user", "content": "[t:answer-off] hi"}])
        assert "Reasoning: low" in last_prompt(family, engine)


# ---------------------------------------------------------------- 10. prompt-cache friendliness


def test_the_billing_header_is_not_in_the_prompt(server):
    family, url, engine, _ = server
    texts = []
    for session in ("cc_version=2.1.328.f1b; cc_entrypoint=sdk-cli; cch=1111;", "cc_version=2.1.328.a0c; cch=2222;"):
        system = [{"type": "text", "text": f"x-anthropic-billing-header: {session}"}, {"type": "text", "text": "Be brief."}]
        claude(url).messages.create(model=MODEL, max_tokens=50, system=system,
                                    messages=[{"role": "user", "content": "[t:answer-off] hi"}])  # fmt: skip
        texts.append(last_prompt(family, engine))
    assert texts[0] == texts[1] and "billing" not in texts[0] and "Be brief." in texts[0]


@pytest.mark.parametrize("agent", ["claude_code", "codex"])
def test_a_recorded_session_keeps_its_prompt_prefix(server, agent):
    """Each request of a recorded agent session (tests/data/agent_sessions), sent again as recorded:
    the prompt of step k+1 starts with step k's (a prefix cache reuses all of it), whatever the
    family's template -- gpt-oss keeps a late system message where it arrived, Gemma 4 its turns."""
    family, url, engine, _ = server
    recorded = json.loads((SESSIONS / f"{agent}_session.json").read_text(encoding="utf-8"))
    before = len(engine.requests)
    for body in recorded_bodies(recorded):
        body = {**body, "model": MODEL, "stream": False}
        # the stand-in answers every step the same way; what is measured is the prompt
        marked = json.dumps(body).replace("[cc32:qwen3]", "[t:answer-off]").replace("[cx32:qwen3]", "[t:answer-off]")
        r = _raw(url, recorded["route"], json.loads(marked))
        assert r.status_code == 200, r.text
    steps = prompts(engine, before)
    assert len(steps) == len(recorded["requests"]) >= 5
    assert prefix_breaks(steps) == []


def test_a_late_system_message_stays_where_it_arrived(server):
    """Claude Code sends its environment (working directory, date, ...) as a system message after
    the first user message: two sessions in different directories share the prompt through the
    system prompt, the tool definitions and the user's message (gpt-oss's template would move it
    in front of the tool definitions)."""
    family, url, engine, _ = server
    first = recorded_bodies(json.loads((SESSIONS / "claude_code_session.json").read_text(encoding="utf-8")))[0]
    texts = []
    for where in ("alpha-project", "beta-project"):
        body = json.loads(json.dumps(first).replace("[cc32:qwen3]", "[t:answer-off]"))
        (late,) = [m for m in body["messages"] if m["role"] == "system"]
        late["content"][0]["text"] = late["content"][0]["text"].replace("Primary working directory:", f"Primary working directory: {where}")
        r = _raw(url, "/v1/messages", {**body, "model": MODEL, "stream": False})
        assert r.status_code == 200, r.text
        texts.append(last_prompt(family, engine))
    shared = len(os.path.commonprefix(texts))
    assert texts[0].index("Tidy up my notes.") < shared <= texts[0].index("alpha-project")


def recorded_bodies(recorded: dict) -> list[dict]:
    """The request bodies of a recorded session (`shared` fields put back, appended lists joined)."""
    bodies, last = [], {}
    for body in recorded["requests"]:
        body = {**body, **recorded["shared"]}
        for key in [k for k in body if k.endswith("_appended")]:
            field = key[: -len("_appended")]
            body[field] = [*last[field], *body.pop(key)]
        bodies.append(body)
        last = body
    return bodies


# ---------------------------------------------------------------- 11. keepalive


@pytest.fixture
def fast_pings(monkeypatch):
    monkeypatch.setattr(OpenAIResponses, "ping_interval", 0.2)


def test_a_silent_engine_gets_keepalive_events(server, fast_pings):
    family, url, engine, _ = server
    with httpx.stream("POST", url + "/v1/responses", json={"model": MODEL, "input": "[t:silent] hi", "stream": True, "reasoning": OFF},
                      timeout=60) as r:  # fmt: skip
        events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: ")]
    kinds = [e["type"] for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[2] == "keepalive"
    assert 2 <= kinds.count("keepalive") and kinds[-1] == "response.completed"
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    with codex(url).responses.stream(model=MODEL, input="[t:silent] hi", reasoning=OFF) as s:  # the SDK skips them
        assert s.get_final_response().output_text == "After a pause."


def test_keepalive_stops_when_the_backend_timeout_gives_up(tmp_path, fast_pings):
    family = "qwen3"
    scripts = {"[t:mute]": Script(encode(family, "Too late.<|im_end|>"), first_delay=5.0)}
    with served(tmp_path, family, scripts, model=MODEL, timeout=1.0) as (url, _, _):
        with httpx.stream("POST", url + "/v1/responses", json={"model": MODEL, "input": "[t:mute] hi", "stream": True, "reasoning": OFF},
                          timeout=60) as r:  # fmt: skip
            kinds = [json.loads(line[6:])["type"] for line in r.iter_lines() if line.startswith("data: ")]
    assert "keepalive" in kinds and kinds[-2:] == ["error", "response.failed"]
    assert kinds.count("keepalive") < 10  # bounded by --backend-timeout (1 s here), at 0.2 s apart

