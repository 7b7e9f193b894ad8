"""NVIDIA Nemotron: Nano v2 / Super write `<think>` reasoning and
`<TOOLCALL>[{"name", "arguments"}, …]</TOOLCALL>` call lists; Nemotron 3 writes
`<think>` reasoning and Qwen3-Coder's XML calls in `<tool_call>`."""

from __future__ import annotations

import dataclasses

from ..args.dispatch import JsonCallsCodec
from ..spec import FormatSpec
from .qwen3_coder import QWEN3_CODER

# Nano v2's template ends a turn with `<SPECIAL_12>` (its eos; llama.cpp's end token for it) and
# opens the next with `<SPECIAL_11>`; Llama-Nemotron Super ends one with `<|eot_id|>`
_END = ("<SPECIAL_12>", "<SPECIAL_11>", "<|eot_id|>", "<|im_end|>", "<|endoftext|>", "<|im_start|>")

NEMOTRON = FormatSpec(
    name="nemotron",
    description="NVIDIA Nemotron Nano v2 / Super (<think> reasoning; <TOOLCALL> JSON lists)",
    aliases=(
        "nemotron_json",
        "nemotron-json",
        "nemotron_nano_v2",
        "nemotron-nano-v2",
        "nemotron_nano",
        "nemotron_super",
        "nemotron-super",
        "llama_nemotron_json",
    ),
    reasoning_open=("<think>",),
    reasoning_close=("</think>",),
    # reasoning is on unless `/no_think`; the generation prompt then opens `<think>`
    default_thinking=True,
    thinking_starts_in_reasoning=True,
    call_open=("<TOOLCALL>",),
    call_close=("</TOOLCALL>",),
    codec=JsonCallsCodec,
    end=_END,
    # the list codec ends at `]`, so the close tag usually arrives after the region
    strip=("</TOOLCALL>",),
    reasoning_doc="`<think>…</think>`, opened by the prompt, on unless `/no_think`",
    calls_doc='`<TOOLCALL>[{"name", "arguments"}, …]</TOOLCALL>`',
    tokenizer_doc="",  # no tokenizer of this family in shared/models: text mode
    template="llama.cpp/models/templates/NVIDIA-Nemotron-Nano-v2.jinja",
)

NEMOTRON3 = dataclasses.replace(
    QWEN3_CODER,
    name="nemotron3",
    description="NVIDIA Nemotron 3 (thinks by default; Qwen3-Coder XML calls)",
    aliases=("nemotron-3", "nemotron_v3", "nemotron3_nano", "nemotron-3-nano", "nemotron_3"),
    default_thinking=True,  # the generation prompt opens `<think>` unless enable_thinking=False
    thinking_starts_in_reasoning=True,
    reasoning_doc="`<think>…</think>`, opened by the prompt, on by default",
    calls_doc="`<tool_call><function=NAME><parameter=K>V</parameter></function></tool_call>`",
    tokenizer_doc="",  # no tokenizer of this family in shared/models: text mode
    template="llama.cpp/models/templates/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja",
)

SPECS = (NEMOTRON, NEMOTRON3)
