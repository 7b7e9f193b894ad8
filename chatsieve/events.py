"""Event and Message types: what the parser says, and what it accumulates.

Events are small frozen values; `MessageBuilder` folds them into a `Message`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class TokenLogprob:
    """One sampled token's log-probability, with optional alternatives."""

    token_id: int
    token: str
    logprob: float
    top: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True, slots=True)
class Piece:
    """A run of decoded text with the token ids (and logprobs) that produced it.

    `special` marks a piece that is exactly one added/control token, whose text is
    that token's content; such a piece is never merged with or split from others.
    In text mode pieces carry no ids.
    """

    text: str
    token_ids: tuple[int, ...] = ()
    logprobs: tuple[TokenLogprob, ...] | None = None
    special: bool = False


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    text: str
    logprobs: tuple[TokenLogprob, ...] | None = None


@dataclass(frozen=True, slots=True)
class ContentDelta:
    text: str
    logprobs: tuple[TokenLogprob, ...] | None = None


@dataclass(frozen=True, slots=True)
class ToolCallStart:
    index: int
    id: str
    name: str


@dataclass(frozen=True, slots=True)
class ToolCallArgsDelta:
    index: int
    json_text: str


@dataclass(frozen=True, slots=True)
class ToolCallEnd:
    index: int
    incomplete: bool = False


@dataclass(frozen=True, slots=True)
class Dropped:
    """Model output that did not become reasoning, content or a call, and why."""

    raw: str
    why: str


@dataclass(frozen=True, slots=True)
class CitationSource:
    """Results of one earlier tool call that ground a citation: Cohere's
    `0:[1,2]` is tool call 0 (the `tool_call_id` the model was shown), results 1 and 2."""

    tool_call: int
    results: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Citation(Dropped):
    """Citation markup removed from `field` ("content" or "reasoning"); the cited
    `text` stays there. `raw` is the markup with the text, as the model wrote it."""

    field: str = "content"
    text: str = ""
    sources: tuple[CitationSource, ...] = ()


Event = ReasoningDelta | ContentDelta | ToolCallStart | ToolCallArgsDelta | ToolCallEnd | Dropped


def delta_maker(cls: type[ReasoningDelta] | type[ContentDelta]) -> Callable[[str], ReasoningDelta | ContentDelta]:
    """`text -> cls(text)` for the parser's fast lane: the same frozen value, made by
    setting its two slots directly (the frozen dataclass __init__ costs twice as much)."""
    new = object.__new__
    set_text, set_logprobs = cls.text.__set__, cls.logprobs.__set__

    def make(text: str) -> ReasoningDelta | ContentDelta:
        event = new(cls)
        set_text(event, text)
        set_logprobs(event, None)
        return event

    return make


@dataclass(slots=True)
class ToolCall:
    id: str
    name: str
    arguments: str
    incomplete: bool = False


@dataclass(slots=True)
class Message:
    reasoning: str | None = None
    content: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: str | None = None
    diagnostics: list[Dropped] = field(default_factory=list)
    logprobs: list[TokenLogprob] | None = None

    def to_dict(self) -> dict:
        """The CLI's JSON shape: arguments as objects where they parse."""
        calls = []
        for c in self.tool_calls:
            try:
                args = json.loads(c.arguments) if c.arguments else {}
            except (ValueError, RecursionError):  # RecursionError: nested too deep to decode
                args = c.arguments
            item = {"id": c.id, "name": c.name, "arguments": args}
            if c.incomplete:
                item["incomplete"] = True
            calls.append(item)
        return {
            "reasoning": self.reasoning,
            "content": self.content,
            "tool_calls": calls,
            "finish_reason": self.finish_reason,
            "diagnostics": [_diagnostic(d) for d in self.diagnostics],
        }


def _diagnostic(d: Dropped) -> dict:
    item: dict = {"raw": d.raw, "why": d.why}
    if isinstance(d, Citation):
        item["citation"] = {
            "field": d.field,
            "text": d.text,
            "sources": [{"tool_call": c.tool_call, "results": list(c.results)} for c in d.sources],
        }
    return item


class MessageBuilder:
    """Folds events into a Message, in order; the strings are joined only when read."""

    def __init__(self, *, keep_logprobs: bool = True) -> None:
        self._keep_logprobs = keep_logprobs  # False: the events' logprobs are not collected
        self._reasoning: list[str] = []
        self._content: list[str] = []
        self._calls: list[ToolCall] = []
        self._args: list[list[str]] = []
        self._diagnostics: list[Dropped] = []
        self._logprobs: list[TokenLogprob] | None = None
        self.finish_reason: str | None = None

    def parts(self, kind: str) -> list[str]:
        """The list a field's delta texts are appended to ("reasoning" or "content");
        the parser's fast lane appends to it directly, as `apply` would."""
        return self._reasoning if kind == "reasoning" else self._content

    def apply(self, event: Event) -> None:
        if isinstance(event, ContentDelta):
            self._content.append(event.text)
            if event.logprobs:
                self._add_logprobs(event.logprobs)
        elif isinstance(event, ReasoningDelta):
            self._reasoning.append(event.text)
            if event.logprobs:
                self._add_logprobs(event.logprobs)
        elif isinstance(event, ToolCallStart):
            self._calls.append(ToolCall(event.id, event.name, ""))
            self._args.append([])
        elif isinstance(event, ToolCallArgsDelta):
            self._args[event.index].append(event.json_text)
        elif isinstance(event, ToolCallEnd):
            self._calls[event.index].incomplete = event.incomplete
        elif isinstance(event, Dropped):
            self._diagnostics.append(event)

    @property
    def message(self) -> Message:
        calls = [
            ToolCall(c.id, c.name, "".join(a), c.incomplete) for c, a in zip(self._calls, self._args)
        ]
        return Message(
            reasoning="".join(self._reasoning) or None,
            content="".join(self._content) or None,
            tool_calls=calls,
            finish_reason=self.finish_reason,
            diagnostics=list(self._diagnostics),
            logprobs=list(self._logprobs) if self._logprobs is not None else None,
        )

    def _add_logprobs(self, logprobs: tuple[TokenLogprob, ...]) -> None:
        if not self._keep_logprobs:
            return
        if self._logprobs is None:
            self._logprobs = []
        self._logprobs.extend(logprobs)
