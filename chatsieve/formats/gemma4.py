"""Google Gemma 4: `<|channel>thought\\n…<channel|>` reasoning, `<|tool_call>call:NAME{…}<tool_call|>`
calls with `<|"|>`-quoted strings, and cleaning of echoed thought debris."""

from __future__ import annotations

from ..args.gemma4 import QUOTE, Gemma4CallCodec
from ..spec import FormatSpec

_LABEL = "thought"


class ThoughtDebris:
    """With thinking off, Gemma 4 echoes shards of its thought label (`thought`,
    `thoughtthought`, `tho`) as whole lines where a block would have started. Such
    lines are removed at those boundaries; any other text (`thoughtful`) stays."""

    def __init__(self) -> None:
        self._armed = False
        self._line = ""
        self._line_start = 0

    @property
    def idle(self) -> bool:
        """Not armed: write() passes text through as it is."""
        return not self._armed

    def mark(self) -> None:
        self._armed = True

    def write(self, text: str, start: int) -> list[tuple]:
        out: list[tuple] = []
        i, n = 0, len(text)
        while i < n and self._armed:
            c = text[i]
            if c == "\n":
                if self._line:
                    out.append((self._line + "\n", self._line_start, "echoed thought debris"))
                    self._line = ""
                else:
                    out.append(("\n", start + i))
            elif c == _LABEL[len(self._line) % len(_LABEL)]:
                if not self._line:
                    self._line_start = start + i
                self._line += c
            else:
                self._armed = False
                if self._line:
                    out.append((self._line, self._line_start))
                    self._line = ""
                break
            i += 1
        if i < n:
            out.append((text[i:], start + i))
        return out

    def finish(self) -> list[tuple]:
        line, self._line = self._line, ""
        return [(line, self._line_start, "echoed thought debris")] if line else []


GEMMA4 = FormatSpec(
    name="gemma4",
    description="Google Gemma 4",
    aliases=("gemma-4", "gemma_4"),
    reasoning_open=("<|channel>",),
    reasoning_close=("<channel|>",),
    reasoning_label=_LABEL,
    default_thinking=False,
    single_reasoning_block=True,
    call_open=("<|tool_call>",),
    call_close=("<tool_call|>",),
    codec=Gemma4CallCodec,
    inner=(QUOTE,),
    end=("<turn|>", "<eos>", "<|turn>", "<|tool_response>"),
    strip=("<tool_response|>", "<|tool>", "<tool|>", "<|think|>", "<bos>", "<pad>"),
    content_filter=lambda thinking: None if thinking else ThoughtDebris(),
    template="gemma4/chat_template.jinja",
    reasoning_doc="`<|channel>thought\\n…<channel|>`, off by default",
    calls_doc='`<|tool_call>call:NAME{k:<|"|>v<|"|>}<tool_call|>`',
    tokenizer_doc="gemma4",
)

SPECS = (GEMMA4,)
