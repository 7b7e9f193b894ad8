"""Qwen3-Coder: `<think>` reasoning as Qwen3, and XML calls
`<tool_call><function=NAME><parameter=K>V</parameter></function></tool_call>`."""

from __future__ import annotations

import dataclasses

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

# Qwen 3.5 / 3.6 / 3.8: Qwen3-Coder's XML calls; the prompt opens `<think>\n` (thinking on by
# default, `enable_thinking=false` writes an empty block); a call before `</think>` ends the reasoning.
QWEN35 = dataclasses.replace(
    QWEN3_CODER,
    name="qwen35",
    description="Qwen 3.5 / 3.6 / 3.8 (Qwen3-Coder XML calls; the prompt opens <think>)",
    aliases=("qwen3.5", "qwen3_5", "qwen-3.5", "qwen3.6", "qwen3_6", "qwen36", "qwen3.8", "qwen3_8", "qwen38"),
    default_thinking=True,
    template="llama.cpp/models/templates/Qwen3.5-4B.jinja",
    reasoning_doc="`<think>…</think>`, on by default (the prompt opens it)",
    calls_doc="as `qwen3_coder`",
    tokenizer_doc="",
)

# Xiaomi MiMo V2 / V2.6: the same XML, with or without newlines, and a value is exactly the text
# between its tags (no newline trimmed). MiMo-VL's template writes Hermes JSON instead (hermes).
MIMO_SYNTAX = dataclasses.replace(QWEN3_CODER_SYNTAX, trim_newline=False)

MIMO = dataclasses.replace(
    QWEN3_CODER,
    name="mimo",
    description="Xiaomi MiMo V2 / V2.6 (Qwen3-Coder XML, values verbatim; thinking on by default)",
    aliases=("mimo-v2", "mimo_v2", "mimo_v2_flash", "mimo-v2-flash", "mimo-v2.6", "mimo_v2.6", "xiaomi-mimo"),
    codec=xml_kv_codec("MimoCallCodec", MIMO_SYNTAX),
    default_thinking=True,
    thinking_starts_in_reasoning=False,  # the model writes its own <think>
    template=None,
    reasoning_doc="`<think>…</think>`, on by default",
    calls_doc="`<tool_call><function=NAME><parameter=K>V</parameter></function></tool_call>`, V verbatim",
    tokenizer_doc="",
)

SPECS = (QWEN3_CODER, QWEN35, MIMO)
