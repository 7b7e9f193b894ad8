"""Qwen3 and Hermes-style models: `<think>…</think>` reasoning and
`<tool_call>{"name", "arguments"}</tool_call>` calls."""

from __future__ import annotations

import dataclasses

from ..args.json_call import JsonCallCodec
from ..spec import FormatSpec

QWEN3 = FormatSpec(
    name="qwen3",
    description="Qwen3 (thinking on by default; Qwen2.5/Hermes-style calls)",
    aliases=("qwen-3", "qwen3_thinking"),
    reasoning_open=("<think>",),
    reasoning_close=("</think>",),
    default_thinking=True,
    thinking_starts_in_reasoning=True,
    call_open=("<tool_call>",),
    call_close=("</tool_call>",),
    codec=JsonCallCodec,
    end=("<|im_end|>", "<|endoftext|>", "<|im_start|>", "<tool_response>"),
    strip=("</tool_response>",),
    template="qwen3/chat_template.jinja",
    reasoning_doc="`<think>…</think>`, on by default (the prompt opens it)",
    calls_doc='`<tool_call>{"name", "arguments"}</tool_call>`',
    tokenizer_doc="qwen3",
    call_syntax="tool_call_tags",
)

# Hermes 2 Pro / Qwen2.5: the same wire format, but no thinking unless asked.
HERMES = dataclasses.replace(
    QWEN3,
    name="hermes",
    description="Hermes / Qwen2.5 (as qwen3, thinking off by default)",
    aliases=("qwen25", "qwen2.5", "qwen2_5"),
    default_thinking=False,
    template="llama.cpp/models/templates/Qwen-Qwen2.5-7B-Instruct.jinja",
    reasoning_doc="`<think>…</think>`, off by default",
)

# LG EXAONE 4.0 / 4.5: Hermes calls; `<think>` off unless `enable_thinking`, and then the
# template prefills `<think>`, so the output has only the close.
EXAONE4 = dataclasses.replace(
    QWEN3,
    name="exaone4",
    description="LG EXAONE 4.0 / 4.5 (Hermes calls; thinking off unless enable_thinking)",
    aliases=("exaone-4", "exaone_4", "exaone4.5", "exaone-4.5", "exaone_4_5"),
    default_thinking=False,
    end=("[|endofturn|]", "<|endoftext|>", "[|user|]", "[|tool|]"),
    strip=(),
    template=None,
    reasoning_doc="`<think>…</think>`, off unless `enable_thinking` (then the prompt opens it)",
    tokenizer_doc="",
)

# HCompany Holo2 (Qwen3-VL based): Qwen3's tokens, thinking on unless the kwarg `thinking` is false.
HOLO2 = dataclasses.replace(
    QWEN3,
    name="holo2",
    description="HCompany Holo2 (as qwen3: thinking on by default, switched by `thinking`)",
    aliases=("holo-2", "holo_2", "hcompany-holo2"),
    template=None,
    reasoning_doc="`<think>…</think>`, on by default (the kwarg `thinking` switches it)",
)

SPECS = (QWEN3, HERMES, EXAONE4, HOLO2)
