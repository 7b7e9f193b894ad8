"""The Responses protocol module on its own (sans-I/O): request items to the internal request,
parser events to the event stream, checked with the `openai` SDK's own models and its
`responses.stream` accumulator. Codex's real request bodies are in tests/data/codex/.
"""

from __future__ import annotations

import json
import typing
from pathlib import Path

import openai
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.lib.streaming.responses._responses import ResponseStreamState
from openai.types.responses import Response, ResponseStreamEvent

from chatsieve.events import ContentDelta, ReasoningDelta, ToolCallArgsDelta, ToolCallEnd, ToolCallStart
from chatsieve.protocols.common import RequestError
from chatsieve.protocols.openai_responses_request import items_to_messages, parse_responses_request
from chatsieve.protocols.openai_responses_stream import ResponseStream, usage

DATA = Path(__file__).parent / "data" / "codex"
_UNION = typing.get_args(typing.get_args(ResponseStreamEvent)[0])
EVENT_MODELS = {typing.get_args(c.model_fields["type"].annotation)[0]: c for c in _UNION}
FN = {"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {}}}


def codex_body(turn: int) -> dict:
    return json.loads((DATA / f"responses_request_turn{turn}.json").read_text())


def sse_events(data: bytes) -> list[dict]:
    """The SSE bytes as event dicts; each `event:` line names its data's type."""
    out = []
    for block in data.decode().split("\n\n"):
        if not block:
            continue
        event_line, data_line = block.split("\n")
        event = json.loads(data_line.removeprefix("data: "))
        assert event_line == f"event: {event['type']}"
        out.append(event)
    return out


def sdk_final(events: list[dict], tools: list) -> Response:
    """What `client.responses.stream(...)` makes of the events (each validated strictly first)."""
    state = ResponseStreamState(input_tools=tools, text_format=openai.NOT_GIVEN)
    for e in events:
        state.handle_event(EVENT_MODELS[e["type"]].model_validate(e))
    assert state._completed_response is not None, "no response.completed"
    return state._completed_response


def bad(body: dict) -> RequestError:
    with pytest.raises(RequestError) as info:
        parse_responses_request(body)
    return info.value


# ---------------------------------------------------------------- requests


def test_codex_first_request():
    req = parse_responses_request(codex_body(1))
    names = [t["function"]["name"] for t in req.offered]
    assert "exec_command" in names and "spawn_agent" in names  # a namespace's functions are offered
    assert req.namespaces["spawn_agent"] == "multi_agent_v1" and "exec_command" not in req.namespaces
    assert req.left_out == ("web_search",)
    assert req.store is False and req.stream is True
    chat = req.chat_request(format="qwen3")
    roles = [m["role"] for m in chat.messages]
    assert roles == ["system", "system", "user", "user"]  # Codex's two developer messages
    assert "You are a coding agent" in chat.messages[0]["content"]
    assert "<skills_instructions>" in chat.messages[1]["content"]


def test_codex_second_request_turn_back():
    chat = parse_responses_request(codex_body(2)).chat_request()
    assistant, tool = chat.messages[-2:]
    assert assistant["role"] == "assistant" and assistant["reasoning_content"] == "I should run it."
    (call,) = assistant["tool_calls"]
    assert call["id"] == "call_1" and call["function"]["name"] == "exec_command"
    assert json.loads(call["function"]["arguments"]) == {"cmd": "echo hi > out.txt"}
    assert tool["role"] == "tool" and tool["tool_call_id"] == "call_1" and tool["name"] == "exec_command"
    assert tool["content"].startswith("Chunk ID:")


def test_string_input_and_instructions():
    req = parse_responses_request({"input": "hello", "instructions": "Be brief."})
    assert req.chat_request().messages == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hello"},
    ]
    assert req.input[0]["type"] == "message" and req.input[0]["id"].startswith("msg_")


@pytest.mark.parametrize("part", ["input_image", "input_file", "input_audio"])
def test_media_parts_are_refused_by_name(part):
    e = bad({"input": [{"role": "user", "content": [{"type": "input_text", "text": "see"}, {"type": part}]}]})
    assert e.status == 400 and e.param == "input[0].content[1]" and part in e.message


def test_items_fold_into_turns():
    items = parse_responses_request(
        {
            "input": [
                {"role": "user", "content": "q"},
                {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "R1"}]},
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": "Let me."}],
                },
                {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
                {"type": "function_call", "call_id": "c2", "name": "g", "arguments": '{"x": 1}'},
                {"type": "function_call_output", "call_id": "c2", "output": "two"},
                {
                    "type": "function_call_output",
                    "call_id": "c1",
                    "output": [{"type": "input_text", "text": "one"}],
                },
                {"type": "reasoning", "summary": [{"type": "summary_text", "text": "S2"}]},
                {"type": "message", "role": "assistant", "content": "done"},
                {"type": "function_call", "call_id": "c3", "name": "f", "arguments": "{}"},
                {"type": "message", "role": "assistant", "content": "after the call"},
            ]
        }
    ).input
    assert items_to_messages(items) == [
        {"role": "user", "content": "q"},
        {
            "role": "assistant",
            "content": "Let me.",
            "reasoning_content": "R1",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}},
                {"id": "c2", "type": "function", "function": {"name": "g", "arguments": '{"x": 1}'}},
            ],
        },
        {"role": "tool", "tool_call_id": "c2", "content": "two", "name": "g"},
        {"role": "tool", "tool_call_id": "c1", "content": "one", "name": "f"},
        {
            "role": "assistant",
            "content": "done",
            "reasoning_content": "S2",
            "tool_calls": [{"id": "c3", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
        },
        {"role": "assistant", "content": "after the call"},
    ]


def test_bad_items_say_what_is_wrong():
    assert bad({"input": []}).param == "input"
    assert bad({"input": [{"role": "tool", "content": "x"}]}).param == "input[0].role"
    assert bad({"input": [{"type": "function_call", "name": "f"}]}).param == "input[0].call_id"
    assert bad({"input": [{"type": "web_search_call", "id": "ws"}]}).code == "unsupported_item"
    assert "item_reference" in bad({"input": [{"type": "item_reference", "id": "msg_1"}]}).message
    assert bad({"input": "x", "background": True}).param == "background"
    assert bad({"input": "x", "max_output_tokens": 0}).param == "max_output_tokens"
    assert bad({"input": "x", "metadata": {"k": 1}}).param == "metadata"


def test_previous_response_id_allows_no_input():
    req = parse_responses_request({"previous_response_id": "resp_1"})
    assert req.input == [] and req.previous_response_id == "resp_1"
    history = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "earlier"}]}]
    assert req.chat_request(history).messages == [{"role": "user", "content": "earlier"}]


def test_tools_left_out_by_type_and_name():
    req = parse_responses_request(
        {
            "input": "x",
            "tools": [
                FN,
                {"type": "web_search"},
                {"type": "custom", "name": "apply_patch"},
                {"type": "mcp", "server_label": "docs"},
                {"type": "namespace", "name": "ns", "tools": [{"type": "function", "name": "get_weather"}]},
            ],
        }
    )
    assert [t["function"]["name"] for t in req.offered] == ["get_weather"]
    assert req.left_out == ("web_search", "custom:apply_patch", "mcp:docs", "ns.get_weather")
    assert bad({"input": "x", "tools": [FN, FN]}).param == "tools[1].name"


def test_tool_choice_forms():
    two = [FN, {**FN, "name": "other"}]
    req = parse_responses_request(
        {"input": "x", "tools": two, "tool_choice": {"type": "function", "name": "other"}}
    )
    assert req.chat_request().prompt_tools == [
        {"type": "function", "function": {"name": "other", "parameters": FN["parameters"]}}
    ]
    req = parse_responses_request(
        {
            "input": "x",
            "tools": two,
            "tool_choice": {
                "type": "allowed_tools",
                "mode": "required",
                "tools": [{"type": "function", "name": "other"}],
            },
        }
    )
    assert req.tool_choice.mode == "required" and [t["function"]["name"] for t in req.offered] == ["other"]
    assert bad({"input": "x", "tool_choice": "required"}).param == "tool_choice"
    assert (
        bad({"input": "x", "tools": two, "tool_choice": {"type": "function", "name": "nope"}}).param
        == "tool_choice"
    )
    e = bad({"input": "x", "tools": [{"type": "web_search"}], "tool_choice": {"type": "web_search"}})
    assert e.code == "unsupported_tool" and "web_search" in e.message
    assert (
        parse_responses_request({"input": "x", "tools": two, "parallel_tool_calls": False})
        .chat_request()
        .tool_call_filter()
        .max_calls
        == 1
    )


def test_text_format_becomes_response_format():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    req = parse_responses_request(
        {
            "input": "x",
            "text": {"format": {"type": "json_schema", "name": "A", "schema": schema, "strict": True}},
        }
    )
    assert req.chat_request().response_format == {
        "type": "json_schema",
        "json_schema": {"name": "A", "schema": schema, "strict": True},
    }
    assert parse_responses_request(
        {"input": "x", "text": {"format": {"type": "json_object"}}}
    ).response_format == {"type": "json_object"}
    assert (
        parse_responses_request({"input": "x", "text": {"format": {"type": "text"}}}).response_format is None
    )
    assert bad({"input": "x", "text": {"format": {"type": "json_schema"}}}).param == "text.format.schema"
    assert bad({"input": "x", "text": {"format": {"type": "yaml"}}}).param == "text.format"


@pytest.mark.parametrize("effort", ["none", "minimal"])
def test_reasoning_effort_off(effort):
    req = parse_responses_request({"input": "x", "reasoning": {"effort": effort, "summary": "auto"}})
    chat = req.chat_request(format="qwen3")
    assert chat.thinking is False and chat.template_kwargs["enable_thinking"] is False
    harmony = req.chat_request(format="gpt_oss")  # gpt-oss cannot stop thinking: its lowest effort
    assert harmony.thinking is None and harmony.template_kwargs == {"reasoning_effort": "low"}
    high = parse_responses_request({"input": "x", "reasoning": {"effort": "high"}}).chat_request(
        format="gpt_oss"
    )
    assert high.template_kwargs == {"reasoning_effort": "high"}


def test_accepted_and_ignored_fields():
    body = codex_body(1)
    body.update(
        {
            "metadata": {"k": "v"},
            "user": "u",
            "truncation": "auto",
            "top_logprobs": 3,
            "text": {"verbosity": "low"},
            "service_tier": "auto",
            "safety_identifier": "s",
        }
    )
    req = parse_responses_request(body)
    skeleton = req.skeleton(id="resp_1", model="m")
    assert skeleton["metadata"] == {"k": "v"} and skeleton["truncation"] == "auto"
    assert skeleton["text"] == {"verbosity": "low", "format": {"type": "text"}}


# ---------------------------------------------------------------- the event stream


def _request():
    return parse_responses_request({"input": "x", "tools": [FN]})


def _play(batches, *, emit=True, finish=None):
    req = _request()
    stream = ResponseStream(req.skeleton(id="resp_t", model="m"), emit=emit)
    data = stream.start()
    for batch in batches:
        data += stream.encode(batch)
    data += stream.finish(usage=usage(3, 9, 2), incomplete_reason=finish)
    return req, stream, data


def test_stream_order_and_sdk_accumulation():
    batches = [
        [ReasoningDelta("think "), ReasoningDelta("more")],
        [ContentDelta("Hello"), ToolCallStart(0, "call_a", "get_weather"), ToolCallArgsDelta(0, '{"city"')],
        [ToolCallArgsDelta(0, ': "Paris"}'), ToolCallEnd(0)],
    ]
    req, stream, data = _play(batches)
    events = sse_events(data)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert [e["type"] for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.reasoning_text.delta",  # the batch's two reasoning deltas, merged
        "response.reasoning_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert events[4]["delta"] == "think more"
    final = sdk_final(events, req.tools)
    assert [o.type for o in final.output] == ["reasoning", "message", "function_call"]
    assert final.output[0].content[0].text == "think more"
    assert final.output_text == "Hello"
    call = final.output[2]
    assert (
        call.call_id == "call_a"
        and call.id.startswith("fc_")
        and json.loads(call.arguments) == {"city": "Paris"}
    )
    assert final.usage.output_tokens_details.reasoning_tokens == 2 and final.usage.total_tokens == 12
    Response.model_validate(stream.final)


def test_incomplete_closes_open_call_as_incomplete():
    req, stream, data = _play(
        [[ContentDelta("a"), ToolCallStart(0, "call_a", "get_weather"), ToolCallArgsDelta(0, "{")]],
        finish="max_output_tokens",
    )
    events = sse_events(data)
    last = events[-1]
    assert last["type"] == "response.incomplete"
    assert last["response"]["status"] == "incomplete"
    assert last["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
    assert [o["status"] for o in last["response"]["output"]] == ["completed", "incomplete"]
    _, cut, _ = _play([[ContentDelta("a long")]], finish="max_output_tokens")
    assert cut.output[-1]["status"] == "incomplete"  # the message the output was cut in
    EVENT_MODELS["response.incomplete"].model_validate(last)


def test_failure_is_an_error_event_then_response_failed():
    req = _request()
    stream = ResponseStream(req.skeleton(id="resp_t", model="m"))
    data = (
        stream.start()
        + stream.encode([ContentDelta("part")])
        + stream.fail("engine died", code="backend_error")
    )
    events = sse_events(data)
    assert [e["type"] for e in events[-2:]] == ["error", "response.failed"]
    assert events[-2]["code"] == "backend_error" and events[-2]["message"] == "engine died"
    for e in events[-2:]:
        EVENT_MODELS[e["type"]].model_validate(e)
    assert events[-1]["response"]["error"] == {"code": "server_error", "message": "engine died"}


def test_namespaced_call_carries_its_namespace():
    req = parse_responses_request(codex_body(1))
    stream = ResponseStream(req.skeleton(id="resp_t", model="m"), namespaces=req.namespaces)
    stream.encode([ToolCallStart(0, "call_s", "spawn_agent"), ToolCallArgsDelta(0, "{}"), ToolCallEnd(0)])
    stream.encode([ToolCallStart(1, "call_e", "exec_command"), ToolCallArgsDelta(1, "{}"), ToolCallEnd(1)])
    spawn, shell = stream.output
    assert spawn["namespace"] == "multi_agent_v1" and "namespace" not in shell


# Parser-like event runs: reasoning / content text, and whole calls (start, argument pieces, end).
_text = st.text(alphabet='ab \n"é{}', min_size=1, max_size=6)
_segment = st.one_of(
    st.tuples(st.just("r"), _text),
    st.tuples(st.just("c"), _text),
    st.tuples(
        st.just("call"), st.lists(st.sampled_from(['{"', "a", '":', " 1", "}"]), min_size=1, max_size=4)
    ),
)


def _events(segments):
    out, calls = [], 0
    for kind, value in segments:
        if kind == "r":
            out.append(ReasoningDelta(value))
        elif kind == "c":
            out.append(ContentDelta(value))
        else:
            out += [ToolCallStart(calls, f"call_{calls}", "get_weather")]
            out += [ToolCallArgsDelta(calls, piece) for piece in value] + [ToolCallEnd(calls)]
            calls += 1
    return out


def _shape(output):
    """Output items without their random ids (and the SDK's `parsed` additions)."""

    def part(p):
        return {k: v for k, v in p.items() if k != "parsed"}

    return [
        {
            k: [part(p) for p in v] if k == "content" else v
            for k, v in item.items()
            if k not in ("id", "parsed_arguments")
        }
        for item in output
    ]


@settings(max_examples=60, deadline=None)
@given(st.lists(_segment, max_size=8), st.data())
def test_any_batching_gives_the_same_response(segments, data):
    events = _events(segments)
    cuts = sorted(data.draw(st.sets(st.integers(0, len(events)), max_size=5)))
    bounds = [0, *cuts, len(events)]
    batches = [events[a:b] for a, b in zip(bounds, bounds[1:])]
    req, stream, raw = _play(batches)
    _, whole, _ = _play([events], emit=False)
    assert _shape(stream.output) == _shape(whole.output)
    wire = sse_events(raw)
    assert [e["sequence_number"] for e in wire] == list(range(len(wire)))
    final = sdk_final(wire, req.tools)
    assert _shape([o.to_dict() for o in final.output]) == _shape(stream.output)
    # the deltas of each item join to its final text
    joined: dict[str, str] = {}
    for e in wire:
        if e["type"].endswith(".delta"):
            joined[e["item_id"]] = joined.get(e["item_id"], "") + e["delta"]
    for item in stream.output:
        text = item["arguments"] if item["type"] == "function_call" else item["content"][0]["text"]
        assert joined.get(item["id"], "") == text
    # what the items say is exactly what the events said, in order
    texts = [(type(e).__name__, e.text) for e in events if isinstance(e, ReasoningDelta | ContentDelta)]
    said = "".join(t for _, t in texts)
    shown = "".join(i["content"][0]["text"] for i in stream.output if i["type"] != "function_call")
    assert shown == said


def test_logprobs_ride_on_the_answer_only():
    from chatsieve.events import TokenLogprob

    lp = [
        TokenLogprob(7, "Hi", -0.5, (("Hi", -0.5), ("Ho", -1.5))),
        TokenLogprob(8, "!", -0.1, (("!", -0.1),)),
    ]
    req = parse_responses_request(
        {"input": "x", "include": ["message.output_text.logprobs"], "top_logprobs": 1}
    )
    assert req.chat_request().logprobs and req.chat_request().top_logprobs == 1
    stream = ResponseStream(req.skeleton(id="resp_t", model="m"), logprobs=True, top_logprobs=1)
    events = sse_events(
        stream.start()
        + stream.encode([ReasoningDelta("r", (TokenLogprob(9, "r", -2.0),)), ContentDelta("Hi", lp[:1])])
        + stream.encode([ContentDelta("!", lp[1:])])
        + stream.finish(usage=usage(1, 3))
    )
    deltas = [e for e in events if e["type"] == "response.output_text.delta"]
    assert [[d["token"] for d in e["logprobs"]] for e in deltas] == [["Hi"], ["!"]]
    assert deltas[0]["logprobs"][0] == {
        "token": "Hi",
        "logprob": -0.5,
        "bytes": list(b"Hi"),
        "top_logprobs": [{"token": "Hi", "logprob": -0.5, "bytes": list(b"Hi")}],
    }
    message = stream.final["output"][-1]
    assert [d["token"] for d in message["content"][0]["logprobs"]] == ["Hi", "!"]
    assert "logprobs" not in [e for e in events if e["type"] == "response.reasoning_text.delta"][0]
    Response.model_validate(stream.final)
    assert not parse_responses_request({"input": "x"}).chat_request().logprobs
