"""chatsieve.protocols.openai_chat without a network: request validation, tool-choice policy, chunk and response shapes."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chatsieve.events import (
    ContentDelta,
    ReasoningDelta,
    TokenLogprob,
    ToolCallArgsDelta,
    ToolCallEnd,
    ToolCallStart,
)
from chatsieve.protocols.openai_chat import (
    OPENAI_CHAT,
    ChunkStream,
    CompletionCollector,
    RequestError,
    ToolCallFilter,
    chat_completion,
    finish_reason,
    parse_chat_request,
    sse,
    usage,
)

MSGS = [{"role": "user", "content": "hi"}]
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}},
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}},
]


def test_minimal_request_defaults():
    r = parse_chat_request({"model": "m", "messages": MSGS, "some_vendor_field": {"x": 1}})
    assert r.model == "m" and r.messages == MSGS
    assert r.tools is None and r.tool_choice.mode == "auto" and r.parallel_tool_calls
    assert (r.max_tokens, r.temperature, r.top_p, r.seed, r.stop) == (None, None, None, None, ())
    assert not r.stream and not r.include_usage and not r.logprobs
    assert r.thinking is None and r.template_kwargs == {}


def test_full_request():
    r = parse_chat_request(
        {
            "model": "m",
            "messages": MSGS,
            "tools": TOOLS,
            "tool_choice": {"type": "function", "function": {"name": "get_time"}},
            "parallel_tool_calls": False,
            "max_tokens": 10,
            "max_completion_tokens": 20,
            "temperature": 0.5,
            "top_p": 1,
            "seed": 3,
            "stop": ["a", "b"],
            "n": 1,
            "logprobs": True,
            "top_logprobs": 3,
            "stream": True,
            "stream_options": {"include_usage": True},
            "chat_template_kwargs": {"enable_thinking": False},
            "reasoning_effort": "low",
        }
    )
    assert r.max_tokens == 20  # max_completion_tokens wins
    assert (r.temperature, r.top_p, r.seed, r.stop) == (0.5, 1.0, 3, ("a", "b"))
    assert r.logprobs and r.top_logprobs == 3 and r.stream and r.include_usage
    assert r.thinking is False
    assert r.template_kwargs == {"enable_thinking": False, "reasoning_effort": "low"}
    assert [t["function"]["name"] for t in r.prompt_tools] == ["get_time"]
    assert r.tool_choice.name == "get_time" and not r.parallel_tool_calls


@pytest.mark.parametrize(
    "patch,param",
    [
        ({"messages": []}, "messages"),
        ({"messages": "hi"}, "messages"),
        ({"messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role"),
        ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
        ({"max_tokens": "10"}, "max_tokens"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_tokens": True}, "max_tokens"),
        ({"temperature": "hot"}, "temperature"),
        ({"temperature": 3}, "temperature"),
        ({"top_p": -1}, "top_p"),
        ({"seed": 1.5}, "seed"),
        ({"stop": 5}, "stop"),
        ({"stop": ["a", 1]}, "stop"),
        ({"n": 2}, "n"),
        ({"logprobs": "yes"}, "logprobs"),
        ({"top_logprobs": 2}, "top_logprobs"),
        ({"logprobs": True, "top_logprobs": 50}, "top_logprobs"),
        ({"stream": "true"}, "stream"),
        ({"stream": True, "stream_options": {"include_usage": "yes"}}, "stream_options.include_usage"),
        ({"tools": {"a": 1}}, "tools"),
        ({"tools": [{"type": "function", "function": {}}]}, "tools[0]"),
        ({"tool_choice": "sometimes", "tools": TOOLS}, "tool_choice"),
        ({"tool_choice": "required"}, "tool_choice"),
        ({"tool_choice": {"type": "function", "function": {"name": "nope"}}, "tools": TOOLS}, "tool_choice"),
        ({"parallel_tool_calls": "no"}, "parallel_tool_calls"),
        ({"chat_template_kwargs": []}, "chat_template_kwargs"),
        ({"reasoning_effort": 1}, "reasoning_effort"),
        ({"model": 7}, "model"),
    ],
)
def test_bad_fields_name_the_param(patch, param):
    with pytest.raises(RequestError) as info:
        parse_chat_request({"model": "m", "messages": MSGS, **patch})
    e = info.value
    assert e.status == 400 and e.param.startswith(param)
    body = OPENAI_CHAT.error_body(e)["error"]
    assert set(body) == {"message", "type", "param", "code"} and body["type"] == "invalid_request_error"


def test_non_object_body():
    with pytest.raises(RequestError):
        parse_chat_request([1, 2])


def test_nulls_count_as_absent_and_stop_string():
    r = parse_chat_request({"messages": MSGS, "max_tokens": None, "tools": None, "stop": "END", "n": None})
    assert r.max_tokens is None and r.tools is None and r.stop == ("END",)


def test_thinking_sources():
    def thinking(**kw):
        return parse_chat_request({"messages": MSGS, **kw}).thinking

    assert thinking(chat_template_kwargs={"enable_thinking": True}) is True
    assert thinking(chat_template_kwargs={"thinking": False}) is False
    assert thinking(reasoning_effort="none") is False
    assert thinking(reasoning_effort="high") is None
    r = parse_chat_request({"messages": MSGS, "reasoning_effort": "none"})
    assert r.template_kwargs == {"reasoning_effort": "none", "enable_thinking": False}


def test_tool_choice_none_renders_no_tools():
    r = parse_chat_request({"messages": MSGS, "tools": TOOLS, "tool_choice": "none"})
    assert r.prompt_tools is None
    assert r.tool_call_filter().allowed == frozenset()
    r = parse_chat_request({"messages": MSGS, "tools": TOOLS, "tool_choice": "required"})
    assert r.prompt_tools == TOOLS and r.tool_call_filter().allowed == {"get_weather", "get_time"}
    r = parse_chat_request({"messages": MSGS})
    assert r.tool_call_filter().allowed == frozenset()  # no tools offered: no call is returned


def test_calls_to_functions_not_offered_are_dropped():
    r = parse_chat_request({"messages": MSGS, "tools": TOOLS})
    f = r.tool_call_filter()
    out = f.apply([*_call(0, "rm_rf"), *_call(1, "get_time")])
    assert [e.name for e in out if isinstance(e, ToolCallStart)] == ["get_time"]
    assert "not offered" in f.dropped[0].why


def _call(i, name, args='{"a":1}'):
    return [ToolCallStart(i, f"call_{i}", name), ToolCallArgsDelta(i, args), ToolCallEnd(i)]


def test_filter_named_keeps_only_that_function_and_renumbers():
    f = ToolCallFilter(allowed=frozenset({"get_time"}))
    out = f.apply([ContentDelta("x"), *_call(0, "get_weather"), *_call(1, "get_time"), *_call(2, "get_time")])
    f.finish()
    assert out == [ContentDelta("x"), *_call(0, "get_time")[:0], ToolCallStart(0, "call_1", "get_time"),
                   ToolCallArgsDelta(0, '{"a":1}'), ToolCallEnd(0), ToolCallStart(1, "call_2", "get_time"),
                   ToolCallArgsDelta(1, '{"a":1}'), ToolCallEnd(1)]  # fmt: skip
    assert f.kept == 2
    assert [d.raw for d in f.dropped] == ['get_weather({"a":1})']


def test_filter_parallel_false_keeps_first_and_none_drops_all():
    f = ToolCallFilter(max_calls=1)
    out = f.apply([*_call(0, "a"), *_call(1, "b")])
    assert [e for e in out if isinstance(e, ToolCallStart)] == [ToolCallStart(0, "call_0", "a")]
    assert len(f.dropped) == 1 and "parallel_tool_calls" in f.dropped[0].why
    f = ToolCallFilter(allowed=frozenset())
    assert f.apply([*_call(0, "a"), ContentDelta("ok")]) == [ContentDelta("ok")]
    assert f.kept == 0 and "no tools were offered" in f.dropped[0].why


def test_filter_split_across_feeds_and_unfinished_drop():
    f = ToolCallFilter(allowed=frozenset({"b"}))
    assert f.apply([ToolCallStart(0, "c0", "a"), ToolCallArgsDelta(0, '{"x":')]) == []
    assert f.apply([ToolCallArgsDelta(0, "1}")]) == []
    f.finish()
    assert [d.raw for d in f.dropped] == ['a({"x":1})']


def test_finish_reason_rules():
    assert finish_reason("tool_calls", 0) == "stop"  # every call was dropped by policy
    assert finish_reason("stop", 2) == "tool_calls"
    assert finish_reason("length", 0) == "length"
    assert finish_reason(None, 0) == "stop"


def _lp(tid, token):
    return TokenLogprob(tid, token, -0.5, ((token, -0.5), ("alt", -1.5)))


def test_chunks_are_what_the_openai_client_accumulates():
    from openai.lib.streaming.chat import ChatCompletionStreamState
    from openai.types.chat import ChatCompletionChunk

    cs = ChunkStream(model="m", id="chatcmpl-1", created=1, logprobs=True, top_logprobs=1, include_usage=True)
    chunks = [cs.first()]
    chunks += cs.events([ReasoningDelta("Let me ", (_lp(1, "Let"),)), ReasoningDelta("think.")])
    chunks += cs.events([ContentDelta("Hel", (_lp(2, "Hel"),)), ContentDelta("lo", (_lp(3, "lo"),))])
    chunks += cs.events([ToolCallStart(0, "call_a", "f"), ToolCallArgsDelta(0, '{"x":'), ToolCallArgsDelta(0, "1}"),
                         ToolCallEnd(0), ToolCallStart(1, "call_b", "g"), ToolCallArgsDelta(1, "{}"), ToolCallEnd(1)])  # fmt: skip
    chunks += cs.finish("tool_calls", usage(5, 9))
    # reasoning merged into one chunk, content into one; call: start chunk then one arguments chunk
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert deltas[0] == {"role": "assistant", "content": ""}
    assert deltas[1] == {"reasoning_content": "Let me think.", "reasoning": "Let me think."}
    assert deltas[2] == {"content": "Hello"}
    assert deltas[3] == {
        "tool_calls": [
            {"index": 0, "id": "call_a", "type": "function", "function": {"name": "f", "arguments": ""}}
        ]
    }
    assert deltas[4] == {"tool_calls": [{"index": 0, "function": {"arguments": '{"x":1}'}}]}
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] == 14
    assert chunks[-2]["choices"][0]["finish_reason"] == "tool_calls"
    assert all("usage" in c for c in chunks)
    content_lp = chunks[2]["choices"][0]["logprobs"]["content"]
    assert [e["token"] for e in content_lp] == ["Hel", "lo"]
    assert content_lp[0]["bytes"] == list(b"Hel") and content_lp[0]["top_logprobs"] == [
        {"token": "Hel", "logprob": -0.5, "bytes": list(b"Hel")}
    ]

    state = ChatCompletionStreamState()
    for c in chunks:
        state.handle_chunk(ChatCompletionChunk.model_validate(json.loads(sse(c)[6:])))
    final = state.get_final_completion()
    msg = final.choices[0].message
    assert msg.content == "Hello" and final.choices[0].finish_reason == "tool_calls"
    assert [(t.id, t.function.name, t.function.arguments) for t in msg.tool_calls] == [
        ("call_a", "f", '{"x":1}'),
        ("call_b", "g", "{}"),
    ]
    assert final.usage.completion_tokens == 9


def test_chat_completion_shape():
    from openai.types.chat import ChatCompletion

    c = CompletionCollector()
    c.apply([ReasoningDelta("r", (_lp(1, "r"),)), ContentDelta("A", (_lp(2, "A"),)), *_call(0, "f")])
    body = chat_completion(
        c.message,
        model="m",
        finish_reason="tool_calls",
        usage=usage(3, 4),
        logprobs=True,
        top_logprobs=0,
        content_logprobs=c.content_logprobs,
        reasoning_logprobs=c.reasoning_logprobs,
    )
    parsed = ChatCompletion.model_validate(body)
    m = parsed.choices[0].message
    assert m.role == "assistant" and m.content == "A" and m.reasoning_content == "r" and m.reasoning == "r"
    assert m.tool_calls[0].function.arguments == '{"a":1}' and m.tool_calls[0].type == "function"
    assert [e.token for e in parsed.choices[0].logprobs.content] == ["A"]
    assert parsed.choices[0].logprobs.content[0].top_logprobs == []
    assert body["choices"][0]["logprobs"]["reasoning_content"][0]["token"] == "r"
    assert parsed.usage.total_tokens == 7

    plain = chat_completion(CompletionCollector().message, model="m", finish_reason="stop", usage=usage(1, 0))
    assert plain["choices"][0]["message"]["tool_calls"] is None and plain["choices"][0]["logprobs"] is None


def test_sse_framing():
    assert sse("[DONE]") == b"data: [DONE]\n\n"
    assert sse({"a": "é"}) == 'data: {"a":"é"}\n\n'.encode()


_any_lp = st.builds(TokenLogprob, st.integers(0, 9), st.text(max_size=2), st.floats(-5, 0), st.just(()))
_event = st.one_of(
    st.builds(ContentDelta, st.text(max_size=3), st.none() | st.tuples(_any_lp)),
    st.builds(ReasoningDelta, st.text(max_size=3), st.none() | st.tuples(_any_lp)),
    st.builds(ToolCallStart, st.integers(0, 2), st.just("call_1"), st.just("f")),
    st.builds(ToolCallArgsDelta, st.integers(0, 2), st.text(max_size=3)),
    st.builds(ToolCallEnd, st.integers(0, 2)),
)


@given(st.lists(_event, max_size=6))
def test_runs_of_one_text_delta_are_what_the_general_join_gives(events):
    """`runs` answers a one-delta list (a paced stream's usual event) without its generator: the
    same runs as the general join, for every event kind, with and without logprobs."""
    from chatsieve.protocols.common import _runs, runs

    assert list(runs(events)) == list(_runs(events))
    assert list(runs(events[:1])) == list(_runs(events[:1]))
