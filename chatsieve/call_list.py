"""Forced tool calls as a JSON list, for engines that cannot be given a family's own call syntax.

A grammar on vLLM or SGLang cannot name a control token (`<tool_call>`, `<|tool_call>`), so
`tool_choice` required / named is enforced there by a JSON Schema: the reply is
`[{"name": ..., "arguments": {...}}, ...]` (minItems 1; maxItems 1 without parallel calls;
`chatsieve.grammar.call_list_schema`), and `CALL_LIST` parses exactly that reply as the calls.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from .args.mistral import MistralCallList
from .events import ContentDelta, ToolCallArgsDelta, ToolCallEnd, ToolCallStart
from .spec import FormatSpec

__all__ = ["CALL_LIST", "CallListParser"]

# Not registered as a format: the server's parser for a reply constrained by
# `chatsieve.grammar.call_list_schema`.
CALL_LIST = FormatSpec(
    name="json_call_list",
    description="a reply constrained to a JSON list of calls (forced tool_choice on vLLM / SGLang)",
    codec=MistralCallList,
    content_call_start=("[",),
)


class CallListParser:
    """A family's parser whose content is a reply constrained by `grammar.call_list_schema`: reasoning and
    everything else pass through; the content is held and, at the end, handed out as the calls
    it lists (or as the content it was, when it is not a complete list, e.g. cut by max_tokens)."""

    def __init__(self, parser: Any, tools: Sequence[Mapping[str, Any]] | None) -> None:
        self.parser = parser
        self.tools = tools
        self._held: list[str] = []
        self._calls = 0  # calls the family's own parser found

    def __getattr__(self, name: str) -> Any:  # stopped, finish_reason, message, ...
        return getattr(self.parser, name)

    def _take(self, events: list) -> list:
        out = []
        for e in events:
            if isinstance(e, ContentDelta):
                self._held.append(e.text)
                continue
            if isinstance(e, ToolCallStart):
                self._calls = max(self._calls, e.index + 1)
            out.append(e)
        return out

    def feed(self, *args: Any, **kwargs: Any) -> list:
        return self._take(self.parser.feed(*args, **kwargs))

    def finish(self, *args: Any, **kwargs: Any) -> list:
        out = self._take(self.parser.finish(*args, **kwargs))
        text = "".join(self._held)
        if not text:
            return out
        from .parser import StreamParser

        listed = StreamParser(CALL_LIST, tools=self.tools)
        events = listed.feed(text) + listed.finish("stop")
        if not any(isinstance(e, ToolCallStart) for e in events):
            return [*out, ContentDelta(text)]  # not a list of calls: the text as it came
        shift = self._calls
        for e in events:
            if isinstance(e, ToolCallStart | ToolCallArgsDelta | ToolCallEnd):
                out.append(dataclasses.replace(e, index=e.index + shift))
            else:
                out.append(e)
        return out
