"""Reasoning-only formats: a block between two markers is reasoning, the rest is
content; no tool calls. `think` is the common `<think>…</think>` case, and
`basic_reasoning()` builds the same for any marker pair, to `register()`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from ..spec import FormatSpec


def basic_reasoning(
    name: str,
    open: str | Sequence[str],
    close: str | Sequence[str],
    *,
    default_thinking: bool = False,
    starts_in_reasoning: bool = True,
    aliases: Sequence[str] = (),
    end: Sequence[str] = (),
    strip: Sequence[str] = (),
    description: str = "",
    template: str | None = None,
) -> FormatSpec:
    """A FormatSpec whose reasoning lies between `open` and `close` markers.

    `starts_in_reasoning`: with thinking on, the output begins inside a block (the
    prompt opened it, as DeepSeek R1's does), so it is reasoning until `close`, and
    all reasoning if `close` never comes; an `open` the model writes at the start is
    taken as that block's opener. With thinking off, output is content until `open`.
    A `prompt=` given to the parser overrides both by its last marker. `end` markers
    end the output (later text is reported, not shown); `strip` markers are removed.

        from chatsieve.formats.registry import register
        register(basic_reasoning("seed_think", "<seed:think>", "</seed:think>"))
    """
    opens = (open,) if isinstance(open, str) else tuple(open)
    closes = (close,) if isinstance(close, str) else tuple(close)
    if not opens or not closes or not all(opens) or not all(closes):
        raise ValueError(f"basic_reasoning({name!r}): open and close need at least one non-empty marker each")
    if set(opens) & set(closes):
        raise ValueError(f"basic_reasoning({name!r}): a marker cannot both open and close a block")
    return FormatSpec(
        name=name,
        description=description or f"reasoning between {opens[0]} and {closes[0]}; no tool calls",
        aliases=tuple(aliases),
        reasoning_open=opens,
        reasoning_close=closes,
        default_thinking=default_thinking,
        thinking_starts_in_reasoning=starts_in_reasoning,
        end=tuple(end),
        strip=tuple(strip),
        template=template,
        reasoning_doc=f"`{opens[0]}…{closes[0]}`, {'on' if default_thinking else 'off'} by default",
    )


THINK = basic_reasoning(
    "think",
    "<think>",
    "</think>",
    aliases=("basic", "reasoning"),
    description="generic <think>…</think> reasoning, no tool calls (thinking: the prompt opened the block)",
)
THINK = dataclasses.replace(
    THINK,
    reasoning_doc="`<think>…</think>`; `chatsieve.formats.think.basic_reasoning(...)` makes one with other markers",
    tokenizer_doc="qwen3",  # its fixtures run in token mode with Qwen3's tokenizer
)

SPECS = (THINK,)
