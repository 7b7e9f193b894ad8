"""Sber GigaChat 3: the answer, then `<|message_sep|>` and a function-call message
`function call<|role_sep|>\\n{"name", "arguments"}` (or `<|function_call|>{…}`);
one call per turn, ended by `</s>`."""

from __future__ import annotations

from ..args.json_call import JsonCallCodec
from ..spec import FormatSpec

GIGACHAT3 = FormatSpec(
    name="gigachat3",
    description="Sber GigaChat 3 (a 'function call' message with one JSON call)",
    aliases=("gigachat", "gigachat-3", "gigachat_3", "gigachat3_ultra", "gigachat3-lightning"),
    # the role name is plain text before the role separator
    call_open=("function call<|role_sep|>", "<|function_call|>"),
    codec=JsonCallCodec,
    end=("</s>",),
    strip=("<|message_sep|>",),
    reasoning_doc="none",
    calls_doc='`<|message_sep|>function call<|role_sep|>\\n{"name", "arguments"}` or `<|function_call|>{…}`',
    tokenizer_doc="",  # no tokenizer of this family in shared/models: text mode
    template="llama.cpp/models/templates/GigaChat3-10B-A1.8B.jinja",
)

SPECS = (GIGACHAT3,)
