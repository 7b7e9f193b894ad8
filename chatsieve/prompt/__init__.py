"""Builds prompts: renders a chat template, tokenizes it, and keeps delimiter ids out of content.

`render_prompt` gives the text and token ids transformers' `apply_chat_template` gives, except
that a delimiter (e.g. `<tool_call>`) spelled inside caller-supplied strings is tokenized as
ordinary sub-word pieces, so the model never reads it as the control token (isolation.py says
precisely how).

The modules, each importing only those listed before it: errors (the exceptions), context (the
template's inputs as plain data), variables (what a request may set), template (resolution,
rendering, probes), gemma4 (Gemma 4's answer-turn fix-ups), isolation, truncation, render
(`render_prompt`, `render_text`; the one that writes in a family's tool prompt, chatsieve.tool_prompt,
which itself uses template), cli (`chatsieve render`).
"""

from .cli import render_main
from .errors import PromptError, PromptTooLong, TemplateVariableError
from .gemma4 import GEMMA4_EMPTY_THOUGHT
from .render import Prompt, load_chat_template, render_prompt, render_text
from .template import thinking_switch
from .variables import BOOLEAN_VARIABLES, check_request_variables, owned_variables

__all__ = [
    "BOOLEAN_VARIABLES",
    "GEMMA4_EMPTY_THOUGHT",
    "Prompt",
    "PromptError",
    "PromptTooLong",
    "TemplateVariableError",
    "check_request_variables",
    "load_chat_template",
    "owned_variables",
    "render_main",
    "render_prompt",
    "render_text",
    "thinking_switch",
]
