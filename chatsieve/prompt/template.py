"""Chat templates: which template a request renders with (a path, a string, the tokenizer's own),
rendering it, and what probes of a template tell (the call shape it wants, its thinking switch)."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..tokenizer import Tokenizer, load_tokenizer
from .errors import PromptError

_PROBE_CALL_ID = "abcDEF123"  # nine alphanumerics: Mistral's templates insist on that shape
# A complete tool definition (description, typed and described parameters): templates index
# these fields without a default (gpt-oss needs `description`), and a probe they refuse decides
# nothing.
_PROBE_TOOLS = [{"type": "function", "function": {
    "name": "probe", "description": "A probe tool.",
    "parameters": {"type": "object", "properties": {"k": {"type": "string", "description": "A key."}},
                   "required": ["k"]}}}]
_PROBE_ARGS = {"k": "v7q"}  # the value shows whether the call's arguments were rendered


@dataclass(frozen=True)
class CallShape:
    """How a template wants an assistant's earlier tool calls handed to it."""

    objects: bool  # arguments as objects (else OpenAI's JSON string)
    null_content: bool  # a call message without text needs content None, not "" (DeepSeek V3, R1)
    renders: bool = True  # False: no shape showed the call's arguments (the template drops calls)



@functools.lru_cache(maxsize=32)
def call_shape(source: str) -> CallShape:
    """Probe a template once for the message shape under which it renders an earlier call.

    Chat templates are written against argument objects (transformers' documented form: they
    `tojson` them, iterate them, or write the family's own syntax from them), and only objects give
    the spelling the model was trained on: chatsieve returns compact JSON, which a template that
    echoes strings would show the model instead of its own `{"k": "v"}`, Gemma 4's
    `{k:<|"|>v<|"|>}`, or gpt-oss' JSON without a second encoding. So a probe call is rendered with
    each form, and strings are kept only where objects do not work: the template fails on an
    object, drops it, or prints it as Python's `{'k': 'v'}` (DeepSeek V3, R1, Mistral). A call
    counts as rendered only when its argument value appears; a template that renders a call only
    when the message's content is null (DeepSeek V3, R1: `content is none`) gets null content.
    If no shape renders the call, strings and "" content, as transformers passes them.
    """
    def probe(args: Any, content: Any) -> str | None:
        messages = [
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": content, "tool_calls": [
                {"id": _PROBE_CALL_ID, "type": "function", "function": {"name": "probe", "arguments": args}}]},
            {"role": "tool", "tool_call_id": _PROBE_CALL_ID, "name": "probe", "content": "r"},
        ]
        try:
            out = render_chat_template(source, messages, _PROBE_TOOLS, None, True, {"bos_token": "", "eos_token": ""})
        except PromptError:
            return None
        return out if _PROBE_ARGS["k"] in out else None

    as_string = json.dumps(_PROBE_ARGS)
    for null in (False, True):
        content = None if null else ""
        as_object = probe(dict(_PROBE_ARGS), content)
        if as_object is not None and repr(_PROBE_ARGS) not in as_object:
            return CallShape(objects=True, null_content=null)
        if probe(as_string, content) is not None:
            return CallShape(objects=False, null_content=null)
    return CallShape(objects=False, null_content=False, renders=False)


def as_tokenizer(tokenizer: Any) -> Tokenizer:
    """`tokenizer` as a chatsieve Tokenizer (one, a `tokenizers` object, or a directory), or PromptError."""
    if isinstance(tokenizer, Tokenizer):
        return tokenizer
    try:
        return load_tokenizer(tokenizer)
    except (TypeError, ValueError, OSError) as e:
        raise PromptError(f"cannot use tokenizer {tokenizer!r}: {e}") from e


def _config_token(value: Any) -> str | None:
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def special_tokens_map(tok: Tokenizer | None) -> dict[str, str]:
    """The tokenizer's bos/eos/unk/pad tokens by name, as transformers passes them to templates."""
    if tok is None:
        return {}
    out = {}
    for name in ("bos_token", "eos_token", "unk_token", "pad_token"):
        value = _config_token(tok.config.get(name))
        if value is not None:
            out[name] = value
    return out


def resolve_template(template: str | Path | None, tok: Tokenizer | None, tools: Any) -> str:
    """The template's source: `template` as a path or a template string, else the tokenizer's own (its
    `tool_use` template when there are tools), or PromptError."""
    if isinstance(template, Path):
        return template.read_text(encoding="utf-8")
    if isinstance(template, str):
        # A string is a file path when it has no Jinja syntax and names a file (or looks like a path).
        if not any(t in template for t in ("{{", "{%", "{#", "\n")) and len(template) < 4096:
            p = Path(template)
            if p.is_file():
                return p.read_text(encoding="utf-8")
            if "/" in template or "\\" in template or p.suffix in (".jinja", ".j2", ".jinja2"):
                raise PromptError(f"chat template file not found: {template}")
        return template
    if template is not None:
        raise PromptError(f"template must be a path or a template string, got {type(template).__name__}")
    if tok is not None:
        named = getattr(tok, "chat_templates", None) or {}
        if tools and "tool_use" in named:
            return named["tool_use"]
        if tok.chat_template:
            return tok.chat_template
    where = f" in {tok.path}" if tok is not None and tok.path else ""
    raise PromptError(f"no chat template found{where}: pass template=PATH or a template string")


def render_chat_template(source: str, messages: list, tools: Any, documents: Any, add_generation_prompt: bool,
                         variables: dict) -> str:
    """The template `source` rendered with `messages`, `tools`, `documents` and `variables` (the
    context transformers' apply_chat_template gives), its failures as PromptError."""
    import jinja2

    from ..jinja_env import render_template

    # The data as it is: the immutable sandbox cannot change it, and a template that needs the
    # mutable one gets fresh copies (render_template), so the renderings after it see the same.
    context = {
        **variables,
        "messages": messages,
        "tools": tools,
        "documents": documents,
        "add_generation_prompt": add_generation_prompt,
    }
    try:
        return render_template(source, context)
    except jinja2.exceptions.TemplateSyntaxError as e:
        raise PromptError(f"chat template has a syntax error (line {e.lineno}): {e.message}") from e
    except jinja2.exceptions.TemplateError as e:
        raise PromptError(f"chat template refused the conversation: {e}") from e
    except (TypeError, AttributeError, KeyError, IndexError, ValueError) as e:
        raise PromptError(f"chat template failed on this conversation: {type(e).__name__}: {e}") from e

def thinking_switch(tokenizer: Any, template: str | Path | None = None, tools: Any = None) -> bool:
    """Whether the chat template reads a thinking switch (`enable_thinking` / `thinking`): its
    generation prompt differs with the switch on and off."""
    tok = as_tokenizer(tokenizer) if tokenizer is not None else None
    return _reads_switch(resolve_template(template, tok, tools))


@functools.lru_cache(maxsize=32)
def _reads_switch(source: str) -> bool:
    user = [{"role": "user", "content": "q"}]
    base = {"bos_token": "", "eos_token": ""}
    try:
        on = render_chat_template(source, user, None, None, True, {**base, "enable_thinking": True, "thinking": True})
        off = render_chat_template(source, user, None, None, True, {**base, "enable_thinking": False, "thinking": False})
    except PromptError:
        return True  # it refused a probe: assume it reads them, as before
    return on != off


def format_spec(format: str):
    """The registered family `format` names (`chatsieve.formats`), or PromptError."""
    from ..formats import registry as formats

    try:
        return formats.get(format)
    except (KeyError, ValueError) as e:
        raise PromptError(str(e.args[0]) if e.args else f"unknown format {format!r}") from e
