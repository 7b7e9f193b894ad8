"""Swiss AI Apertus: `<|inner_prefix|>…<|inner_suffix|>` reasoning and
`<|tools_prefix|>[{"NAME": {args}}, …]<|tools_suffix|>` calls (each call an object
keyed by the function's name)."""

from __future__ import annotations

from ..args.apertus import ApertusCallCodec
from ..spec import FormatSpec

APERTUS = FormatSpec(
    name="apertus",
    description="Swiss AI Apertus (inner_prefix reasoning; tools_prefix [{NAME: args}] calls)",
    aliases=("apertus2509", "apertus-2509", "apertus-8b", "apertus-70b", "swiss-ai-apertus"),
    reasoning_open=("<|inner_prefix|>",),
    reasoning_close=("<|inner_suffix|>",),
    default_thinking=False,  # enable_thinking asks for it; the model opens the block
    call_open=("<|tools_prefix|>",),
    call_close=("<|tools_suffix|>",),
    codec=ApertusCallCodec,
    end=("<|assistant_end|>", "<|user_start|>", "<|system_start|>", "<|developer_start|>"),
    strip=("<|tools_suffix|>",),  # the list ends at `]`: the close tag may follow the region
    reasoning_doc="`<|inner_prefix|>…<|inner_suffix|>` (the model opens it)",
    calls_doc='`<|tools_prefix|>[{"NAME": {args}}, …]<|tools_suffix|>`',
    tokenizer_doc="",  # no tokenizer of this family in shared/models: text mode
    template="llama.cpp/models/templates/Apertus-8B-Instruct.jinja",
)

SPECS = (APERTUS,)
