"""chatsieve: open-weight LLM output -> OpenAI reasoning_content, content and tool_calls."""

from . import formats
from .events import (
    Citation,
    CitationSource,
    ContentDelta,
    Dropped,
    Event,
    Message,
    Piece,
    ReasoningDelta,
    TokenLogprob,
    ToolCall,
    ToolCallArgsDelta,
    ToolCallEnd,
    ToolCallStart,
)
from .parser import StreamParser, parse

__all__ = [
    "Citation",
    "CitationSource",
    "ContentDelta",
    "Dropped",
    "Event",
    "Message",
    "Piece",
    "ReasoningDelta",
    "StreamParser",
    "TokenLogprob",
    "ToolCall",
    "ToolCallArgsDelta",
    "ToolCallEnd",
    "ToolCallStart",
    "formats",
    "parse",
    "load_tokenizer",
    "Detokenizer",
    "render_prompt",
]


def __getattr__(name: str):
    # heavier pieces load on first use so that `import chatsieve` stays light
    if name == "load_tokenizer":
        from .tokenizer import load_tokenizer

        return load_tokenizer
    if name == "Detokenizer":
        from .detok import Detokenizer

        return Detokenizer
    if name == "render_prompt":
        from .prompt import render_prompt

        return render_prompt
    if name == "PromptError":
        from .prompt import PromptError

        return PromptError
    raise AttributeError(f"module 'chatsieve' has no attribute {name!r}")
