"""Moonshot Kimi K3 ("XTML" channels built from `<|open|>`, `<|close|>`, `<|sep|>`):
reasoning in the think channel (opened by the prompt), the answer in the response
channel (wrappers removed), calls in the tools channel:
`<|open|>call tool="F" index="1"<|sep|><|open|>argument key="K" type="string"<|sep|>V
<|close|>argument<|sep|><|close|>call<|sep|>`."""

from __future__ import annotations

from ..args.kimi_k3 import ARG_CLOSE, ARG_OPEN, CALL_CLOSE, CALL_OPEN, SEP, KimiK3ToolsCodec
from ..spec import FormatSpec

_LONE = ("<|open|>", "<|close|>")  # XTML's halves, never content (a lone `<|sep|>` is a marker)


class LoneXtml:
    """Content filter: removes a lone `<|open|>` / `<|close|>` (one that begins no channel,
    call or argument the lexer knew) and, at the end, a cut-off one, reporting each. Those
    strings are never content; the lexer cannot take them as markers, as they begin longer ones."""

    def __init__(self) -> None:
        self._held = ("", 0)

    @property
    def idle(self) -> bool:
        return not self._held[0]

    def mark(self) -> None:
        pass

    def write(self, text: str, start: int) -> list:
        held, at = self._held
        buf, base = held + text, at if held else start
        out: list = []
        i = k = 0  # emitted up to i; searching from k
        while True:
            j = buf.find("<|", k)
            if j < 0:
                break
            hit = next((m for m in _LONE if buf.startswith(m, j)), None)
            if hit is not None:
                if j > i:
                    out.append((buf[i:j], base + i))
                out.append((hit, base + j, f"{hit} without a channel; removed"))
                i = k = j + len(hit)
                continue
            if any(m.startswith(buf[j:]) for m in _LONE):  # may still become one: hold it
                if j > i:
                    out.append((buf[i:j], base + i))
                self._held = (buf[j:], base + j)
                return out
            k = j + 2
        if i < len(buf):
            out.append((buf[i:], base + i))
        self._held = ("", 0)
        return out

    def finish(self) -> list:
        held, at = self._held
        self._held = ("", 0)
        return [(held, at, f"{held} cut off; removed")] if held else []


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
    content_filter=lambda thinking: LoneXtml(),
    reasoning_doc="`<|open|>think<|sep|>…<|close|>think<|sep|>`, opened by the prompt",
    calls_doc='`<|open|>tools<|sep|><|open|>call tool="F" index="1"<|sep|><|open|>argument key="K" type="T"<|sep|>V<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|>`',
    tokenizer_doc="",  # the K2 tokenizer lacks K3's XTML tokens: text mode
    template="llama.cpp/models/templates/Kimi-K3.jinja",
)

SPECS = (KIMI_K3,)
