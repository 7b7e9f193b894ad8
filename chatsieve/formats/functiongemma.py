"""Google FunctionGemma (Gemma 3 270M): `<start_function_call>call:NAME{k:<escape>v<escape>,
n:1}<end_function_call>` calls -- Gemma 4's call body with `<escape>` as its string
quote -- inside Gemma turns; no reasoning."""

from __future__ import annotations

from ..args.gemma4 import QUOTE, Gemma4CallCodec
from ..spec import FormatSpec

ESCAPE = "<escape>"


class FunctionGemmaCallCodec(Gemma4CallCodec):
    """Gemma 4's codec, reading `<escape>` where Gemma 4 writes `<|"|>`."""

    def marker(self, marker: str) -> bool:
        if marker != ESCAPE:
            return super().marker(marker)
        junk = len(self._junk)
        used = super().marker(QUOTE)
        if len(self._junk) > junk:  # a quote out of place is reported as what it was
            self._junk[-1] = ESCAPE
        return used


FUNCTIONGEMMA = FormatSpec(
    name="functiongemma",
    description="Google FunctionGemma (call:NAME{k:<escape>v<escape>} between function-call markers)",
    aliases=("function_gemma", "function-gemma", "functiongemma-270m"),
    call_open=("<start_function_call>",),
    call_close=("<end_function_call>",),
    codec=FunctionGemmaCallCodec,
    inner=(ESCAPE,),
    end=("<end_of_turn>", "<start_function_response>", "<start_of_turn>", "<eos>"),
    strip=("<end_function_response>", "<bos>", "<pad>"),
    reasoning_doc="none",
    calls_doc="`<start_function_call>call:NAME{k:<escape>v<escape>}<end_function_call>`",
    tokenizer_doc="",  # its function tokens are not in the staged Gemma 3 vocabulary: text mode
    template=None,
)

SPECS = (FUNCTIONGEMMA,)
