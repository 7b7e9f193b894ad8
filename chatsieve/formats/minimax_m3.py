"""MiniMax-M3: `<mm:think>…</mm:think>` reasoning (a bare leading `</mm:think>` marks a
turn without it) and calls whose every tag is led by the namespace token
`]<]minimax[>[`: `NS<tool_call>NS<invoke name="F">NS<KEY>V NS</KEY>…NS</invoke>NS</tool_call>`."""

from __future__ import annotations

from ..args.minimax_m3 import NS, MiniMaxM3CallCodec
from ..spec import FormatSpec

MINIMAX_M3 = FormatSpec(
    name="minimax_m3",
    description="MiniMax-M3 (<mm:think> reasoning; ]<]minimax[>[-prefixed XML invoke calls)",
    aliases=("minimax-m3", "minimax_m3.0", "mm3"),
    reasoning_open=("<mm:think>",),
    reasoning_close=("</mm:think>",),
    # thinking_mode "enabled": the prompt opens the block (pass thinking=True);
    # "adaptive": the model opens it or writes a bare `</mm:think>`; "disabled": no tags
    default_thinking=False,
    thinking_starts_in_reasoning=True,
    # every tag starts with the namespace token: it opens the region, whose codec reads
    # `<tool_call>` … `</tool_call>` as tags and ends the region itself
    call_open=(NS,),
    codec=MiniMaxM3CallCodec,
    # the turn ends with the template's eos `[e~[`; `]~b]` (its bos) opens the next turn
    end=("[e~[", "]~b]"),
    strip=("</mm:think>",),  # the bare sentinel of a turn without reasoning
    reasoning_doc="`<mm:think>…</mm:think>`; opened by the prompt when thinking_mode=enabled",
    calls_doc='`]<]minimax[>[<tool_call>` + `]<]minimax[>[<invoke name="F">` with `]<]minimax[>[<KEY>V]<]minimax[>[</KEY>` elements',
    tokenizer_doc="",  # no tokenizer of this family in shared/models: text mode
    template="llama.cpp/models/templates/MiniMax-M3.jinja",
)

SPECS = (MINIMAX_M3,)
