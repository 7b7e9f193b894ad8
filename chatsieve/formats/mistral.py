"""Mistral family (Mistral 7B v0.3, Nemo, Small 3.x, Magistral, Ministral 3, Devstral):
`[THINK]…[/THINK]` reasoning and `[TOOL_CALLS]` calls, JSON-array and v11+ styles."""

from __future__ import annotations

from ..args.mistral import ARGS, CALL_ID, MistralCallCodec, mistral_call_id
from ..spec import FormatSpec

MISTRAL = FormatSpec(
    name="mistral",
    description="Mistral ([TOOL_CALLS] JSON list before v11, NAME[ARGS]{…} from v11; [THINK] reasoning)",
    aliases=("mistral-v11", "mistral_v11", "magistral", "ministral", "devstral"),
    reasoning_open=("[THINK]",),
    reasoning_close=("[/THINK]",),
    # Magistral / Ministral reasoning models open [THINK] themselves (their template's
    # default system prompt asks them to); the generation prompt never does.
    default_thinking=False,
    # With thinking on, text before the first [/THINK] is reasoning even when the
    # model (or an engine skipping control tokens) left out the [THINK] opener, as for
    # the other families; a [THINK] the model writes first just opens that block.
    thinking_starts_in_reasoning=True,
    call_open=("[TOOL_CALLS]",),
    codec=MistralCallCodec,
    inner=(ARGS, CALL_ID),
    end=("</s>", "[INST]", "[TOOL_RESULTS]", "[SYSTEM_PROMPT]", "[AVAILABLE_TOOLS]"),
    strip=("[/INST]", "[/TOOL_RESULTS]", "[TOOL_CONTENT]", "[/SYSTEM_PROMPT]", "[/AVAILABLE_TOOLS]"),
    call_id=mistral_call_id,
    template="mistral/chat_template.ministral-3-reasoning-2512.jinja",
)

SPECS = (MISTRAL,)
