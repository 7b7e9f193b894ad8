"""Moonshot Kimi K3 ("XTML" channels built from `<|open|>`, `<|close|>`, `<|sep|>`):
reasoning in the think channel (opened by the prompt), the answer in the response
channel (wrappers removed), calls in the tools channel:
`<|open|>call tool="F" index="1"<|sep|><|open|>argument key="K" type="string"<|sep|>V
<|close|>argument<|sep|><|close|>call<|sep|>`."""

from __future__ import annotations

import re

from ..args.kimi_k3 import ARG_CLOSE, ARG_OPEN, CALL_CLOSE, CALL_OPEN, SEP, KimiK3ToolsCodec
from ..spec import FormatSpec

_LONE = ("<|open|>", "<|close|>")  # XTML's halves, never content (a lone `<|sep|>` is a marker)
# what may follow a half in a tag, as far as it goes: a name, then ` key="value"` attributes (the
# template escapes `"` in a value), cut anywhere; a tag's `<|sep|>` ends it
_HEAD = re.compile(r'(?:[A-Za-z_][\w.:-]*(?: +[\w.:-]+(?:=(?:"[^"<\n]*"?)?)?)* *)?')
_MAX_HEAD = 256  # a longer run is no tag's head


class LoneXtml:
    """Content filter: removes XTML tags the lexer could not take as markers, reporting each.
    A lone `<|open|>` / `<|close|>` (one that begins no channel, call or argument the lexer
    knew: the text after it is no tag's head) is removed; one with a head is removed whole when
    its `<|sep|>` or another marker ends it (out of place), or when the output ends inside it
    (cut off: never half a tag). Those strings are never content; the lexer cannot take them as
    markers, as they begin longer ones. `cut_only` (reasoning, where a call's markers stay the
    text of a thought): only a tag cut off by the end is removed, everything else kept."""

    def __init__(self, *, cut_only: bool = False) -> None:
        self._cut_only = cut_only
        self._held = ("", 0)  # a half's prefix, or a half and the head after it so far
        self._marked = False  # a marker ended the text since the last write

    @property
    def idle(self) -> bool:
        return not self._held[0]

    def mark(self) -> None:
        self._marked = bool(self._held[0])

    def write(self, text: str, start: int) -> list:
        held, at = self._held
        self._held = ("", 0)
        out: list = []
        if self._marked:
            self._marked = False
            hit = next((m for m in _LONE if held.startswith(m)), None)
            if hit is not None:  # a head a marker ended: the tag is out of place
                out += self._tag(held, at, hit, "out of place")
                held = ""
        buf, base = held + text, at if held else start
        i = k = 0  # emitted up to i; searching from k
        while True:
            j = buf.find("<|", k)
            if j < 0:
                break
            hit = next((m for m in _LONE if buf.startswith(m, j)), None)
            if hit is not None:
                h = j + len(hit)
                e = _HEAD.match(buf, h, h + _MAX_HEAD).end()
                if e == len(buf) and e - h < _MAX_HEAD:  # the head may go on: hold the tag
                    if j > i:
                        out.append((buf[i:j], base + i))
                    self._held = (buf[j:], base + j)
                    return out
                if buf.startswith(SEP, e) and e > h:  # a whole tag no marker took
                    end = e + len(SEP)
                    if not self._cut_only:
                        if j > i:
                            out.append((buf[i:j], base + i))
                        out += self._tag(buf[j:end], base + j, hit, "out of place")
                        i = end
                    k = end
                    continue
                if not self._cut_only:
                    if j > i:
                        out.append((buf[i:j], base + i))
                    out.append((hit, base + j, f"{hit} without a channel; removed"))
                    i = h
                k = h
                continue
            if any(m.startswith(buf[j:]) for m in _LONE):  # may still become one: hold it
                if j > i:
                    out.append((buf[i:j], base + i))
                self._held = (buf[j:], base + j)
                return out
            k = j + 2
        if i < len(buf):
            out.append((buf[i:], base + i))
        return out

    def finish(self) -> list:
        held, at = self._held
        self._held = ("", 0)
        self._marked = False
        if not held:
            return []
        hit = next((m for m in _LONE if held.startswith(m)), None)
        if hit is None:  # the start of a half: never content either
            return [(held, at, f"{held} cut off; removed")]
        return self._tag(held, at, hit, "cut off")

    def _tag(self, tag: str, at: int, half: str, why: str) -> list:
        if tag == half:
            return [(tag, at, f"{half} without a channel; removed")]
        if self._cut_only and why != "cut off":
            return [(tag, at)]
        return [(tag, at, f"XTML tag {tag[:60]!r} {why}; removed")]


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
    # outside a tools channel a call's tags reach the content filter as text, which removes them
    # whole, with the attributes after them (`<|open|>call tool="F"`), or cut off by the end
    literal_outside=(CALL_OPEN, CALL_CLOSE, ARG_OPEN, ARG_CLOSE),
    end=(_channel("close", "message"),),
    strip=(_channel("open", "response"), _channel("close", "response")),
    content_filter=lambda thinking: LoneXtml(),
    reasoning_filter=lambda thinking: LoneXtml(cut_only=True),
    reasoning_doc="`<|open|>think<|sep|>…<|close|>think<|sep|>`, opened by the prompt",
    calls_doc='`<|open|>tools<|sep|><|open|>call tool="F" index="1"<|sep|><|open|>argument key="K" type="T"<|sep|>V<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|>`',
    tokenizer_doc="",  # the K2 tokenizer lacks K3's XTML tokens: text mode
    template="llama.cpp/models/templates/Kimi-K3.jinja",
)

SPECS = (KIMI_K3,)
