"""AllenAI OLMo 3: `<function_calls>` blocks of newline-separated pythonic calls
(`f(a=1)\\ng(b="x")`, JSON literals true/false/null allowed), and `<think>…</think>`
reasoning whose tags are plain text in OLMo's vocabulary."""

from __future__ import annotations

from ..args.dispatch import repeated_codec
from ..args.pythonic import PythonicCallCodec
from ..spec import FormatSpec

OLMO3 = FormatSpec(
    name="olmo3",
    description="AllenAI OLMo 3 (<function_calls> newline-separated pythonic calls; plain-text <think>)",
    aliases=("olmo-3", "olmo_3", "olmo3_think", "olmo-3-think", "olmo3_instruct"),
    reasoning_open=("<think>",),
    reasoning_close=("</think>",),
    default_thinking=False,  # OLMo 3 Think: pass thinking=True (its prompt opens the block)
    thinking_starts_in_reasoning=True,
    call_open=("<function_calls>",),
    call_close=("</function_calls>",),
    codec=repeated_codec("Olmo3CallCodec", PythonicCallCodec),
    end=("<|im_end|>", "<|endoftext|>", "<|im_start|>"),
    reasoning_doc="`<think>…</think>` as plain text (OLMo 3 Think: opened by the prompt)",
    calls_doc="`<function_calls>\\nf(a=1)\\ng(b=2)\\n</function_calls>`",
    tokenizer_doc="",  # no tokenizer of this family in shared/models: text mode
    template=None,
)

SPECS = (OLMO3,)
