"""Builds prompts: renders a chat template, tokenizes it, and keeps delimiter ids out of content.

`render_prompt` gives the text and token ids transformers' `apply_chat_template` gives, except
that a delimiter (e.g. `<tool_call>`) spelled inside caller-supplied strings is tokenized as
ordinary sub-word pieces, so the model never reads it as the control token.

Isolation, precisely:

* Scope: every string the caller supplies in `messages` (content, text parts, reasoning, tool
  results, tool-call arguments, names), `tools`, `documents` and `request_variables` (template
  variables from a request, at any depth), dict keys included (a tool schema's property names
  come from third parties too) -- but not the trusted template keywords (`enable_thinking=...`
  passed by the program itself). The template's own text keeps its ids. Request variables may
  not name a variable the renderer or the tokenizer owns (`bos_token`, `add_generation_prompt`,
  the template helpers, ...), and the switches in `BOOLEAN_VARIABLES` must be booleans
  (`TemplateVariableError`).
* Delimiters: `markers` if given (exactly those); else the format's `delimiters`
  (`chatsieve.formats`) plus every control token of the tokenizer: each added token except
  whitespace runs (Gemma's "▁▁") and non-special HTML tags (Gemma's `<table>`, `<b>`), which
  ordinary text is meant to produce. Only delimiters that are added tokens can become a single
  id, so only those are isolated (a delimiter string that merely *contains* an added token
  isolates that token). Each must encode to exactly its id, or the prompt is refused.
* Method: the prompt is rendered twice, once as given and once with every delimiter occurrence in
  those strings wrapped in private-use marker characters (never present in the input or the
  template: a forged marker makes another one be chosen; if the markers do not survive the
  template -- Python's repr, as Apriel's `tool|string`, escapes private-use characters -- once
  more with printable ones, Yi syllables, which repr keeps). Removing the markers from the second
  rendering must give the first -- exactly, or up to whitespace only (a marker beside a delimiter
  can stop a template's `strip()`; the non-whitespace characters are then matched one to one);
  otherwise the template reacted to the markers (e.g. `content.startswith('<tool_call>')`) and
  `PromptError` is raised (fail closed). A delimiter the template itself cut out of a string
  (Qwen3 splitting assistant content at `</think>`) leaves lone markers that mark nothing.
  The rendering is then encoded once with the real
  tokenizer, with offsets. Every token whose id is a delimiter's and whose characters came from a
  marked occurrence -- or were assembled across a boundary of a caller string (adjacent text parts,
  a string and the template text; such strings carry an extra marker at that edge) -- is replaced
  by the encoding of the same characters with a copy of the tokenizer that has no added tokens.
* Guarantee: `Prompt.token_ids` equals the plain encoding of `Prompt.text` token for token,
  except that each isolated delimiter token is replaced by its ordinary pieces; the replaced ranges
  are `Prompt.isolated_spans`. Because the tokenizer already cuts the text at every added-token
  match, no token straddles an isolated span's boundary and the tokens on either side are exactly
  the plain tokens -- there is no boundary effect. Content without delimiters gives the plain ids.
  No isolated span contains a delimiter id (checked after assembly).
"""

from __future__ import annotations

import argparse
import bisect
import dataclasses
import functools
import json
import re
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import _json, prefix_cache
from ..messages import MessageError, normalize_messages
from ..tokenizer import Tokenizer, load_tokenizer

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
]

# The Gemma 4 template ends a thinking-off generation prompt with this empty thought channel.
GEMMA4_EMPTY_THOUGHT = "<|channel>thought\n<channel|>"
_GEMMA4_NAMES = frozenset({"gemma4", "gemma-4", "gemma_4"})

# Fields a message's reasoning is passed under (transformers fills the first two from any of them).
_REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")

# Marker characters are taken from the end of plane 16 (private use), skipping any in the input;
# where a template prints caller strings with Python's repr (Apriel's `tool|string`), which
# escapes private-use characters, from the end of the Yi syllables (printable, caseless letters).
_MARKER_RANGES = ((0x10FFFD, 0xF0000), (0xA48C, 0xA000))


class PromptError(ValueError):
    """The prompt cannot be built as asked (bad template, unsafe isolation, unsupported option)."""


class PromptTooLong(PromptError):
    """The prompt has more tokens than `token_limit` (`tokens` is a lower bound when it was
    refused before tokenizing it all)."""

    def __init__(self, tokens: int, limit: int, *, exact: bool) -> None:
        more = "" if exact else "at least "
        super().__init__(f"the prompt has {more}{tokens} tokens, more than the limit of {limit}")
        self.tokens, self.limit, self.exact = tokens, limit, exact


class TemplateVariableError(PromptError):
    """A request's template variable that may not be set, or not to this value (`name` says which)."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(message)
        self.name = name


# Variables the renderer passes itself (or that steer the rendering, not the conversation): a
# request may not set them. The tokenizer's special-token names and the template helpers are
# added per tokenizer (`owned_variables`).
_RENDERER_VARIABLES = frozenset({
    "messages", "tools", "documents", "add_generation_prompt", "continue_final_message",
    "add_special_tokens", "bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token",
    "mask_token", "additional_special_tokens", "special_tokens_map",
})

# Switches templates test for truth: only true or false, so that the template and the parser
# (which reads the thinking switches) agree on what was asked ("yes" is truthy to a template).
BOOLEAN_VARIABLES = frozenset({
    "enable_thinking", "thinking", "clear_thinking", "tools_in_user_message", "add_vision_id",
    "keep_empty_thinking",
})
_THINKING_SWITCHES = ("enable_thinking", "thinking")


def owned_variables(tok: Tokenizer | None) -> frozenset[str]:
    """Template variable names a request may not set: the renderer's, the template helpers'
    (`raise_exception`, `namespace`, ...), and the tokenizer's special tokens (`*_token(s)` keys of
    its config, as transformers passes them)."""
    from ..jinja_env import template_globals

    names = set(_RENDERER_VARIABLES) | template_globals()
    if tok is not None:
        names.update(k for k in tok.config if isinstance(k, str) and k.endswith(("_token", "_tokens")))
    return frozenset(names)


def check_request_variables(variables: Mapping[str, Any] | None, tok: Tokenizer | None = None) -> dict:
    """`variables` from a request as plain data, or `TemplateVariableError`: a name the renderer or
    the tokenizer owns, a switch in `BOOLEAN_VARIABLES` that is not true/false, or thinking
    switches that contradict each other."""
    if variables is None:
        return {}
    if not isinstance(variables, Mapping):
        raise TemplateVariableError("", "template variables must be an object of names to values")
    owned = owned_variables(tok)
    out = {}
    for name, value in variables.items():
        if not isinstance(name, str) or not name.isidentifier():
            raise TemplateVariableError(str(name), f"template variable names must be identifiers, got {name!r}")
        if name in owned or name.startswith("_"):
            raise TemplateVariableError(
                name, f"the template variable {name!r} is set by the server, not by a request: remove it")
        if name in BOOLEAN_VARIABLES and not isinstance(value, bool):
            raise TemplateVariableError(name, f"the template variable {name!r} must be true or false, got {value!r}")
        out[name] = _plain(value)
    given = {out[k] for k in _THINKING_SWITCHES if k in out}
    if len(given) > 1:
        raise TemplateVariableError(
            "thinking", "enable_thinking and thinking disagree (or reasoning_effort 'none' asked for no "
            "thinking): give one value")
    return out


@dataclass(frozen=True)
class Prompt:
    """A rendered prompt: its text, its token ids, and where isolated delimiters sit in the ids.

    `isolated_spans` are [start, end) token index ranges of `token_ids`, each the ordinary pieces
    that replaced one delimiter found in caller-supplied text. `token_ids` may be truncated (see
    `render_prompt`); `text` is always the whole rendering.
    """

    text: str
    token_ids: list[int]
    isolated_spans: list[tuple[int, int]] = field(default_factory=list)


# -- template context (mirrors transformers' apply_chat_template) -----------------------------


def _plain(value: Any) -> Any:
    """A fresh copy made of JSON-like types, as transformers hands data to the template."""
    if value is None or type(value) in (str, int, float, bool):
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, Mapping):
        return {_plain(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if callable(getattr(value, "model_dump", None)):
        return _plain(value.model_dump())
    return f"<{type(value).__name__}>"  # an inert placeholder, as transformers renders unknown objects


def _plain_list(values: Any) -> list:
    return _plain(list(values))


def _prepare_messages(messages: Sequence[Any], arguments_as_objects: bool = False,
                      null_call_content: bool = False, decoded_json: bool = False) -> list[dict]:
    if isinstance(messages, str | bytes) or not isinstance(messages, Sequence):
        raise PromptError("messages must be a list of {'role': ..., 'content': ...} dicts")
    if not messages:
        raise PromptError("cannot render an empty conversation: give at least one message")
    plain = []
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping):
            m = _plain(m)
        if not isinstance(m, Mapping):
            raise PromptError(f"message {i} is a {type(m).__name__}, expected a dict with 'role' and 'content'")
        plain.append(m if decoded_json else _plain(m))
    try:
        # One normal form for every OpenAI message shape (null content, text parts, developer and
        # function roles, arguments as JSON strings); null fields are dropped, since templates
        # handle a missing key but often render "None".
        normal = normalize_messages(plain, arguments_as_objects=arguments_as_objects)
    except MessageError as e:
        raise PromptError(str(e)) from e
    out = []
    for m in normal:
        reasoning = next((m[k] for k in _REASONING_FIELDS if m.get(k) is not None), None)
        if reasoning is not None:
            m = {"thinking": reasoning, **m, "reasoning_content": reasoning}
        if null_call_content and m.get("tool_calls") and m.get("content") == "":
            m = {**m, "content": None}  # the template renders calls only under null content
        out.append(m)
    return out


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
class _CallShape:
    """How a template wants an assistant's earlier tool calls handed to it."""

    objects: bool  # arguments as objects (else OpenAI's JSON string)
    null_content: bool  # a call message without text needs content None, not "" (DeepSeek V3, R1)
    renders: bool = True  # False: no shape showed the call's arguments (the template drops calls)


def _wants_argument_objects(source: str) -> bool:
    """Whether a template takes tool-call arguments as objects rather than OpenAI's JSON string
    (see `_call_shape`)."""
    return _call_shape(source).objects


@functools.lru_cache(maxsize=32)
def _call_shape(source: str) -> _CallShape:
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
            out = _render(source, messages, _PROBE_TOOLS, None, True, {"bos_token": "", "eos_token": ""})
        except PromptError:
            return None
        return out if _PROBE_ARGS["k"] in out else None

    as_string = json.dumps(_PROBE_ARGS)
    for null in (False, True):
        content = None if null else ""
        as_object = probe(dict(_PROBE_ARGS), content)
        if as_object is not None and repr(_PROBE_ARGS) not in as_object:
            return _CallShape(objects=True, null_content=null)
        if probe(as_string, content) is not None:
            return _CallShape(objects=False, null_content=null)
    return _CallShape(objects=False, null_content=False, renders=False)


def _as_tokenizer(tokenizer: Any) -> Tokenizer:
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


def _special_tokens_map(tok: Tokenizer | None) -> dict[str, str]:
    if tok is None:
        return {}
    out = {}
    for name in ("bos_token", "eos_token", "unk_token", "pad_token"):
        value = _config_token(tok.config.get(name))
        if value is not None:
            out[name] = value
    return out


def _resolve_template(template: str | Path | None, tok: Tokenizer | None, tools: Any) -> str:
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


def _render(source: str, messages: list, tools: Any, documents: Any, add_generation_prompt: bool,
            variables: dict) -> str:
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


def load_chat_template(path: str | Path, format: str | None = None) -> str:
    """A chat template file's text, checked: readable, valid Jinja, renders a one-message
    conversation (with the family's tool handling when `format` is given). Raises PromptError."""
    try:
        source = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise PromptError(f"cannot read the chat template {str(path)!r}: {e}") from e
    if not source.strip():
        raise PromptError(f"the chat template {str(path)!r} is empty")
    try:
        _render_request(source, [{"role": "user", "content": "hi"}], None, None, True,
                        {"bos_token": "", "eos_token": ""}, format)
    except PromptError as e:
        raise PromptError(f"the chat template {str(path)!r} does not render a conversation: {e}") from e
    return source


def thinking_switch(tokenizer: Any, template: str | Path | None = None, tools: Any = None) -> bool:
    """Whether the chat template reads a thinking switch (`enable_thinking` / `thinking`): its
    generation prompt differs with the switch on and off."""
    tok = _as_tokenizer(tokenizer) if tokenizer is not None else None
    return _reads_switch(_resolve_template(template, tok, tools))


@functools.lru_cache(maxsize=32)
def _reads_switch(source: str) -> bool:
    user = [{"role": "user", "content": "q"}]
    base = {"bos_token": "", "eos_token": ""}
    try:
        on = _render(source, user, None, None, True, {**base, "enable_thinking": True, "thinking": True})
        off = _render(source, user, None, None, True, {**base, "enable_thinking": False, "thinking": False})
    except PromptError:
        return True  # it refused a probe: assume it reads them, as before
    return on != off


def _render_request(source: str, messages: list, tools: Any, documents: Any, add_generation_prompt: bool,
                    variables: dict, format: str | None) -> str:
    """`_render`, after writing in what the template cannot render of the tools (for a known family:
    its documented tool prompt, results as user turns, calls as text; see chatsieve.tool_prompt)."""
    if format is None:
        return _render(source, messages, tools, documents, add_generation_prompt, variables)
    from ..tool_prompt import adapt_conversation, apply_splices, harmony_turns

    spec = _format_spec(format)
    messages, splices = harmony_turns(source, adapt_conversation(source, messages, tools, spec), spec)
    return apply_splices(_render(source, messages, tools, documents, add_generation_prompt, variables), splices)


def _format_spec(format: str):
    from .. import formats

    try:
        return formats.get(format)
    except (KeyError, ValueError) as e:
        raise PromptError(str(e.args[0]) if e.args else f"unknown format {format!r}") from e


def _is_gemma4(format: str | None) -> bool:
    return format is not None and (format.lower() in _GEMMA4_NAMES or _format_spec(format).name in _GEMMA4_NAMES)


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


def _drop_empty_thought(text: str, format: str | None, add_generation_prompt: bool,
                        keep_empty_thinking: bool, variables: Mapping[str, Any]) -> str:
    text = _gemma4_reopened_turns(text, format)
    text = _gemma4_answer_turn(text, format, add_generation_prompt, variables)
    if (keep_empty_thinking or not add_generation_prompt or variables.get("enable_thinking")
            or not _is_gemma4(format) or not text.endswith(GEMMA4_EMPTY_THOUGHT)):
        return text
    return text[: -len(GEMMA4_EMPTY_THOUGHT)]


def _check_tokenizer_controls(padding: Any, return_tensors: Any, tokenizer_kwargs: Any) -> None:
    for name, value in (("padding", padding), ("return_tensors", return_tensors),
                        ("tokenizer_kwargs", tokenizer_kwargs)):
        if value:
            raise PromptError(
                f"{name}={value!r} is not supported: it cannot be reproduced piecewise on an isolated "
                f"prompt; pad or convert Prompt.token_ids yourself"
            )


def _prepare(messages, tokenizer, template, tools, documents, template_kwargs, request_variables=None,
             decoded_json=False):
    """The rendering's inputs. Callers' data is copied into plain JSON-like types (`_plain`), as
    transformers hands it to templates, except with `decoded_json`: the caller vouches it is data
    as a JSON decoder made it (dict, list, str, int, float, bool, None), and nothing writes to it
    (the immutable sandbox cannot; the mutable one gets a deep copy), so it is used as it is."""
    tok = _as_tokenizer(tokenizer) if tokenizer is not None else None
    source = _resolve_template(template, tok, tools)
    shape = _call_shape(source)
    msgs = _prepare_messages(messages, shape.objects, shape.null_content, decoded_json)
    if tools is not None and not all(isinstance(t, Mapping) for t in tools):
        raise PromptError("tools must be a list of OpenAI tool dicts ({'type': 'function', 'function': {...}})")
    copy = list if decoded_json else _plain_list
    tools_p = copy(tools) if tools is not None else None
    docs_p = copy(documents) if documents is not None else None
    if docs_p is not None and not all(isinstance(d, dict) for d in docs_p):
        raise PromptError("documents must be a list of dicts with 'title' and 'text' keys")
    variables = {**_special_tokens_map(tok), **_plain(template_kwargs)}
    untrusted = check_request_variables(request_variables, tok)
    clash = sorted(untrusted.keys() & variables.keys())
    if clash:
        raise TemplateVariableError(clash[0], f"the template variable {clash[0]!r} is set by the server, not by a request")
    return tok, source, msgs, tools_p, docs_p, variables, untrusted


def render_text(
    messages: Sequence[Mapping[str, Any]],
    *,
    tokenizer: Tokenizer | Any = None,
    template: str | Path | None = None,
    tools: Sequence[Mapping[str, Any]] | None = None,
    documents: Sequence[Mapping[str, Any]] | None = None,
    add_generation_prompt: bool = True,
    format: str | None = None,
    keep_empty_thinking: bool = False,
    **template_kwargs: Any,
) -> str:
    """The rendered prompt text only (no tokenization, no isolation).

    `tokenizer` is optional here: it supplies the default template and `bos_token`/`eos_token`;
    without one pass `template=` (and those variables as keywords if the template uses them).
    """
    tok, source, msgs, tools_p, docs_p, variables, untrusted = _prepare(
        messages, tokenizer, template, tools, documents, template_kwargs)
    variables = {**variables, **untrusted}
    text = _render_request(source, msgs, tools_p, docs_p, add_generation_prompt, variables, format)
    return _drop_empty_thought(text, format, add_generation_prompt, keep_empty_thinking, variables)


# -- isolation --------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Delimiters:
    ids: dict[str, int]           # delimiter text -> its added-token id
    pattern: re.Pattern[str]      # longest first
    prefixes: frozenset[str]      # proper prefixes, to find delimiters cut at a string's edge
    suffixes: frozenset[str]
    longest: int                  # length of the longest delimiter
    id_set: frozenset[int] = frozenset()
    # Over caller strings joined by NUL: a string that `_mark_string` may change matches
    # (a delimiter inside, or a stripped head/tail that is part of one); None: NUL in a delimiter
    maybe_marked: re.Pattern[str] | None = None


_DELIMITER_CACHE: dict[tuple[int, tuple[str, ...]], tuple[Any, _Delimiters | None]] = {}


_WANTED_CACHE: dict[tuple[int, str | None], tuple[Any, tuple[str, ...]]] = {}


def _active_delimiters(tok: Tokenizer, format: str | None, markers: Sequence[str] | None) -> _Delimiters | None:
    if markers is not None:
        wanted: tuple[str, ...] = tuple(markers)
    else:
        hit = _WANTED_CACHE.get((id(tok), format))  # (its added tokens are fixed when it is made)
        if hit is not None and hit[0] is tok:
            wanted = hit[1]
        else:
            # The format's delimiters, and every control token of the tokenizer (Qwen3's
            # <|vision_start|>, <|fim_prefix|>, <|file_sep|>, ... are not in its delimiter list).
            own = tuple(_format_spec(format).delimiters) if format is not None else ()
            wanted = own + tuple(t for t in _control_tokens(tok) if t not in own)
            if len(_WANTED_CACHE) >= 32:
                _WANTED_CACHE.pop(next(iter(_WANTED_CACHE)), None)
            _WANTED_CACHE[(id(tok), format)] = (tok, wanted)
    key = (id(tok.hf), wanted)
    hit = _DELIMITER_CACHE.get(key)
    if hit is not None and hit[0] is tok.hf:
        return hit[1]
    found = _find_delimiters(tok, wanted)
    if len(_DELIMITER_CACHE) >= 32:
        _DELIMITER_CACHE.pop(next(iter(_DELIMITER_CACHE)))
    _DELIMITER_CACHE[key] = (tok.hf, found)
    return found


# HTML elements some vocabularies hold as added tokens (Gemma's `<table>`, `<b>`): ordinary text
# is meant to produce them, so a non-special one is never isolated.
_HTML_ELEMENTS = frozenset(
    "a b i u s p em strong sub sup code pre span div br hr img html body head header footer nav "
    "table caption thead tbody tfoot tr th td h1 h2 h3 h4 h5 h6 blockquote ul ol li dl dt dd iframe".split()
)
_TAG = re.compile(r"</?([a-z][a-z0-9]*)>")


def _control_tokens(tok: Tokenizer) -> list[str]:
    """Every added token that callers' text is not meant to produce: all of them except
    whitespace runs (Gemma's "▁▁") and non-special HTML tags."""
    special = {t.content for t in _added_token_objects(tok) if getattr(t, "special", True)}
    out = []
    for text in tok.added_tokens():
        if not text or not text.replace("\u2581", " ").strip():
            continue
        tag = _TAG.fullmatch(text)
        if tag is not None and tag.group(1) in _HTML_ELEMENTS and text not in special:
            continue
        out.append(text)
    return out


def _added_token_objects(tok: Tokenizer) -> list[Any]:
    try:
        return list(tok.hf.get_added_tokens_decoder().values())
    except Exception:  # a tokenizer without the table: treat every added token as special
        return []


def _find_delimiters(tok: Tokenizer, wanted: tuple[str, ...]) -> _Delimiters | None:
    added = tok.added_tokens()
    chosen: dict[str, int] = {}
    for text in wanted:
        if not isinstance(text, str) or not text or text.isspace():
            continue
        if text in added:
            chosen[text] = added[text]
        else:
            # A delimiter that is not itself an added token can only carry an added token inside it.
            for content, i in added.items():
                if content and not content.isspace() and content in text:
                    chosen[content] = i
    if not chosen:
        return None
    for text, i in chosen.items():
        got = tok.encode(text)
        if got != [i]:
            raise PromptError(
                f"delimiter {text!r} does not encode to its single token id {i} (got {got}); "
                "cannot isolate it safely"
            )
    prefixes = frozenset(d[:k] for d in chosen for k in range(1, len(d)))
    suffixes = frozenset(d[k:] for d in chosen for k in range(1, len(d)))
    maybe = None
    if not any("\x00" in d for d in chosen):
        alternatives = [_trie_pattern(chosen)]
        if suffixes:
            alternatives.append(r"(?:^|\x00)\s*" + _trie_pattern(sorted(suffixes)))
        if prefixes:
            alternatives.append(_trie_pattern(sorted(prefixes)) + r"\s*(?:\x00|\Z)")
        maybe = re.compile("|".join(f"(?:{a})" for a in alternatives))
    return _Delimiters(
        ids=chosen,
        pattern=re.compile(_trie_pattern(chosen)),
        prefixes=prefixes,
        suffixes=suffixes,
        longest=max(map(len, chosen)),
        id_set=frozenset(chosen.values()),
        maybe_marked=maybe,
    )


def _trie_pattern(words: Sequence[str]) -> str:
    """A regex matching any of `words`, longest first, as a trie: a vocabulary's thousands of
    added tokens cost one walk per position, not one attempt per token."""
    trie: dict = {}
    for w in words:
        node = trie
        for ch in w:
            node = node.setdefault(ch, {})
        node[""] = True

    def build(node: dict) -> str:
        ends = "" in node
        branches = [re.escape(ch) + build(child) for ch, child in sorted(node.items()) if ch]
        if not branches:
            return ""
        body = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
        return f"(?:{body})?" if ends else body

    return build(trie)


# Strings at least this long are scanned for delimiters once per content (a system prompt that every
# request of an agent repeats), then looked up: hashing is far cheaper than the scan.
_SCAN_MEMO_CHARS = 512
_SCAN_MEMO_SIZE = 256
_SCANNED: dict[tuple[str, str], bool] = {}  # (the delimiters' pattern, string) -> found
_TOOLS_SCANNED: dict[tuple[str, bytes], bool] = {}  # (the pattern, tools as JSON) -> found
_SCAN_LOCK = threading.Lock()


def _may_need_marks(delims: _Delimiters, msgs: Any, tools: Any, docs: Any, untrusted: Any,
                    decoded_json: bool) -> bool:
    """Whether some caller string may need a marker (`_mark_string`): a delimiter inside it, or a
    head or tail that is part of one (`_Delimiters.maybe_marked`, string by string)."""
    pattern = delims.maybe_marked
    if pattern is None:
        return True
    if tools and decoded_json:  # a team's agents send the same tools: scanned once per content
        try:
            key = (pattern.pattern, _json.dumps(tools))
        except (TypeError, ValueError):
            key = None
        found = _TOOLS_SCANNED.get(key) if key is not None else None
        if found is None:
            found = _scan(pattern, _strings(tools))
            if key is not None:
                _remember(_TOOLS_SCANNED, key, found)
        if found:
            return True
        tools = None
    return _scan(pattern, _strings(msgs) + _strings(tools) + _strings(docs) + _strings(untrusted))


def _scan(pattern: re.Pattern[str], strings: list[str]) -> bool:
    short = []
    for s in strings:
        if len(s) < _SCAN_MEMO_CHARS:
            short.append(s)
            continue
        key = (pattern.pattern, s)
        found = _SCANNED.get(key)
        if found is None:
            found = pattern.search(s) is not None
            _remember(_SCANNED, key, found)
        if found:
            return True
    # joined by NUL, which the pattern's edge alternatives take as a string's start or end
    return bool(short) and pattern.search("\x00".join(short)) is not None


def _remember(memo: dict, key: Any, value: bool) -> None:
    with _SCAN_LOCK:
        if len(memo) >= _SCAN_MEMO_SIZE:
            memo.pop(next(iter(memo)), None)
        memo[key] = value


def _strings(obj: Any) -> list[str]:
    """Every string in `obj` (dict keys too), depth first."""
    out: list[str] = []
    stack = [obj]
    while stack:
        o = stack.pop()
        if isinstance(o, str):
            out.append(o)
        elif isinstance(o, dict):
            for k, v in reversed(o.items()):
                stack.append(v)
                stack.append(k)
        elif isinstance(o, list | tuple):
            stack.extend(reversed(o))
    return out


@dataclass(frozen=True)
class _Markers:
    open: str   # before a delimiter found in caller text
    close: str  # after it
    edge: str   # at the edge of a caller string that could complete a delimiter outside it

    @property
    def all(self) -> str:
        return self.open + self.close + self.edge


def _pick_markers(*texts: str, kind: int = 0) -> _Markers:
    """Three characters of `_MARKER_RANGES[kind]` that none of `texts` holds."""
    top, bottom = _MARKER_RANGES[kind]
    used = set(re.findall(f"[{chr(bottom)}-{chr(top)}]", "".join(texts)))
    picked = [chr(cp) for cp in range(top, bottom - 1, -1) if chr(cp) not in used][:3]
    if len(picked) < 3:  # pragma: no cover - the input would hold every character of the range
        raise PromptError("cannot isolate delimiters: the input uses every marker character")
    return _Markers(*picked)


def _mark_string(s: str, delims: _Delimiters, mk: _Markers) -> tuple[str, bool]:
    if delims.maybe_marked is not None and delims.maybe_marked.search(s) is None:
        return s, False  # no delimiter inside, no edge that could be part of one
    marked = delims.pattern.sub(lambda m: mk.open + m.group(0) + mk.close, s)
    changed = marked != s
    # Edge markers go inside surrounding whitespace, so strip()/trim in templates still work.
    core = marked.strip()
    if core:
        lead = marked[: len(marked) - len(marked.lstrip())]
        trail = marked[len(marked.rstrip()):]
        longest = min(delims.longest, len(core) + 1)
        head = any(core[:k] in delims.suffixes for k in range(1, longest))
        tail = any(core[-k:] in delims.prefixes for k in range(1, longest))
        if head or tail:
            marked = lead + (mk.edge if head else "") + core + (mk.edge if tail else "") + trail
            changed = True
    return marked, changed


def _mark(obj: Any, delims: _Delimiters, mk: _Markers, flag: list[bool]) -> Any:
    if isinstance(obj, str):
        marked, changed = _mark_string(obj, delims, mk)
        if changed:
            flag[0] = True
        return marked
    if isinstance(obj, dict):
        # Keys too: a tool schema's property names come from third parties like its values.
        return {_mark(k, delims, mk, flag): _mark(v, delims, mk, flag) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_mark(v, delims, mk, flag) for v in obj]
    if isinstance(obj, tuple):
        return tuple(_mark(v, delims, mk, flag) for v in obj)
    return obj


_STRIPPED_CACHE: dict[int, tuple[Any, Any]] = {}


def _without_added_tokens(tok: Tokenizer):
    """A copy of the `tokenizers` object with no added tokens: everything encodes as sub-words."""
    hit = _STRIPPED_CACHE.get(id(tok.hf))
    if hit is not None and hit[0] is tok.hf:
        return hit[1]
    from tokenizers import Tokenizer as HFTokenizer

    try:
        # Same model (shared, read-only), same normalizer/pre-tokenizer/decoder, no added vocabulary.
        stripped = HFTokenizer(tok.hf.model)
        stripped.normalizer = tok.hf.normalizer
        stripped.pre_tokenizer = tok.hf.pre_tokenizer
        stripped.post_processor = tok.hf.post_processor
        stripped.decoder = tok.hf.decoder
    except Exception:
        stripped = None
    try:
        if stripped is None:  # a serialised copy, with its added tokens dropped
            spec = json.loads(tok.hf.to_str())
            spec["added_tokens"] = []
            stripped = HFTokenizer.from_str(json.dumps(spec))
        if stripped.get_added_tokens_decoder():
            raise ValueError("the copy still has added tokens")
    except Exception as e:
        raise PromptError(
            f"cannot copy the tokenizer to isolate delimiters ({type(e).__name__}: {e}); "
            "pass isolate_markers=False to build the prompt without isolation"
        ) from e
    if len(_STRIPPED_CACHE) >= 8:
        _STRIPPED_CACHE.pop(next(iter(_STRIPPED_CACHE)))
    _STRIPPED_CACHE[id(tok.hf)] = (tok.hf, stripped)
    return stripped


def _encode_as_text(tok: Tokenizer, text: str, delims: _Delimiters) -> list[int]:
    """Ordinary sub-word ids for `text` that decode back to it and hold no delimiter id."""
    stripped = _without_added_tokens(tok)
    forbidden = delims.id_set

    def ok(ids: list[int]) -> bool:
        return bool(ids) and not forbidden.intersection(ids) and tok.decode(ids) == text

    # Encode after a newline and drop it again, so a SentencePiece-style tokenizer adds no
    # leading space (as transformers' encode_marked_chat does).
    nl = stripped.encode("\n", add_special_tokens=False).ids
    ids = stripped.encode("\n" + text, add_special_tokens=False).ids
    if nl and ids[: len(nl)] == nl and ok(ids[len(nl):]):
        return ids[len(nl):]
    ids = stripped.encode(text, add_special_tokens=False).ids
    if ok(ids):
        return ids
    # Last resort: one character at a time (single characters never form a delimiter).
    ids = []
    for ch in text:
        part = stripped.encode("\n" + ch, add_special_tokens=False).ids
        part = part[len(nl):] if nl and part[: len(nl)] == nl else stripped.encode(ch, add_special_tokens=False).ids
        ids.extend(part)
    if ok(ids):
        return ids
    raise PromptError(
        f"the tokenizer copy still encodes {text!r} with a delimiter id (or not back to the same "
        "text); cannot isolate it: pass isolate_markers=False to opt out"
    )


class _Positions:
    """Where each character of the real rendering sits in the marked one (`span`), in memory
    proportional to the markers, not to the prompt (a long prompt has few)."""

    def __init__(self, before: list[int] | None = None, table: list[int | None] | None = None) -> None:
        self.before = before  # exact case: for the k-th marker, the real characters before it
        self.table = table  # whitespace case: per character, its index or None

    def span(self, a: int, b: int) -> list[int]:
        """Marked indices of real characters a..b (those that have one)."""
        if self.table is not None:
            return [j for j in self.table[a:b] if j is not None]
        assert self.before is not None
        return [i + bisect.bisect_right(self.before, i) for i in range(a, b)]


def _align(real: str, marked: str, mk: _Markers) -> _Positions | None:
    """For each character of `real`, its index in `marked`, or None if the renderings disagree.

    Exact when `marked` minus the markers is `real`. Otherwise, when the two differ only in
    whitespace (a marker next to the content blocked a template's strip()), the non-whitespace
    characters are matched one to one, in order, and whitespace maps to None.
    """
    at = [m.start() for m in re.finditer("[" + re.escape(mk.all) + "]", marked)]
    if marked.translate({ord(c): None for c in mk.all}) == real:
        return _Positions(before=[p - k for k, p in enumerate(at)])
    kept = [j for j, ch in enumerate(marked) if ch not in mk.all]
    solid = [j for j in kept if not marked[j].isspace()]
    real_solid = [i for i, ch in enumerate(real) if not ch.isspace()]
    if len(solid) != len(real_solid) or any(real[i] != marked[j] for i, j in zip(real_solid, solid, strict=True)):
        return None
    pos: list[int | None] = [None] * len(real)
    for i, j in zip(real_solid, solid, strict=True):
        pos[i] = j
    return _Positions(table=pos)


def _isolate(tok: Tokenizer, real: str, marked: str, pos: _Positions, mk: _Markers,
             delims: _Delimiters) -> tuple[list[int], list[tuple[int, int]]]:
    """Plain ids of `real`, with the delimiter tokens that came from caller text replaced."""
    # Characters of `marked` that belong to a delimiter found in caller text: `open delim close`.
    # A lone marker (the template split the string at the delimiter and dropped it) marks nothing.
    from_caller = bytearray(len(marked))
    pair = re.compile(re.escape(mk.open) + "(" + delims.pattern.pattern + ")" + re.escape(mk.close))
    for m in pair.finditer(marked):
        from_caller[m.start(1):m.end(1)] = b"\x01" * (m.end(1) - m.start(1))
    markers = set(mk.all)

    enc = _encode(tok, real)
    delimiter_ids = delims.id_set
    as_text: dict[str, list[int]] = {}  # a delimiter's ordinary pieces, once per distinct text
    plain = enc.ids
    ids: list[int] = []
    spans: list[tuple[int, int]] = []
    done = 0  # plain[:done] is in ids
    for i in [i for i, tid in enumerate(plain) if tid in delimiter_ids]:
        a, b = enc.span(i)
        where = pos.span(a, b)
        # From caller text, or assembled across the edge of a caller string (a marker sits
        # between its characters); a delimiter we cannot place is treated as caller text.
        if (not where or any(from_caller[j] for j in where)
                or not markers.isdisjoint(marked[where[0]:where[-1] + 1])):
            piece_text = real[a:b]
            pieces = as_text.get(piece_text)
            if pieces is None:
                pieces = as_text[piece_text] = _encode_as_text(tok, piece_text, delims)
            ids.extend(plain[done:i])
            done = i + 1
            spans.append((len(ids), len(ids) + len(pieces)))
            ids.extend(pieces)
    ids.extend(plain[done:])
    # After assembly: no isolated span may hold a delimiter id.
    for s, e in spans:
        if delimiter_ids.intersection(ids[s:e]):  # pragma: no cover - _encode_as_text checks this
            raise PromptError("an isolated span still holds a delimiter id; refusing to build the prompt")
    return ids, spans


# Piecewise counting (below): pieces of about this many characters, cut before a space; each cut
# may save at most this many tokens against encoding the whole text.
_COUNT_PIECE = 32_768
_CUT_SLACK = 4


def _min_tokens(tok: Tokenizer, text: str, limit: int) -> int:
    """A lower bound on the number of tokens of `text`, cheap next to encoding it whole.

    Every token holds at least one byte, so text of at most `limit` bytes is never too long; and no
    token holds more bytes than the vocabulary's longest, which bounds the count from below. When
    that does not decide and the text is several times longer than the limit in bytes, it is
    encoded in pieces cut before a space (the pre-tokenizers here start a word there), counting
    each piece's tokens less a slack per cut, until the count passes the limit: an over-long
    prompt is then refused after encoding about `limit` tokens, in memory for one piece.
    """
    size = len(text.encode("utf-8", "surrogatepass"))
    if size <= limit:
        return 0
    floor = -(-size // _longest_token_bytes(tok))
    if floor > limit or size < 6 * limit or len(text) <= 2 * _COUNT_PIECE:
        return floor  # (a short text is cheap to encode whole, and its count is then exact)
    counted, start = 0, 0
    while start < len(text):
        end = text.find(" ", start + _COUNT_PIECE)
        end = len(text) if end < 0 else end
        piece = text[start:end]
        counted += len(tok.hf.encode_batch([piece], add_special_tokens=False)[0].ids)
        counted -= _CUT_SLACK if end < len(text) else 0
        if counted > limit:
            return counted
        start = end
    return max(floor, 0)


_LONGEST_CACHE: dict[int, tuple[Any, int]] = {}


def _longest_token_bytes(tok: Tokenizer) -> int:
    hit = _LONGEST_CACHE.get(id(tok.hf))
    if hit is not None and hit[0] is tok.hf:
        return hit[1]
    # Vocabulary strings: a byte-level piece spends at least one UTF-8 byte per byte it stands
    # for, a SentencePiece piece exactly its bytes (a byte-fallback "<0xNN>" far more than its
    # one byte): an upper bound either way.
    longest = max((len(p.encode("utf-8", "surrogatepass")) for p in tok.hf.get_vocab(with_added_tokens=True)),
                  default=1)
    _LONGEST_CACHE[id(tok.hf)] = (tok.hf, max(longest, 1))
    return max(longest, 1)


def _encode(tok: Tokenizer, text: str) -> Any:
    """The whole prompt's encoding (ids and offsets), with the GIL released while the tokenizer
    works (`encode_batch` does, `encode` does not): a server thread rendering a long prompt then
    leaves the other requests running. The ids of an unchanged prefix of a recent prompt are
    reused (`prefix_cache`: the same ids as a whole encode)."""
    return prefix_cache.encode(tok.hf, text)


def _truncate(ids: list[int], spans: list[tuple[int, int]], max_length: int, side: str):
    if len(ids) <= max_length:
        return ids, spans
    if side == "left":
        cut = len(ids) - max_length
        ids = ids[cut:]
        spans = [(max(s - cut, 0), e - cut) for s, e in spans if e - cut > 0]
    else:
        ids = ids[:max_length]
        spans = [(s, min(e, max_length)) for s, e in spans if s < max_length]
    return ids, spans


def render_prompt(
    messages: Sequence[Mapping[str, Any]],
    *,
    tokenizer: Tokenizer | Any,
    template: str | Path | None = None,
    tools: Sequence[Mapping[str, Any]] | None = None,
    documents: Sequence[Mapping[str, Any]] | None = None,
    add_generation_prompt: bool = True,
    format: str | None = None,
    isolate_markers: bool = True,
    markers: Sequence[str] | None = None,
    truncation: bool = False,
    max_length: int | None = None,
    keep_empty_thinking: bool = False,
    padding: Any = False,
    return_tensors: Any = None,
    tokenizer_kwargs: Mapping[str, Any] | None = None,
    token_limit: int | None = None,
    request_variables: Mapping[str, Any] | None = None,
    decoded_json: bool = False,
    **template_kwargs: Any,
) -> Prompt:
    """Render `messages` with the chat template and tokenize it, isolating delimiters in content.

    `tokenizer`: a `chatsieve.tokenizer.Tokenizer`, a `tokenizers.Tokenizer`, or a directory.
    `template`: a path or a template string; default the tokenizer's chat template.
    `format`: the family (`chatsieve.formats` name) whose delimiters are isolated, besides every
    control token of the tokenizer (see the module docstring); `markers` replaces that list. `isolate_markers=False` gives exactly transformers' ids.
    Gemma 4 with thinking off (`enable_thinking` false or absent): the template's trailing empty
    thought channel (`GEMMA4_EMPTY_THOUGHT`) is removed from the generation prompt unless
    `keep_empty_thinking=True`.
    `truncation=True` cuts the assembled ids to `max_length` (default: the tokenizer's
    model_max_length) on the tokenizer's truncation_side. `token_limit` (without truncation)
    raises `PromptTooLong` for a longer prompt, before tokenizing it when a cheap lower bound on
    its token count already exceeds the limit. Other keywords reach the template
    (`enable_thinking=False`, ...) as they are: they are the program's own. `request_variables`
    are template variables from an untrusted request (`chat_template_kwargs`): their strings are
    isolated like message content, and `check_request_variables` refuses the names and values a
    request may not set (`TemplateVariableError`). `decoded_json=True`: `messages`, `tools` and
    `documents` are data as a JSON decoder made it (a server's request body), used without the
    copy into plain types that other data gets. Raises `PromptError`.
    """
    _check_tokenizer_controls(padding, return_tensors, tokenizer_kwargs)
    if tokenizer is None:
        raise PromptError("render_prompt needs a tokenizer (use render_text for the text alone)")
    tok, source, msgs, tools_p, docs_p, trusted, untrusted = _prepare(
        messages, tokenizer, template, tools, documents, template_kwargs, request_variables, decoded_json)
    variables = {**trusted, **untrusted}

    def finish(text: str) -> str:
        return _drop_empty_thought(text, format, add_generation_prompt, keep_empty_thinking, variables)

    text = finish(_render_request(source, msgs, tools_p, docs_p, add_generation_prompt, variables, format))
    if token_limit is not None and not truncation:
        floor = _min_tokens(tok, text, token_limit)
        if floor > token_limit:
            raise PromptTooLong(floor, token_limit, exact=False)
    delims = _active_delimiters(tok, format, markers) if isolate_markers else None

    ids: list[int] | None = None
    spans: list[tuple[int, int]] = []
    if delims is not None and _may_need_marks(delims, msgs, tools_p, docs_p, untrusted, decoded_json):
        caller = _strings(msgs) + _strings(tools_p) + _strings(docs_p) + _strings(untrusted)
        for kind in range(len(_MARKER_RANGES)):
            flag = [False]
            mk = _pick_markers(source, text, *caller, *_strings(trusted), kind=kind)
            marked_msgs = _mark(msgs, delims, mk, flag)
            marked_tools = _mark(tools_p, delims, mk, flag)
            marked_docs = _mark(docs_p, delims, mk, flag)
            marked_vars = {**trusted, **{k: _mark(v, delims, mk, flag) for k, v in untrusted.items()}}
            if not flag[0]:
                break  # no delimiter in caller text: the plain encoding is the prompt
            marked = finish(_render_request(source, marked_msgs, marked_tools, marked_docs,
                                            add_generation_prompt, marked_vars, format))
            pos = _align(text, marked, mk)
            if pos is not None:
                ids, spans = _isolate(tok, text, marked, pos, mk, delims)
                break
        else:
            raise PromptError(
                "cannot isolate delimiters in this conversation: the chat template renders the "
                "content differently once its delimiters are marked (it inspects or rewrites them); "
                "remove the delimiters from the content, or pass isolate_markers=False"
            )
    if ids is None:
        ids = _encode(tok, text).ids

    if token_limit is not None and not truncation and len(ids) > token_limit:
        raise PromptTooLong(len(ids), token_limit, exact=True)
    if truncation:
        limit = max_length if max_length is not None else tok.model_max_length
        if limit is not None:
            if limit < 0:
                raise PromptError(f"max_length must be >= 0, got {limit}")
            ids, spans = _truncate(ids, spans, limit, tok.truncation_side)
    return Prompt(text=text, token_ids=ids, isolated_spans=spans)


# -- CLI --------------------------------------------------------------------------------------


def render_main(argv: Sequence[str] | None = None) -> int:
    """`chatsieve render`: print {"text", "token_ids", "isolated_spans"} as JSON; errors exit 2."""
    parser = argparse.ArgumentParser(
        prog="chatsieve render",
        description="Render a conversation with a model's chat template and print the prompt and its ids.")
    parser.add_argument("messages", help="JSON file: a list of messages, or {\"messages\": [...], \"tools\": [...]}")
    parser.add_argument("--model-dir", required=True, help="directory with tokenizer.json(.xz) and its config")
    parser.add_argument("--format", help="family whose delimiters are isolated (e.g. qwen3, gemma4)")
    parser.add_argument("--template", help="chat template file (default: the model directory's)")
    parser.add_argument("--tools", help="JSON file with a list of OpenAI tool definitions")
    parser.add_argument("--thinking", choices=("on", "off"), help="pass enable_thinking to the template")
    parser.add_argument("--no-isolate", action="store_true", help="tokenize exactly as transformers would")
    parser.add_argument("--keep-empty-thinking", action="store_true",
                        help="keep Gemma 4's empty thought channel at the end of the prompt")
    args = parser.parse_args(list(argv) if argv is not None else None)
    try:
        try:
            data = json.loads(Path(args.messages).read_text(encoding="utf-8"))
            tools = json.loads(Path(args.tools).read_text(encoding="utf-8")) if args.tools else None
        except (OSError, ValueError) as e:
            raise PromptError(f"cannot read input: {e}") from e
        if isinstance(data, dict):
            tools = tools if tools is not None else data.get("tools")
            data = data.get("messages")
        kwargs: dict[str, Any] = {}
        if args.thinking is not None:
            kwargs["enable_thinking"] = args.thinking == "on"
        try:
            tok = load_tokenizer(args.model_dir)
        except (OSError, ValueError) as e:
            raise PromptError(str(e)) from e
        prompt = render_prompt(data, tokenizer=tok, template=args.template, tools=tools, format=args.format,
                               isolate_markers=not args.no_isolate,
                               keep_empty_thinking=args.keep_empty_thinking, **kwargs)
    except PromptError as e:
        print(f"chatsieve render: {e}", file=sys.stderr)
        return 2
    json.dump({"text": prompt.text, "token_ids": prompt.token_ids,
               "isolated_spans": [list(s) for s in prompt.isolated_spans]},
              sys.stdout, ensure_ascii=False)
    sys.stdout.write("\n")
    return 0
