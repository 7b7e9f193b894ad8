"""A family's declarative description: its markers, reasoning rules, call codec and
cleaning rules. The shared engine (engine.py) does the rest."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from .args.base import CallContext, RegionCodec, openai_call_id
from .events import Dropped


class ContentFilter(Protocol):
    """A streaming cleaner for content text (e.g. Gemma 4's echoed-thought debris)."""

    # Optional: True while write() would return its text unchanged as one kept piece (lets
    # the parser's fast lane pass content by); a filter without it is always consulted.
    idle: bool

    def mark(self) -> None:
        """A boundary (output start, a removed marker, a call) was just passed."""

    def write(self, text: str, start: int) -> list[tuple[str, int] | tuple[str, int, str] | Dropped]:
        """Return kept (text, start) pieces and dropped (text, start, why) pieces or
        diagnostic events (a `Dropped`, say a `Citation`)."""

    def finish(self) -> list[tuple[str, int] | tuple[str, int, str] | Dropped]:
        """The end of the field's text (content: the output; reasoning: each block)."""


@dataclass(frozen=True)
class ToolPrompt:
    """How a family's documentation tells the model about tools where its chat template does not
    (chatsieve.tool_prompt applies it only to templates that ignore tools or have no tool role).

    `system`: a Jinja template of the tool definitions (`tools`: the request's OpenAI tool
    dicts), appended to the system message (None: the template renders them itself). `result`:
    tool results as one user turn (`results`: [{"name", "content"}]), for templates without a
    tool role. `calls`: the `chatsieve.tool_prompt.write_calls` syntax an earlier call is written
    back in as the message's text, for templates that render no calls. `source`: where the
    family documents this.
    """

    system: str | None
    source: str
    result: str | None = None
    calls: str | None = None


@dataclass(frozen=True)
class FormatSpec:
    name: str
    description: str = ""
    aliases: tuple[str, ...] = ()
    # reasoning
    reasoning_open: tuple[str, ...] = ()
    reasoning_close: tuple[str, ...] = ()
    reasoning_label: str | None = None  # a word that starts each block ("thought"), stripped
    default_thinking: bool = False
    thinking_starts_in_reasoning: bool = False  # thinking on: output begins inside a block
    single_reasoning_block: bool = False  # later blocks lose their markers; text -> content
    calls_inside_reasoning: bool = False  # a call does not end the reasoning block
    # tool calls
    call_open: tuple[str, ...] = ()  # markers that open a call region
    call_close: tuple[str, ...] = ()  # markers that close it
    codec: Callable[[CallContext], RegionCodec] | None = None
    # the call marker the template's generation prompt ends with (Functionary v3.2's `>>>`):
    # without a prompt saying otherwise, the output starts inside that call region
    prompt_opens_call: str | None = None
    inner: tuple[str, ...] = ()  # markers meaningful only inside a call region
    # inner markers that are plain text outside a call region (tags a family gates by a control
    # token only to tell them apart inside a value, like DeepSeek V4's DSML tags)
    literal_outside: tuple[str, ...] = ()
    # plain-text call openings (never gated, so the codec must confirm them):
    text_call_open: tuple[str, ...] = ()  # anywhere in content, e.g. "<function="
    content_call_start: tuple[str, ...] = ()  # only as the first content, e.g. "{", "["
    # the rest
    end: tuple[str, ...] = ()  # end of generation: later text is reported, not shown
    strip: tuple[str, ...] = ()  # removed wherever they appear outside a call
    content_filter: Callable[[bool], ContentFilter | None] | None = None  # given thinking
    reasoning_filter: Callable[[bool], ContentFilter | None] | None = None  # the same for reasoning
    call_id: Callable[[str | None], str] = openai_call_id
    # for the formats table (`chatsieve formats`, docs/formats.md): one line each, Markdown allowed
    reasoning_doc: str = ""  # e.g. "`<think>…</think>`, on by default"
    calls_doc: str = ""  # e.g. "`<tool_call>{\"name\", \"arguments\"}</tool_call>`"
    tokenizer_doc: str = ""  # the real tokenizer its token-mode fixtures use, e.g. "qwen3"
    template: str | None = None  # chat template in the test data (shared/models or llama.cpp/models/), for the formats table
    # more real templates of the family in the test data, whose renderings detection knows
    # (chatsieve.detect_known) besides `template`'s
    templates: tuple[str, ...] = ()
    engine: type | None = None  # an Engine subclass for grammars beyond the shared one
    call_syntax: str | None = None  # chatsieve.grammar's builder that can force its calls
    tool_prompt: ToolPrompt | None = None  # the documented tool prompt, for templates that ignore tools

    @property
    def delimiters(self) -> tuple[str, ...]:
        """Every control string this family's parser recognises, longest first."""
        seen: dict[str, None] = {}
        for group in (
            self.reasoning_open,
            self.reasoning_close,
            self.call_open,
            self.call_close,
            self.inner,
            self.end,
            self.strip,
        ):
            for m in group:
                seen.setdefault(m, None)
        return tuple(sorted(seen, key=len, reverse=True))
