"""Moonshot Kimi-VL Thinking: reasoning between `◁think▷` and `◁/think▷`; no tool
calls."""

from __future__ import annotations

import dataclasses

from .think import basic_reasoning

KIMI_VL = dataclasses.replace(
    basic_reasoning(
        "kimi_vl",
        "◁think▷",
        "◁/think▷",
        aliases=("kimi-vl", "kimi_vl_thinking", "kimi-vl-thinking", "kimi_vl_a3b_thinking"),
        default_thinking=True,
        starts_in_reasoning=False,  # the model writes `◁think▷` itself
        end=("<|im_end|>",),
        description="Moonshot Kimi-VL Thinking (◁think▷…◁/think▷ reasoning; no tool calls)",
    ),
    reasoning_doc="`◁think▷…◁/think▷` (the model opens it)",
    calls_doc="none",
    tokenizer_doc="",  # no tokenizer of this family in shared/models: text mode
)

SPECS = (KIMI_VL,)
