"""Tencent Hunyuan-A13B: `<think>…</think>` reasoning, `<answer>…</answer>` around
the content (removed), and `<tool_calls>[{"name", "arguments"}, …]</tool_calls>`
JSON call lists (HY3's XML calls are `hunyuan`)."""

from __future__ import annotations

import dataclasses

from ..args.dispatch import JsonCallsCodec
from .hunyuan import HUNYUAN

HUNYUAN_A13B = dataclasses.replace(
    HUNYUAN,
    name="hunyuan_a13b",
    description="Tencent Hunyuan-A13B (think/answer blocks; <tool_calls> JSON lists)",
    aliases=("hunyuan-a13b", "hunyuan_a13b_instruct", "hunyuan-a13b-instruct"),
    codec=JsonCallsCodec,
    end=("<|eos|>", "<|endoftext|>"),
    strip=("<answer>", "</answer>", "</tool_calls>", "<|startoftext|>", "<|bos|>"),
    reasoning_doc="`<think>…</think>` (the model opens it), content in `<answer>…</answer>`",
    calls_doc='`<tool_calls>[{"name", "arguments"}, …]</tool_calls>`',
    tokenizer_doc="hunyuan",  # its tags are plain text there: only the turn end is gated
    template=None,
)

SPECS = (HUNYUAN_A13B,)
