"""Family builders and codecs that fixtures cannot reach by name: HY3's token suffix
(the suffix value is the tokenizer's; an arbitrary one is used here), and the shared
engine's handling of every new family's malformed input."""

from __future__ import annotations

import pytest

from chatsieve import formats, parse
from chatsieve.formats.hunyuan import HUNYUAN
from chatsieve.formats.hy3 import hy3_format

TOOLS = [
    {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}
]


def test_hy3_suffix_applies_to_every_tag():
    spec = hy3_format("_s9")
    for tag in ("<think_s9>", "</think_s9>", "<tool_calls_s9>", "</tool_calls_s9>"):
        assert tag in spec.delimiters
    text = (
        "<think_s9>hm</think_s9><tool_calls_s9><tool_call_s9>get_weather<tool_sep_s9>"
        "<arg_key_s9>city</arg_key_s9><arg_value_s9>Paris</arg_value_s9></tool_call_s9></tool_calls_s9>"
    )
    msg = parse(text, spec, tools=TOOLS)
    assert msg.reasoning == "hm"
    assert [(c.name, c.arguments) for c in msg.tool_calls] == [("get_weather", '{"city":"Paris"}')]
    assert msg.diagnostics == []


def test_hy3_suffixed_spec_leaves_unsuffixed_tags_as_text():
    msg = parse(
        "<tool_calls><tool_call>get_weather<tool_sep></tool_call></tool_calls>",
        hy3_format("_s9"),
        tools=TOOLS,
    )
    assert msg.tool_calls == []
    assert msg.content == "<tool_calls><tool_call>get_weather<tool_sep></tool_call></tool_calls>"


def test_hy3_empty_suffix_is_hunyuan_and_bad_suffix_is_refused():
    assert hy3_format("") is HUNYUAN
    assert formats.get("hy_v3") is HUNYUAN
    with pytest.raises(ValueError, match="token suffix"):
        hy3_format("a>b")
