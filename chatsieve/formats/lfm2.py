"""Liquid LFM2 / LFM2.5: `<think>` reasoning (thinking models) and
`<|tool_call_start|>[f(a=1), g()]<|tool_call_end|>` pythonic call lists (a JSON list
`[{"name", "arguments"}]` between the same markers is read too)."""

from __future__ import annotations

from ..args.dispatch import JsonOrPythonicCodec
from ..spec import FormatSpec

LFM2 = FormatSpec(
    name="lfm2",
    description="Liquid LFM2 / LFM2.5 (pythonic call lists between <|tool_call_start|> markers)",
    aliases=("lfm2.5", "lfm-2", "lfm2_5", "lfm", "liquid_lfm2"),
    reasoning_open=("<think>",),
    reasoning_close=("</think>",),
    default_thinking=False,  # the thinking models write their own `<think>`
    call_open=("<|tool_call_start|>",),
    call_close=("<|tool_call_end|>",),
    codec=JsonOrPythonicCodec,
    end=("<|im_end|>", "<|endoftext|>", "<|im_start|>", "<|tool_response_start|>"),
    strip=("<|tool_call_end|>", "<|tool_response_end|>", "<|startoftext|>"),
    reasoning_doc="`<think>…</think>` when the model writes it",
    calls_doc="`<|tool_call_start|>[f(a=1), g()]<|tool_call_end|>` (or a JSON list)",
    tokenizer_doc="",  # no tokenizer of this family in shared/models: text mode
    template="llama.cpp/models/templates/LFM2.5-8B-A1B.jinja",
    # these two render no call (the model writes its calls in the content): detection knows them whole
    templates=("llama.cpp/models/templates/LFM2-8B-A1B.jinja", "llama.cpp/models/templates/LFM2.5-Instruct.jinja"),
)

SPECS = (LFM2,)
