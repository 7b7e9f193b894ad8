"""ServiceNow Apriel 1.5 / 1.6 Thinker: reasoning from the start ("Here are my
reasoning steps:") until `[BEGIN FINAL RESPONSE]`, the answer up to `[END FINAL
RESPONSE]`, and `<tool_calls>[{"name", "arguments"}, …]</tool_calls>` call lists."""

from __future__ import annotations

from ..args.dispatch import JsonCallsCodec
from ..spec import FormatSpec

APRIEL = FormatSpec(
    name="apriel",
    description="ServiceNow Apriel 1.5 / 1.6 Thinker (reasoning until [BEGIN FINAL RESPONSE]; <tool_calls> JSON lists)",
    aliases=("apriel-1.5", "apriel_1.5", "apriel-1.6", "apriel_1.6", "apriel_thinker", "apriel-thinker"),
    # the header is plain text; 1.6's generation prompt writes it, 1.5's model does
    reasoning_open=("Here are my reasoning steps:",),
    reasoning_close=("[BEGIN FINAL RESPONSE]",),
    default_thinking=True,
    thinking_starts_in_reasoning=True,
    call_open=("<tool_calls>",),
    call_close=("</tool_calls>",),
    codec=JsonCallsCodec,
    end=("<|end|>", "<|endoftext|>", "<|begin_user|>", "<|begin_assistant|>"),
    strip=("[END FINAL RESPONSE]", "</tool_calls>"),
    reasoning_doc="from the start (`Here are my reasoning steps:`) to `[BEGIN FINAL RESPONSE]`; plain-text markers",
    calls_doc='`<tool_calls>[{"name", "arguments"}, …]</tool_calls>`',
    tokenizer_doc="",  # no tokenizer of this family in shared/models: text mode
    template="llama.cpp/models/templates/Apriel-1.6-15b-Thinker-fixed.jinja",
)

SPECS = (APRIEL,)
