"""MiniMax-M2: reasoning from the start until `</think>` (the prompt opens it), and
`<minimax:tool_call><invoke name="F"><parameter name="K">V</parameter></invoke>…` calls."""

from __future__ import annotations

from ..args.xml_kv import XmlKvSyntax, xml_kv_codec
from ..spec import FormatSpec

_END = ("[e~[", "]~b]")

MINIMAX_M2_SYNTAX = XmlKvSyntax(
    call_open="<invoke name=",
    name_close=(">",),
    call_close="</invoke>",
    key_open="<parameter name=",
    key_close=">",
    value_open="",
    value_close="</parameter>",
    trim_newline=True,
    quoted=True,
    structural=("</minimax:tool_call>", *_END),
    openers=("<minimax:tool_call>",),
    closers=("</minimax:tool_call>",),
)

MINIMAX_M2 = FormatSpec(
    name="minimax_m2",
    description="MiniMax-M2 / M2.1 / M2.5 (always thinking; XML invoke calls)",
    aliases=("minimax-m2", "minimax_m2.1", "minimax_m2.5"),
    reasoning_open=("<think>",),
    reasoning_close=("</think>",),
    default_thinking=True,
    thinking_starts_in_reasoning=True,  # the generation prompt ends with `<think>\n`
    call_open=("<minimax:tool_call>",),
    call_close=("</minimax:tool_call>",),
    codec=xml_kv_codec("MiniMaxM2CallCodec", MINIMAX_M2_SYNTAX),
    end=_END,
    template="llama.cpp/models/templates/MiniMax-M2.jinja",
    reasoning_doc="always on: no start tag, `</think>` ends it",
    calls_doc='`<minimax:tool_call><invoke name="F"><parameter name="K">V</parameter></invoke>'
    '</minimax:tool_call>`',
    tokenizer_doc="",  # no MiniMax tokenizer in shared/models
)

SPECS = (MINIMAX_M2,)
