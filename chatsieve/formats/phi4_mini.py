"""Microsoft Phi-4-mini: a reply that is a call starts with `functools[` and a JSON
list of `{"name", "arguments"}` objects; no reasoning."""

from __future__ import annotations

from ..args.dispatch import prefixed_codec
from ..args.mistral import MistralCallList
from ..spec import FormatSpec

PHI4_MINI = FormatSpec(
    name="phi4_mini",
    description="Microsoft Phi-4-mini (functools[…] JSON call lists; no reasoning)",
    aliases=("phi4_mini_json", "phi-4-mini", "phi4-mini", "phi4mini", "phi_4_mini"),
    # plain text, so only at the start of the reply: `functools[` inside an answer stays text
    text_call_open=("functools[",),
    codec=prefixed_codec("Phi4MiniCallCodec", "functools", MistralCallList),
    end=("<|end|>", "<|endoftext|>", "<|user|>", "<|assistant|>"),
    reasoning_doc="none",
    calls_doc='`functools[{"name", "arguments"}, …]` as the reply\'s start (plain text)',
    tokenizer_doc="",  # no tokenizer of this family in shared/models: text mode
    template=None,
)

SPECS = (PHI4_MINI,)
