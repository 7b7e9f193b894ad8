"""Meituan LongCat-Flash: `<longcat_think>…</longcat_think>` reasoning (Thinking
models) and `<longcat_tool_call>{"name", "arguments"}</longcat_tool_call>` calls."""

from __future__ import annotations

from ..args.json_call import JsonCallCodec
from ..spec import FormatSpec

LONGCAT = FormatSpec(
    name="longcat",
    description="Meituan LongCat-Flash (<longcat_think> reasoning; <longcat_tool_call> JSON calls)",
    aliases=(
        "longcat_flash",
        "longcat-flash",
        "longcat-flash-chat",
        "longcat-flash-thinking",
        "longcat_flash_thinking",
    ),
    reasoning_open=("<longcat_think>",),
    reasoning_close=("</longcat_think>",),
    default_thinking=False,  # the Thinking models open the block themselves
    call_open=("<longcat_tool_call>",),
    call_close=("</longcat_tool_call>",),
    codec=JsonCallCodec,
    reasoning_doc="`<longcat_think>…</longcat_think>` (the model opens it)",
    calls_doc='`<longcat_tool_call>{"name", "arguments"}</longcat_tool_call>`',
    tokenizer_doc="",  # no tokenizer of this family in shared/models: text mode
    template=None,
)

SPECS = (LONGCAT,)
