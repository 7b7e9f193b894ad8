"""Moonshot Kimi K3 ("XTML" channels built from `<|open|>`, `<|close|>`, `<|sep|>`):
reasoning in the think channel (opened by the prompt), the answer in the response
channel (wrappers removed), calls in the tools channel:
`<|open|>call tool="F" index="1"<|sep|><|open|>argument key="K" type="string"<|sep|>V
<|close|>argument<|sep|><|close|>call<|sep|>`."""

from __future__ import annotations

from ..args.kimi_k3 import ARG_CLOSE, ARG_OPEN, CALL_CLOSE, CALL_OPEN, SEP, KimiK3ToolsCodec
from ..spec import FormatSpec


def _channel(kind: str, name: str) -> str:
    return f"<|{kind}|>{name}{SEP}"


KIMI_K3 = FormatSpec(
    name="kimi_k3",
    description="Moonshot Kimi K3 (XTML think/response/tools channels)",
    aliases=("kimi-k3", "kimik3", "kimi_k3_thinking"),
    reasoning_open=(_channel("open", "think"),),
    reasoning_close=(_channel("close", "think"),),
    default_thinking=True,  # the template pre-opens the think channel
    thinking_starts_in_reasoning=True,
    call_open=(_channel("open", "tools"),),
    call_close=(_channel("close", "tools"),),
    codec=KimiK3ToolsCodec,
    inner=(SEP, CALL_OPEN, CALL_CLOSE, ARG_OPEN, ARG_CLOSE),
    end=(_channel("close", "message"),),
    strip=(_channel("open", "response"), _channel("close", "response")),
    reasoning_doc="`<|open|>think<|sep|>…<|close|>think<|sep|>`, opened by the prompt",
    calls_doc='`<|open|>tools<|sep|><|open|>call tool="F" index="1"<|sep|><|open|>argument key="K" type="T"<|sep|>V<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|>`',
    tokenizer_doc="",  # the K2 tokenizer lacks K3's XTML tokens: text mode
    template="llama.cpp/models/templates/Kimi-K3.jinja",
)

SPECS = (KIMI_K3,)
