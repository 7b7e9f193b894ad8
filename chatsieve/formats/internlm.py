"""InternLM2 / InternLM2.5 and Intern-S1: `<|action_start|><|plugin|>\n{"name",
"parameters"}<|action_end|>` calls (one JSON object each); Intern-S1 also thinks
in `<think>…</think>`."""

from __future__ import annotations

import dataclasses

from ..args.json_call import JsonCallCodec
from ..spec import FormatSpec

PLUGIN = "<|plugin|>"


class InternLMActionCodec(JsonCallCodec):
    """A JSON call object after the action's `<|plugin|>` tag."""

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._plugin = False

    def marker(self, marker: str) -> bool:
        if marker == PLUGIN and not self._plugin and self.idle:
            self._plugin = True
            return True
        return super().marker(marker)


INTERNLM2 = FormatSpec(
    name="internlm2",
    description="InternLM2 / InternLM2.5 (<|action_start|><|plugin|> JSON calls; no reasoning)",
    aliases=("internlm", "internlm2.5", "internlm2_5", "internlm-2", "internlm3"),
    call_open=("<|action_start|>",),
    call_close=("<|action_end|>",),
    codec=InternLMActionCodec,
    inner=(PLUGIN,),
    end=("<|im_end|>", "<|im_start|>", "</s>"),
    strip=("<|action_end|>",),
    reasoning_doc="none",
    calls_doc='`<|action_start|><|plugin|>{"name", "parameters"}<|action_end|>`',
    tokenizer_doc="",  # no tokenizer of this family in shared/models: text mode
    template=None,
)

INTERN_S1 = dataclasses.replace(
    INTERNLM2,
    name="intern_s1",
    description="Intern-S1 (<think> reasoning; <|action_start|><|plugin|> JSON calls)",
    aliases=("intern-s1", "interns1", "intern_s1_mini", "intern-s1-mini", "intern-s1-pro"),
    reasoning_open=("<think>",),
    reasoning_close=("</think>",),
    default_thinking=True,  # the model opens its own `<think>`
    reasoning_doc="`<think>…</think>` (the model opens it)",
)

SPECS = (INTERNLM2, INTERN_S1)
