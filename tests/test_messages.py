"""Message normalisation (chatsieve.messages): every OpenAI message shape reaches the template."""

from __future__ import annotations

import pytest
from models import chat_tokenizer, model_path

from chatsieve.messages import MessageError, normalize_messages
from chatsieve.prompt import PromptError, render_prompt
from chatsieve.protocols.openai_chat import RequestError, parse_chat_request

CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}


def test_openai_shapes_become_template_shapes():
    got = normalize_messages(
        [
            {"role": "developer", "content": [{"type": "text", "text": "Be "}, {"type": "text", "text": "brief."}]},
            {"role": "user", "name": "ann", "content": "hi"},
            {"role": "assistant", "content": None, "tool_calls": [CALL], "refusal": None},
            {"role": "tool", "tool_call_id": "call_1", "content": [{"type": "text", "text": "18C"}]},
            {"role": "assistant", "content": None, "function_call": {"name": "f", "arguments": "{}"}},
            {"role": "function", "name": "f", "content": "done"},
        ]
    )
    assert got == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "name": "ann", "content": "hi"},
        {"role": "assistant", "content": "", "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18C"},
        {"role": "assistant", "content": "",
         "tool_calls": [{"id": "call_4", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "name": "f", "content": "done"},
    ]
    objects = normalize_messages([{"role": "assistant", "tool_calls": [CALL]}], arguments_as_objects=True)
    assert objects[0]["tool_calls"][0]["function"]["arguments"] == {"city": "Paris"}


@pytest.mark.parametrize(
    "message,param",
    [
        ({"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}, "messages[0].content[0]"),
        ({"role": "user", "content": [{"type": "text"}]}, "messages[0].content[0]"),
        ({"role": "user", "content": 3}, "messages[0].content"),
        ({"role": "user", "content": "x", "name": 3}, "messages[0].name"),
        ({"role": "assistant", "tool_calls": [{"function": {}}]}, "messages[0].tool_calls[0]"),
        ({"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": 3}}]},
         "messages[0].tool_calls[0].function.arguments"),
    ],
)
def test_unsupported_shapes_are_refused_never_dropped(message, param):
    with pytest.raises(MessageError) as info:
        normalize_messages([message])
    assert info.value.param == param
    with pytest.raises(RequestError) as info:
        parse_chat_request({"messages": [message]})
    assert info.value.param == param and info.value.status == 400
    with pytest.raises(PromptError):
        render_prompt([message], tokenizer=chat_tokenizer("qwen3"), format="qwen3")


@pytest.mark.parametrize(
    "messages",
    [
        [{"role": "developer", "content": "RULES-7"}],
        [{"role": "user", "content": "q"}, {"role": "function", "name": "lookup", "content": "RULES-7"}],
    ],
    ids=["developer-only", "function-role"],
)
@pytest.mark.parametrize("template", ["qwen3/chat_template.jinja", "llama3/chat_template.llama-3.2.jinja",
                                      "deepseek/chat_template.v3.2.jinja"])
def test_developer_and_function_roles_are_rendered(messages, template):
    tok = chat_tokenizer("qwen3")
    prompt = render_prompt(messages, tokenizer=tok, template=model_path(template), format="qwen3")
    assert "RULES-7" in prompt.text


def test_server_request_keeps_the_normalised_messages():
    req = parse_chat_request(
        {"messages": [{"role": "developer", "content": [{"type": "text", "text": "x"}]},
                      {"role": "assistant", "content": None, "tool_calls": [CALL]}]}
    )
    assert req.messages == [{"role": "system", "content": "x"},
                            {"role": "assistant", "content": "", "tool_calls": [CALL]}]


def _results_of(*ids: str) -> list[dict]:
    return [{"role": "tool", "tool_call_id": i, "content": f"result of {i}"} for i in ids]


def _calls(*ids: str) -> dict:
    return {"role": "assistant", "content": "", "tool_calls": [{**CALL, "id": i} for i in ids]}


def test_tool_results_follow_the_order_of_their_calls():
    from chatsieve.messages import order_tool_results

    user = {"role": "user", "content": "go"}
    got = order_tool_results([user, _calls("a", "b", "c"), *_results_of("c", "a", "b"), user,
                              _calls("d", "e"), *_results_of("e", "d")])  # fmt: skip
    assert [m.get("tool_call_id") for m in got] == [None, None, "a", "b", "c", None, None, "d", "e"]
    # a result without an id (the deprecated function role) keeps its place after those with one
    legacy = {"role": "tool", "name": "get_weather", "content": "x"}
    got = order_tool_results([user, _calls("a", "b"), legacy, *_results_of("b", "a")])
    assert [m.get("tool_call_id") for m in got[2:]] == ["a", "b", None]


@pytest.mark.parametrize("bad", [["x"], ["a", "x"]])
def test_a_result_for_a_call_never_made_is_refused(bad):
    from chatsieve.messages import order_tool_results

    with pytest.raises(MessageError, match=r"tool call 'x', which the assistant turn before it did not make"):
        order_tool_results([{"role": "user", "content": "go"}, _calls("a"), *_results_of(*bad)])
    with pytest.raises(MessageError, match="its calls: none"):
        order_tool_results([{"role": "user", "content": "go"}, *_results_of("a")])
