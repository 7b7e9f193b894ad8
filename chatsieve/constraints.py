"""What the engine must enforce for one request (`plan`): a forced call for `tool_choice`
`required` or a named function, the response_format's JSON (after any reasoning), or the `strict`
tools' arguments once a call opens. The pieces live where they are built: grammar.py (calls and
JSON, as GBNF or JSON Schema) and strict_tools.py (structural tags and lazy grammars, which build
on grammar.py); this module chooses among them and is imported by the request's preparation."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .formats.registry import get as get_format
from .grammar import (
    Constraint,
    calls_or_answer,
    forced_calls,
    json_after_reasoning,
    response_format_constraint,
)
from .spec import FormatSpec
from .strict_tools import strict_constraint


def plan(
    format: str | FormatSpec,
    *,
    engine: str,
    tools: Sequence[Mapping[str, Any]] | None,
    tool_choice: str,
    response_format: Mapping[str, Any] | None,
    token_id: Callable[[str], int | None] | None,
    parallel: bool = True,
    thinking: bool | None = None,
    strict: Sequence[str] = (),
    aliases: Sequence[tuple[str, str]] = (),
) -> Constraint | None:
    """The engine constraint for one request: a forced call for tool_choice `required` or a named
    function (`tools` already narrowed to it), else the response_format's JSON, else (`auto`) the
    `strict` tools' arguments held to their schemas once a call opens (strict_tools.py), else None."""
    if tool_choice in ("required", "function") and tools:
        return forced_calls(format, engine=engine, tools=tools, token_id=token_id,
                            parallel=parallel and tool_choice != "function", thinking=thinking)
    constraint = response_format_constraint(response_format)
    if constraint is None:
        if tools and tool_choice == "auto" and strict:
            return strict_constraint(get_format(format), engine=engine, tools=tools, strict=strict,
                                     parallel=parallel, token_id=token_id, aliases=aliases)
        return None
    if tools and tool_choice == "auto":
        return calls_or_answer(format, engine=engine, tools=tools, token_id=token_id, parallel=parallel,
                               thinking=thinking, answer=constraint)
    return json_after_reasoning(get_format(format), constraint, engine=engine, thinking=thinking, token_id=token_id)
