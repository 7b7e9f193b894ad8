"""chatsieve.protocols.anthropic without a network: request blocks to the shared request, tool-use
ids both ways, and the stream (folded by the anthropic SDK's own accumulator) equal to the whole
message for any events in any batches."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chatsieve.events import (
    ContentDelta,
    Dropped,
    ReasoningDelta,
    ToolCallArgsDelta,
    ToolCallEnd,
    ToolCallStart,
)
from chatsieve.protocols.anthropic import (
    ANTHROPIC,
    MessageCollector,
    MessageStream,
    native_call_id,
    parse_messages_request,
    thinking_signature,
    tool_use_id,
)
from chatsieve.protocols.common import Outcome, RequestError, ResponseInfo

WEATHER = {"name": "get_weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}


def parse(**body):
    return parse_messages_request({"model": "m", "max_tokens": 10, **body}).chat


# ---------------------------------------------------------------- requests


def test_a_tool_loop_becomes_openai_form_messages():
    req = parse(
        system=[{"type": "text", "text": "A"}, {"type": "text", "text": "B", "cache_control": {"type": "ephemeral"}}],
        tools=[WEATHER],
        messages=[
            {"role": "user", "content": "Weather?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "Need it.", "signature": "x"},
                    {"type": "redacted_thinking", "data": "opaque"},
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": tool_use_id("functions.get_weather:0"), "name": "get_weather",
                     "input": {"city": "Paris"}},
                    {"type": "tool_use", "id": "toolu_01abc", "name": "get_weather", "input": {"city": "Rome"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": tool_use_id("functions.get_weather:0"), "content": "18C"},
                    {"type": "tool_result", "tool_use_id": "toolu_01abc", "is_error": True,
                     "content": [{"type": "text", "text": "no "}, {"type": "text", "text": "data"}]},
                    {"type": "text", "text": "Thanks."},
                ],
            },
        ],
    )
    assert req.messages == [
        {"role": "system", "content": "A\n\nB"},
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "content": "Checking.",
            "reasoning_content": "Need it.",
            "tool_calls": [
                {"id": "functions.get_weather:0", "type": "function",
                 "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
                {"id": "01abc", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'}},
            ],
        },
        {"role": "tool", "tool_call_id": "functions.get_weather:0", "content": "18C"},
        {"role": "tool", "tool_call_id": "01abc", "content": "Error: no data"},
        {"role": "user", "content": "Thanks."},
    ]  # fmt: skip
    assert req.tools == [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER["input_schema"]}}]


@pytest.mark.parametrize(
    ("choice", "mode", "name", "parallel"),
    [
        ({"type": "auto"}, "auto", None, True),
        ({"type": "any"}, "required", None, True),
        ({"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True}, "function", "get_weather", False),
        ({"type": "none"}, "none", None, True),
    ],
)
def test_tool_choice_maps_onto_the_shared_machinery(choice, mode, name, parallel):
    req = parse(tools=[WEATHER], tool_choice=choice, messages=[{"role": "user", "content": "x"}])
    assert (req.tool_choice.mode, req.tool_choice.name, req.parallel_tool_calls) == (mode, name, parallel)


def test_thinking_sets_the_switches_and_the_budget():
    msgs = [{"role": "user", "content": "x"}]
    on = parse(messages=msgs, thinking={"type": "enabled", "budget_tokens": 5})
    assert on.thinking is True and on.reasoning_budget == 5
    assert on.template_kwargs["enable_thinking"] is True and on.template_kwargs["thinking"] is True
    off = parse(messages=msgs, thinking={"type": "disabled"})
    assert off.thinking is False and off.reasoning_budget is None
    # adaptive (Claude Code's) is on; absent is off, as Anthropic's API means it
    assert parse(messages=msgs, thinking={"type": "adaptive", "display": "updates"}).thinking is True
    assert parse(messages=msgs).thinking is False
    own = parse(messages=msgs, chat_template_kwargs={"enable_thinking": True})  # the request's own switch stays
    assert own.thinking is True


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ([{"type": "image", "source": {}}], "messages[0].content[0]: 'image' blocks are not supported"),
        ([{"type": "text", "text": "a"}, {"type": "document", "source": {}}], "messages[0].content[1]: 'document'"),
        ([{"type": "tool_use", "id": "x", "name": "f", "input": {}}], "'tool_use' blocks are not supported in a user"),
        ([{"type": "tool_result", "tool_use_id": "t", "content": [{"type": "tool_use"}]}], "content[0].content[0]"),
        ([{"no": "type"}], "must be a block object"),
    ],
)
def test_blocks_that_cannot_be_rendered_are_refused_by_name(content, needle):
    with pytest.raises(RequestError) as info:
        parse(messages=[{"role": "user", "content": content}])
    assert needle in info.value.message and info.value.status == 400


def test_error_bodies_have_anthropics_shape():
    body = ANTHROPIC.error_body(RequestError("gone", status=404))
    assert body == {"type": "error", "error": {"type": "not_found_error", "message": "gone"}}
    assert ANTHROPIC.error_body(RequestError("x", status=503))["error"]["type"] == "overloaded_error"
    assert ANTHROPIC.error_body(RequestError("x", status=408))["error"]["type"] == "invalid_request_error"


# ---------------------------------------------------------------- tool-use ids


@given(st.text(max_size=30))
def test_tool_use_ids_carry_the_family_id_both_ways(native):
    tid = tool_use_id(native)
    assert re.fullmatch(r"toolu_[A-Za-z0-9_-]*", tid)
    assert native_call_id(tid) == native


@pytest.mark.parametrize(
    ("given", "rendered"),
    [
        ("call_abc", "call_abc"),  # not a toolu_ id: as it is
        ("toolu_01A09q90qw90lq917835lq9", "01A09q90qw90lq917835lq9"),  # Anthropic's: the same in every turn
        ("toolu_a-b", "toolu_a-b"),  # a '-' that escapes nothing: not one of ours
        ("toolu_x-ZZ", "toolu_x-ZZ"),
        ("toolu_-FF", "toolu_-FF"),  # escapes bytes that are not UTF-8
    ],
)
def test_ids_made_elsewhere_are_rendered_the_same_way_each_time(given, rendered):
    assert native_call_id(given) == rendered


# ---------------------------------------------------------------- responses

text = st.text(max_size=5)
event = st.one_of(
    st.builds(ContentDelta, text),
    st.builds(ReasoningDelta, text),
    st.builds(ToolCallStart, st.integers(0, 2), st.sampled_from(["call_1", "functions.f:0"]), st.sampled_from(["f", "g"])),
    st.builds(ToolCallArgsDelta, st.integers(0, 2), st.sampled_from(['{"a": ', "1", "}", ""])),
    st.builds(ToolCallEnd, st.integers(0, 2)),
    st.builds(Dropped, text, st.just("why")),
)


def _without_none(value):
    if isinstance(value, dict):
        return {k: _without_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_none(v) for v in value]
    return value


def _calls_are_whole(events):
    """Events as the filter hands them over: each call's arguments right after its start."""
    out = []
    for e in events:
        if isinstance(e, ToolCallStart):
            out += [e, ToolCallArgsDelta(e.index, '{"a": 1}'), ToolCallEnd(e.index)]
        elif not isinstance(e, ToolCallArgsDelta | ToolCallEnd):
            out.append(e)
    return out


@settings(max_examples=300, deadline=None)
@given(events=st.lists(event, max_size=14), cuts=st.lists(st.integers(0, 14), max_size=4),
       reason=st.sampled_from(["stop", "length", "tool_calls"]), stop=st.sampled_from([None, "END"]))  # fmt: skip
def test_the_stream_folded_by_the_sdk_is_the_whole_message(events, cuts, reason, stop):
    from anthropic.lib.streaming._messages import accumulate_event

    events = _calls_are_whole(events)
    info = ResponseInfo(model="m", prompt_tokens=7)
    outcome = Outcome(reason, prompt_tokens=7, completion_tokens=len(events), stop_sequence=stop)
    stream, whole = MessageStream(info, id="msg_1"), MessageCollector(info, id="msg_1")
    data = stream.start()
    bounds = [0, *sorted(c for c in cuts if c <= len(events)), len(events)]
    for a, b in zip(bounds, bounds[1:]):
        data += stream.encode(events[a:b])
        whole.apply(events[a:b])
    data += stream.finish(outcome)
    body = whole.body(outcome)
    snapshot, bufs, kinds = None, {}, []
    for sse in data.decode().split("\n\n")[:-1]:
        head, payload = sse.split("\n", 1)
        e = json.loads(payload[len("data: "):])
        assert head == f"event: {e['type']}"
        kinds.append(e["type"])
        snapshot = accumulate_event(event=e, current_snapshot=snapshot, json_bufs=bufs)
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    assert snapshot.model_dump(exclude_none=True) == _without_none(json.loads(json.dumps(body)))
    assert body["stop_reason"] == (
        {"length": "max_tokens", "tool_calls": "tool_use"}.get(reason)
        or ("stop_sequence" if stop else "end_turn")
    )
    for block in body["content"]:
        if block["type"] == "thinking":
            assert block["signature"] == thinking_signature(block["thinking"])
        if block["type"] == "tool_use":
            assert block["input"] == {"a": 1} and native_call_id(block["id"]) in ("call_1", "functions.f:0")
    # adjacent runs of one kind are one block
    kinds_of = [b["type"] for b in body["content"]]
    assert all(a != b or a == "tool_use" for a, b in zip(kinds_of, kinds_of[1:]))


@pytest.mark.parametrize("family", ["qwen3", "gemma4", "gpt_oss", "deepseek_v31", "kimi_k2", "glm47"])
def test_a_system_message_after_the_first_turn_reaches_the_prompt(family):
    """Claude Code sends one (its environment); a template that drops late system messages
    (gpt-oss) gets it in the leading one instead: moved, never lost."""
    from test_server_anthropic import FAMILIES, _tokenizer

    from chatsieve import render_prompt

    tok = _tokenizer(FAMILIES[family].loop)
    req = parse(system="Top rules.", messages=[
        {"role": "user", "content": "hi"},
        {"role": "system", "content": [{"type": "text", "text": "# Environment s3cr7"}]},
    ])  # fmt: skip
    text = render_prompt(req.messages, tokenizer=tok, format=family).text
    assert "Top rules." in text and "# Environment s3cr7" in text


def test_model_aliases_come_from_the_command_line_and_reach_every_worker():
    from chatsieve.server import build_parser, config_from_args
    from chatsieve.server.config import ServerConfig

    args = build_parser().parse_args(["--model-dir", "m", "--format", "qwen3", "--backend", "http://x",
                                      "--model-alias", "claude-sonnet-4-5", "--model-alias", "claude-haiku-4-5"])
    cfg = config_from_args(args, environ={})
    assert cfg.model_aliases == ("claude-sonnet-4-5", "claude-haiku-4-5")
    assert ServerConfig.from_json(cfg.to_json()) == cfg  # what --workers processes rebuild
