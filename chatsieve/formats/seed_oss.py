"""ByteDance Seed-OSS: `<seed:think>…</seed:think>` reasoning (with the model's own
`<seed:cot_budget_reflect>` notes inside, kept as reasoning) and
`<seed:tool_call><function=NAME><parameter=K>V</parameter></function></seed:tool_call>`
calls: Qwen3-Coder's XML body inside Seed's own call tags."""

from __future__ import annotations

import dataclasses

from ..args.xml_kv import xml_kv_codec
from ..spec import FormatSpec
from .qwen3_coder import QWEN3_CODER_SYNTAX

_END = ("<seed:eos>", "<seed:bos>")

SEED_OSS_SYNTAX = dataclasses.replace(
    QWEN3_CODER_SYNTAX,
    structural=("</seed:tool_call>", *_END),
    openers=("<seed:tool_call>",),
    closers=("</seed:tool_call>",),
)

SEED_OSS = FormatSpec(
    name="seed_oss",
    description="ByteDance Seed-OSS (thinks by default; Qwen3-Coder XML calls in <seed:tool_call>)",
    aliases=("seed-oss", "seed_oss_36b", "seed-oss-36b", "seedoss"),
    reasoning_open=("<seed:think>",),
    reasoning_close=("</seed:think>",),
    # the generation prompt is `<seed:bos>assistant\n`: the model opens the block itself
    default_thinking=True,
    call_open=("<seed:tool_call>",),
    call_close=("</seed:tool_call>",),
    codec=xml_kv_codec("SeedOssCallCodec", SEED_OSS_SYNTAX),
    end=_END,
    reasoning_doc="`<seed:think>…</seed:think>` (the model opens it; budget notes stay reasoning)",
    calls_doc="`<seed:tool_call><function=NAME><parameter=K>V</parameter></function></seed:tool_call>`",
    tokenizer_doc="",  # no tokenizer of this family in shared/models: text mode
    template="llama.cpp/models/templates/ByteDance-Seed-OSS.jinja",
)

SPECS = (SEED_OSS,)
