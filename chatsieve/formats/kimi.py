"""Moonshot Kimi K2: `<think>…</think>` reasoning (K2 Thinking) and
`<|tool_calls_section_begin|>` sections of `<|tool_call_begin|>functions.NAME:IDX
<|tool_call_argument_begin|>{json}<|tool_call_end|>` calls, which may sit inside the
reasoning. Calls keep Kimi's own id (`functions.NAME:IDX`).

Neither template opens the reasoning in the prompt (the generation prompt is
`<|im_assistant|>assistant<|im_middle|>`): K2 Thinking writes `<think>` itself and
K2 Instruct never does, so one parser serves both; `kimi_k2_thinking` differs only
in its default (`thinking` on) and the template it names.
"""

from __future__ import annotations

import dataclasses

from ..args.kimi import (
    ARGUMENT_BEGIN,
    CALL_BEGIN,
    CALL_END,
    SECTION_BEGIN,
    SECTION_END,
    KimiCallCodec,
    kimi_call_id,
)
from ..spec import FormatSpec

KIMI_K2 = FormatSpec(
    name="kimi_k2",
    description="Moonshot Kimi K2 / K2 Instruct (calls with native functions.NAME:IDX ids)",
    aliases=("kimi-k2", "kimi", "kimi_k2_instruct", "kimi-k2-instruct"),
    reasoning_open=("<think>",),
    reasoning_close=("</think>",),
    default_thinking=False,
    thinking_starts_in_reasoning=False,
    calls_inside_reasoning=True,
    # a missing section begin: the first call's begin marker opens the section
    call_open=(SECTION_BEGIN, CALL_BEGIN),
    call_close=(SECTION_END,),
    codec=KimiCallCodec,
    inner=(ARGUMENT_BEGIN, CALL_END),
    # `[EOS]`/`[BOS]` are left out on purpose: as text they are too likely to be literal
    # words; in token mode their ids are control tokens this format drops unshown.
    end=("<|im_end|>", "<|im_user|>", "<|im_assistant|>", "<|im_system|>"),
    strip=("<|im_middle|>",),
    call_id=kimi_call_id,
    template="kimi-k2/chat_template.kimi-k2-instruct.jinja",
    reasoning_doc="`<think>…</think>` when the model writes it (off by default); calls may sit inside",
    calls_doc="`<|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>"
    "{json}<|tool_call_end|>…<|tool_calls_section_end|>`, native ids kept",
    tokenizer_doc="kimi-k2",
)

KIMI_K2_THINKING = dataclasses.replace(
    KIMI_K2,
    name="kimi_k2_thinking",
    description="Moonshot Kimi K2 Thinking (as kimi_k2, thinking on by default)",
    aliases=("kimi-k2-thinking",),
    default_thinking=True,
    template="kimi-k2/chat_template.kimi-k2-thinking.jinja",
    reasoning_doc="as `kimi_k2`, on by default",
    calls_doc="as `kimi_k2`",
)

# Kimi K2.5 / K2.6 / K2.7: the same tokens; thinking is always on and the prompt opens it, so
# the output starts in reasoning (a tool-call section also ends it).
KIMI_K25 = dataclasses.replace(
    KIMI_K2_THINKING,
    name="kimi_k25",
    description="Moonshot Kimi K2.5 / K2.6 / K2.7 (as kimi_k2; the output starts in reasoning)",
    aliases=("kimi-k2.5", "kimi_k2.5", "kimi-k2.6", "kimi_k2.6", "kimi-k2.7", "kimi_k2.7", "kimi_k26", "kimi_k27"),
    thinking_starts_in_reasoning=True,
    template=None,
    reasoning_doc="always on: the output starts inside `<think>`; a call section also ends it",
    calls_doc="as `kimi_k2`",
)

SPECS = (KIMI_K2, KIMI_K2_THINKING, KIMI_K25)
