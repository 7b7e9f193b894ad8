"""Tencent Hunyuan: `<think>…</think>` reasoning, `<answer>…</answer>` around the content
(removed), and `<tool_calls><tool_call>NAME<tool_sep><arg_key>K</arg_key><arg_value>V
</arg_value></tool_call>…</tool_calls>` calls."""

from __future__ import annotations

from ..args.xml_kv import XmlKvSyntax, xml_kv_codec
from ..spec import FormatSpec

HUNYUAN_SYNTAX = XmlKvSyntax(
    call_open="<tool_call>",
    name_close=("<tool_sep>",),
    call_close="</tool_call>",
    key_open="<arg_key>",
    key_close="</arg_key>",
    value_open="<arg_value>",
    value_close="</arg_value>",
    structural=("</tool_calls>", "<|eos|>"),
    openers=("<tool_calls>",),
    closers=("</tool_calls>",),
)

HUNYUAN = FormatSpec(
    name="hunyuan",
    description="Tencent Hunyuan (think/answer blocks; XML key/value calls)",
    aliases=("hy_v3", "hy3", "hunyuan_hy3", "hunyuan-hy3"),
    reasoning_open=("<think>",),
    reasoning_close=("</think>",),
    default_thinking=True,  # the model writes its own `<think>`
    call_open=("<tool_calls>",),
    call_close=("</tool_calls>",),
    codec=xml_kv_codec("HunyuanCallCodec", HUNYUAN_SYNTAX),
    end=("<|eos|>",),
    strip=("<answer>", "</answer>"),
    # hunyuan/tokenizer_config.json holds Hunyuan-A13B's template, whose calls are a JSON
    # list (`<tool_calls>[{…}]</tool_calls>`), not this syntax
    template=None,
    reasoning_doc="`<think>…</think>`, on by default; `<answer>…</answer>` removed",
    calls_doc="`<tool_calls><tool_call>NAME<tool_sep><arg_key>K</arg_key><arg_value>V</arg_value>"
    "</tool_call></tool_calls>`",
    # Hunyuan-A13B's vocabulary: its tags are plain text there, only `<|eos|>` is one token
    # (the fixtures run in text mode)
    tokenizer_doc="hunyuan",
)

SPECS = (HUNYUAN,)
