"""A reasoning budget on every API (issue 34): chat completions' `thinking_token_budget` (vLLM's
name; `max_reasoning_tokens` too) and `reasoning_effort`, Responses' `reasoning.effort`, Messages'
`thinking.budget_tokens` and `output_config.effort`. An effort without a budget takes the
server's table (`serve --reasoning-effort-budgets`, small here so a short script passes it). Where
the budget runs out the server cancels the engine request, writes the family's closing marker and
goes on in a second request (`Generation`, server/generation.py).

Measured on qwen3, glm47 and gpt_oss, on all three routes and engines, streamed and whole, through
the real SDKs: the reasoning returned (counted with the family's tokenizer) stays within the budget
and ends no further from it than the closing markup; effort high never gives less reasoning than low.
"""

from __future__ import annotations

import pytest
from agent_families import encode, served, tokenizer
from fake_engines import Script
from three_routes import ROUTES, ask

from chatsieve.protocols.common import EFFORT_BUDGETS, RequestError, check_effort_budgets, effort_budget
from chatsieve.protocols.openai_chat import parse_chat_request
from chatsieve.server import build_parser, config_from_args

MODEL = "budget-model"
FAMILIES = ("qwen3", "glm47", "gpt_oss")
BUDGETS = {"minimal": 8, "low": 24, "medium": 48, "high": 96, "xhigh": 160}
REASONING = "Let me think. " + " ".join(f"step{i} checks the sum again" for i in range(60))  # ~400 tokens
ANSWER = "The answer is 7."
SLACK = 8  # the markup counted in the budget but not returned as reasoning (<think>, the analysis header)


def _output(family: str) -> tuple[str, str]:
    """(the whole reasoning-then-answer output, what the model writes after the server's close)."""
    if family == "qwen3":
        return f"<think>\n{REASONING}\n</think>\n\n{ANSWER}<|im_end|>", f"\n\n{ANSWER}<|im_end|>"
    if family == "glm47":
        return f"{REASONING}</think>{ANSWER}<|user|>", f"{ANSWER}<|user|>"
    final = f"<|channel|>final<|message|>{ANSWER}<|return|>"
    return f"<|channel|>analysis<|message|>{REASONING}<|end|><|start|>assistant{final}", final


@pytest.fixture(scope="module", params=[(f, e) for f in FAMILIES for e in ("vllm", "sglang", "llamacpp")],
                ids=lambda p: f"{p[0]}-{p[1]}")
def server(request, tmp_path_factory):
    family, kind = request.param
    whole, after = _output(family)
    scripts = {"[budget]": Script(encode(family, whole), batch=3),
               # the second request's prompt ends in the reasoning cut short and the closing marker
               "Let me think.": Script(encode(family, after), batch=3)}  # fmt: skip
    with served(tmp_path_factory.mktemp(family), family, scripts, model=MODEL, backend_kind=kind,
                effort_budgets=tuple(BUDGETS.items())) as (url, engine, _):  # fmt: skip
        yield family, url, engine


def _control(route: str, control: str) -> tuple[dict, int]:
    """The SDK options asking for `control` on `route`, and the budget they mean."""
    if control == "budget":
        return {"chat": {"extra_body": {"thinking_token_budget": 40}},
                "responses": {"reasoning": {"effort": "medium"}},
                "messages": {"thinking": {"type": "enabled", "budget_tokens": 40}}}[route], \
            (BUDGETS["medium"] if route == "responses" else 40)  # fmt: skip
    if route == "chat":
        return {"reasoning_effort": control}, BUDGETS[control]
    if route == "responses":
        return {"reasoning": {"effort": control}}, BUDGETS[control]
    return {"thinking": {"type": "adaptive"}, "extra_body": {"output_config": {"effort": control}}}, BUDGETS[control]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("route", ROUTES)
def test_the_reasoning_stays_within_the_budget_on_every_route(server, route, stream):
    family, url, engine = server
    tok = tokenizer(family)
    spent = {}
    for control in ("budget", "low", "high"):
        options, budget = _control(route, control)
        before = len(engine.requests)
        got = ask(route, url, f"[budget] what is 3 + 4? ({control})", model=MODEL, stream=stream, **options)
        n = len(tok.encode(got.reasoning.strip()))
        assert budget - SLACK <= n <= budget, (control, n, got.reasoning[-80:])
        assert REASONING.startswith(got.reasoning.strip()) and got.content.strip() == ANSWER
        assert len(engine.requests) - before == 2  # cut, closed, and gone on
        spent[control] = n
    assert spent["high"] >= spent["low"]


def test_a_budget_above_the_reasoning_leaves_it_whole(server):
    family, url, engine = server
    before = len(engine.requests)
    got = ask("chat", url, "[budget] whole", model=MODEL, stream=True, extra_body={"max_reasoning_tokens": 5000})
    assert got.reasoning.strip() == REASONING and got.content.strip() == ANSWER
    assert len(engine.requests) - before == 1


def test_budget_fields_on_chat_completions():
    msgs = [{"role": "user", "content": "hi"}]
    assert parse_chat_request({"messages": msgs, "thinking_token_budget": 0}).reasoning_budget == 0
    assert parse_chat_request({"messages": msgs, "thinking_token_budget": -1}).reasoning_budget is None
    assert parse_chat_request({"messages": msgs, "max_reasoning_tokens": 64}).reasoning_budget == 64
    same = parse_chat_request({"messages": msgs, "max_reasoning_tokens": 64, "thinking_token_budget": 64})
    assert same.reasoning_budget == 64
    for bad in ({"thinking_token_budget": -2}, {"thinking_token_budget": "10"}, {"thinking_token_budget": True},
                {"max_reasoning_tokens": 1.5}, {"thinking_token_budget": 10, "max_reasoning_tokens": 20}):
        with pytest.raises(RequestError) as e:
            parse_chat_request({"messages": msgs, **bad})
        assert e.value.param in ("thinking_token_budget", "max_reasoning_tokens")


def test_the_effort_table():
    assert effort_budget("low", "qwen3") == EFFORT_BUDGETS["low"] == 4096
    assert effort_budget("max", "qwen3") is None and effort_budget(None, "qwen3") is None
    assert effort_budget("none", "gpt_oss") == EFFORT_BUDGETS["minimal"]  # it cannot stop reasoning
    assert effort_budget("none", "qwen3") is None  # thinking off
    assert effort_budget("high", "qwen3", {"high": 10}) == 10
    assert check_effort_budgets({"low": 1}) == {"low": 1}
    for bad in ([], {"huge": 1}, {"low": -1}, {"low": "1"}, {"none": 3}):
        with pytest.raises(ValueError):
            check_effort_budgets(bad)
    base = ["--model-dir", "m", "--backend", "http://127.0.0.1:1"]
    cfg = config_from_args(build_parser().parse_args([*base, "--reasoning-effort-budgets", '{"low": 7}']), environ={})
    assert cfg.effort_budgets == (("low", 7),)
    with pytest.raises(ValueError, match="not JSON"):
        config_from_args(build_parser().parse_args([*base, "--reasoning-effort-budgets", "{low"]), environ={})
