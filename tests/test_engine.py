"""Engine mechanisms that fixtures of one family cannot show on their own:
tentative (text-opened) call regions and their rollback into content."""

from __future__ import annotations

import dataclasses

import pytest

from chatsieve import StreamParser, formats, parse
from chatsieve.args.json_call import JsonCallCodec
from chatsieve.fixtures import normalized

TOOLS = [{"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]

# A toy family: a bare JSON call object as the first content, or after "CALL:" anywhere.
TOY = dataclasses.replace(
    formats.get("hermes"),
    name="toy-json",
    aliases=(),
    content_call_start=("{",),
    text_call_open=(),
)


class _OneObject(JsonCallCodec):
    until_object_end = True


TOY_TEXT = dataclasses.replace(
    TOY, name="toy-text", content_call_start=(), text_call_open=('{"name"',), codec=_OneObject
)


def _all_splits(spec, text, **kw):
    batch = parse(text, spec, **kw)
    for k in range(1, len(text)):
        p = StreamParser(spec, **kw)
        p.feed(text[:k])
        p.feed(text[k:])
        p.finish()
        assert normalized(p.message) == normalized(batch), k
    return batch


def test_content_start_opens_a_call_for_a_known_tool():
    m = _all_splits(TOY, '  {"name": "get_weather", "arguments": {"city": "Paris"}}', tools=TOOLS)
    assert [(c.name, c.arguments) for c in m.tool_calls] == [("get_weather", '{"city":"Paris"}')]
    assert m.content is None


def test_json_content_that_is_not_a_known_call_stays_content():
    text = '{"name": "Alice", "age": 30} is the record.'
    m = _all_splits(TOY, text, tools=TOOLS)
    assert m.tool_calls == [] and m.content == text


def test_invalid_json_start_goes_back_to_content():
    text = "{not json at all} fine"
    m = _all_splits(TOY, text, tools=TOOLS)
    assert m.content == text and m.tool_calls == []


def test_trigger_only_at_the_start():
    text = 'Result: {"name": "get_weather", "arguments": {}}'
    m = _all_splits(TOY, text, tools=TOOLS)
    assert m.content == text and m.tool_calls == []


def test_text_call_open_before_any_content():
    text = '  {"name": "get_weather", "arguments": {"city": "Rome"}}\nDone.'
    m = _all_splits(TOY_TEXT, text, tools=TOOLS)
    assert m.content == "Done." and [c.name for c in m.tool_calls] == ["get_weather"]


def test_text_call_open_after_content_stays_text():
    # an opener in mid-answer may be quoted or echoed from untrusted input
    text = 'Sure. {"name": "get_weather", "arguments": {"city": "Rome"}}'
    m = _all_splits(TOY_TEXT, text, tools=TOOLS)
    assert m.content == text and m.tool_calls == []


def test_a_close_marker_ending_a_rejected_region_is_reported():
    m = _all_splits(TOY_TEXT, '{"name" oops</tool_call> after', tools=TOOLS)
    assert m.content == '{"name" oops after'
    assert [d.raw for d in m.diagnostics] == ["</tool_call>"]


def test_undecided_region_at_finish_is_content():
    m = _all_splits(TOY, '{"na', tools=TOOLS)
    assert m.content == '{"na' and m.tool_calls == []


@pytest.mark.parametrize("stream", [False, True])
def test_confirmed_then_truncated_is_not_content(stream):
    m = _all_splits(TOY, '{"name": "get_weather", "arguments": {"city": "Par', tools=TOOLS, stream_arguments=stream)
    assert m.content is None
    assert m.finish_reason == "length"
    assert bool(m.tool_calls) == stream and all(c.incomplete for c in m.tool_calls)
