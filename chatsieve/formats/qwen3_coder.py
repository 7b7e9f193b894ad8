"""Qwen3-Coder: `<think>` reasoning as Qwen3, and XML calls
`<tool_call><function=NAME><parameter=K>V</parameter></function></tool_call>`."""

from __future__ import annotations

from ..args.xml_kv import XmlKvSyntax, xml_kv_codec
from ..spec import FormatSpec

_END = ("<|im_end|>", "<|endoftext|>", "<|im_start|>", "<tool_response>")

QWEN3_CODER_SYNTAX = XmlKvSyntax(
    call_open="<function=",
    name_close=(">",),
    call_close="</function>",
    key_open="<parameter=",
    key_close=">",
    value_open="",
    value_close="</parameter>",
    trim_newline=True,  # the template writes `>\nV\n</parameter>`
    structural=("</tool_call>", *_END),
    openers=("<tool_call>",),
    closers=("</tool_call>",),
)

QWEN3_CODER = FormatSpec(
    name="qwen3_coder",
    description="Qwen3-Coder (XML parameters typed by schema; thinking off unless asked)",
    aliases=("qwen3-coder", "qwen3_xml"),
    reasoning_open=("<think>",),
    reasoning_close=("</think>",),
    default_thinking=False,  # the Coder template never opens a think block
    thinking_starts_in_reasoning=True,
    call_open=("<tool_call>",),
    call_close=("</tool_call>",),
    codec=xml_kv_codec("Qwen3CoderCallCodec", QWEN3_CODER_SYNTAX),
    # the model may drop the first `<tool_call>` and start with `<function=NAME>`
    text_call_open=("<function=",),
    end=_END,
    strip=("</tool_response>",),
    template="qwen3/chat_template.qwen3-coder.jinja",
    reasoning_doc="`<think>…</think>`, off by default (Coder models do not think)",
    calls_doc="`<tool_call><function=NAME><parameter=K>V</parameter></function></tool_call>`, typed by "
    "schema; an opener-less `<function=` only before any content",
    tokenizer_doc="qwen3",
)

SPECS = (QWEN3_CODER,)
