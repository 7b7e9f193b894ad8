"""MeetKai Functionary v3.1 (Llama 3.1 based): `<function=NAME>{json}</function>` calls;
Functionary v3.2: messages addressed by `>>>RECIPIENT\\n`, where `all` is the visible
answer and any other recipient is a function called with the JSON object that follows."""

from __future__ import annotations

from ..args.dispatch import prefixed_codec
from ..args.named_json import NamedJsonCodec
from ..spec import FormatSpec

_END = ("<|eot_id|>", "<|eom_id|>", "<|end_of_text|>", "<|start_header_id|>")
_STRIP = ("<|begin_of_text|>", "<|end_header_id|>")


class _V31Call(NamedJsonCodec):
    terminator = ">"


class FunctionaryV32Codec(NamedJsonCodec):
    """`RECIPIENT\\n`: `all` hands the rest back as content; a function name is a
    call whose JSON arguments follow."""

    terminator = "\n"
    content_name = "all"
    strict_name = True


FUNCTIONARY_V31 = FormatSpec(
    name="functionary_v31",
    description="MeetKai Functionary v3.1 (<function=NAME>{json}</function> calls, Llama 3.1 based)",
    aliases=(
        "functionary-v3.1",
        "functionary_v3.1",
        "functionary_v3_1",
        "functionary-v3-llama-3.1",
        "meetkai-functionary-v3.1",
    ),
    # plain text, so only where the reply starts: an echoed `<function=` inside an answer stays text
    text_call_open=("<function=",),
    call_close=("</function>",),
    codec=prefixed_codec("FunctionaryV31Codec", "<function=", _V31Call),
    end=_END,
    strip=_STRIP,
    reasoning_doc="none",
    calls_doc="`<function=NAME>{json}</function>` (plain text, at the reply's start)",
    tokenizer_doc="llama3",  # its Llama 3.1 base; tags are plain text, turn ends gated
    template="llama.cpp/models/templates/meetkai-functionary-medium-v3.1.jinja",
)

FUNCTIONARY_V32 = FormatSpec(
    name="functionary_v32",
    description="MeetKai Functionary v3.2 (>>>all content, >>>NAME\\n{json} calls)",
    aliases=(
        "functionary",
        "functionary-v3.2",
        "functionary_v3.2",
        "functionary_v3_2",
        "meetkai-functionary-v3.2",
    ),
    call_open=(">>>",),
    codec=FunctionaryV32Codec,
    prompt_opens_call=">>>",  # the template's generation prompt ends with `>>>`
    end=_END,
    strip=_STRIP,
    reasoning_doc="none",
    calls_doc="`>>>NAME\\n{json}`; `>>>all\\n` starts visible text",
    tokenizer_doc="llama3",  # its Llama 3.1 base; tags are plain text, turn ends gated
    template="llama.cpp/models/templates/meetkai-functionary-medium-v3.2.jinja",
)

SPECS = (FUNCTIONARY_V31, FUNCTIONARY_V32)
