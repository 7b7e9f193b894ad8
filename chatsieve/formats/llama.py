"""Meta Llama: Llama 3.x JSON calls (`<|python_tag|>` or a bare `{"name", "parameters"}`
first, `;` between calls) and Llama 4's pythonic call lists (`[f(a=1), g()]`)."""

from __future__ import annotations

from ..args.llama3 import Llama3JsonCodec
from ..args.pythonic import PythonicCallCodec
from ..spec import FormatSpec

LLAMA3_JSON = FormatSpec(
    name="llama3_json",
    description="Llama 3.1 / 3.2 / 3.3 JSON tool calls",
    aliases=("llama3", "llama-3", "llama3.1", "llama3.2", "llama3.3", "llama-3.1", "llama-3.2", "llama-3.3"),
    call_open=("<|python_tag|>",),
    codec=Llama3JsonCodec,
    # A reply that starts with `{` may be a call without the tag: a call only when
    # the object names a tool of the request, else it stays content.
    content_call_start=("{",),
    end=("<|eot_id|>", "<|eom_id|>", "<|end_of_text|>", "<|start_header_id|>"),
    strip=("<|begin_of_text|>", "<|end_header_id|>", "<|finetune_right_pad_id|>"),
    template="llama3/chat_template.llama-3.2.jinja",
    calls_doc='optional `<|python_tag|>`, `{"name", "parameters"}` objects joined by `;`; a bare `{` '
    "reply is a call only for a known tool",
    tokenizer_doc="llama3",
    call_syntax="llama3_json",
)

PYTHONIC = FormatSpec(
    name="pythonic",
    description="Pythonic call lists (Llama 4, Llama 3.2 pythonic)",
    aliases=("llama4", "llama-4", "llama4_pythonic"),
    call_open=("<|python_start|>",),
    call_close=("<|python_end|>",),
    codec=PythonicCallCodec,
    # A reply that starts with `[` may be a call list: a call only when its first
    # call names a tool of the request, else it stays content.
    content_call_start=("[",),
    end=(
        *("<|eot|>", "<|eom|>", "<|end_of_text|>", "<|header_start|>"),  # Llama 4
        *("<|eot_id|>", "<|eom_id|>", "<|start_header_id|>"),  # Llama 3.2, pythonic too
    ),
    strip=("<|python_end|>", "<|begin_of_text|>", "<|header_end|>", "<|end_header_id|>"),
    template=None,  # no Llama 4 template in shared/models
    calls_doc="`[f(a=1, b='x'), g()]`, optionally in `<|python_start|>…<|python_end|>`; literals to "
    "JSON, never `eval`",
    tokenizer_doc="llama4",
    call_syntax="pythonic",
)

SPECS = (LLAMA3_JSON, PYTHONIC)
