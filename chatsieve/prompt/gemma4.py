"""Gemma 4's answer-turn fix-ups: its template closes a model turn it opens no other for (after
tool results with text), and ends a thinking-off generation prompt with an empty thought channel."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from .template import format_spec

# The Gemma 4 template ends a thinking-off generation prompt with this empty thought channel.
GEMMA4_EMPTY_THOUGHT = "<|channel>thought\n<channel|>"
_GEMMA4_NAMES = frozenset({"gemma4", "gemma-4", "gemma_4"})


def _is_gemma4(format: str | None) -> bool:
    return format is not None and (format.lower() in _GEMMA4_NAMES or format_spec(format).name in _GEMMA4_NAMES)


# Gemma 4's template opens no model turn after tool results (the model answers inside its own
# turn, after `<tool_response|>`), but when the call message also had text it writes that text
# after the results and closes the turn: the prompt then ends here, with no turn to answer in.
_GEMMA4_TURN_END = "<turn|>\n"
_GEMMA4_MODEL_TURN = "<|turn>model\n"


def _gemma4_answer_turn(text: str, format: str | None, add_generation_prompt: bool,
                        variables: Mapping[str, Any]) -> str:
    """Open the model's turn where Gemma 4's template closed one and opened none: what the template
    itself writes after any closed turn (`<|turn>model\n`, and the empty thought channel unless
    thinking is on)."""
    if not add_generation_prompt or not text.endswith(_GEMMA4_TURN_END) or not _is_gemma4(format):
        return text
    return text + _GEMMA4_MODEL_TURN + ("" if variables.get("enable_thinking") else GEMMA4_EMPTY_THOUGHT)


# A model turn the template goes on with after it closed the turn (a call message with text: the
# text after the results, then `<turn|>`), without opening another
_GEMMA4_CONTINUED = re.compile(re.escape(_GEMMA4_TURN_END) + r"(?!<\|turn>|$)")


def _gemma4_reopened_turns(text: str, format: str | None) -> str:
    """Where Gemma 4's template goes on with a model turn it closed, the turn is opened again as
    the generation prompt opened it (`_gemma4_answer_turn`): the history reads as the model saw
    it, and each step's prompt starts with the one before."""
    if not _is_gemma4(format) or _GEMMA4_TURN_END not in text:
        return text
    return _GEMMA4_CONTINUED.sub(_GEMMA4_TURN_END + _GEMMA4_MODEL_TURN, text)


def fix_answer_turn(text: str, format: str | None, add_generation_prompt: bool,
                    keep_empty_thinking: bool, variables: Mapping[str, Any]) -> str:
    """Gemma 4's rendering `text` with its turns fixed up: a continued model turn reopened, the
    answer turn opened, and the trailing empty thought channel of a thinking-off generation prompt
    dropped unless `keep_empty_thinking`. Other families' text is returned as it is."""
    text = _gemma4_reopened_turns(text, format)
    text = _gemma4_answer_turn(text, format, add_generation_prompt, variables)
    if (keep_empty_thinking or not add_generation_prompt or variables.get("enable_thinking")
            or not _is_gemma4(format) or not text.endswith(GEMMA4_EMPTY_THOUGHT)):
        return text
    return text[: -len(GEMMA4_EMPTY_THOUGHT)]
