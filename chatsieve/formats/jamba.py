"""AI21 Jamba 1.5 / 1.6 / 1.7: `<tool_calls>[{"name", "arguments"}, …]</tool_calls>`
call lists; no reasoning."""

from __future__ import annotations

from ..args.dispatch import JsonCallsCodec
from ..spec import FormatSpec

JAMBA = FormatSpec(
    name="jamba",
    description="AI21 Jamba (<tool_calls> JSON lists; no reasoning)",
    aliases=("jamba-1.5", "jamba_1.5", "jamba-1.6", "jamba-1.7", "ai21_jamba"),
    call_open=("<tool_calls>",),
    call_close=("</tool_calls>",),
    codec=JsonCallsCodec,
    end=("<|eom|>", "<|eos|>", "<|endoftext|>", "<|bom|>"),
    strip=("</tool_calls>",),  # the list codec ends at `]`: the close tag may follow the region
    reasoning_doc="none",
    calls_doc='`<tool_calls>[{"name", "arguments"}, …]</tool_calls>`',
    tokenizer_doc="",  # no tokenizer of this family in shared/models: text mode
    template=None,
)

SPECS = (JAMBA,)
