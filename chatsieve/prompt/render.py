"""Builds prompts: renders a chat template (the family's tool prompt written in, Gemma 4's turns
fixed up), tokenizes it with caller delimiters isolated (isolation.py), and limits or truncates it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import shared
from ..tokenizer import Tokenizer
from .context import plain, plain_list, prepare_messages
from .errors import PromptError, PromptTooLong, TemplateVariableError
from .gemma4 import fix_answer_turn
from .isolation import isolated_ids
from .template import (
    as_tokenizer,
    call_shape,
    format_spec,
    render_chat_template,
    resolve_template,
    special_tokens_map,
)
from .truncation import min_tokens, truncate
from .variables import check_request_variables


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


def _render_request(source: str, messages: list, tools: Any, documents: Any, add_generation_prompt: bool,
                    variables: dict, format: str | None) -> str:
    """`render_chat_template`, after writing in what the template cannot render of the tools (for a known family:
    its documented tool prompt, results as user turns, calls as text; see chatsieve.tool_prompt)."""
    if format is None:
        return render_chat_template(source, messages, tools, documents, add_generation_prompt, variables)
    from ..tool_prompt import adapt_conversation, apply_splices, described_tools, harmony_turns

    spec = format_spec(format)
    tools = described_tools(source, tools)
    messages, splices = harmony_turns(source, adapt_conversation(source, messages, tools, spec), spec)
    return apply_splices(render_chat_template(source, messages, tools, documents, add_generation_prompt, variables), splices)


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
    """The rendering's inputs. Callers' data is copied into plain JSON-like types (`plain`), as
    transformers hands it to templates, except with `decoded_json`: the caller vouches it is data
    as a JSON decoder made it (dict, list, str, int, float, bool, None), and nothing writes to it
    (the immutable sandbox cannot; the mutable one gets a deep copy), so it is used as it is."""
    tok = as_tokenizer(tokenizer) if tokenizer is not None else None
    source = resolve_template(template, tok, tools)
    shape = call_shape(source)
    msgs = prepare_messages(messages, shape.objects, shape.null_content, decoded_json)
    if tools is not None and not all(type(t) is dict or isinstance(t, Mapping) for t in tools):
        raise PromptError("tools must be a list of OpenAI tool dicts ({'type': 'function', 'function': {...}})")
    copy = list if decoded_json else plain_list
    # (a caller's kept tools, chatsieve/shared.py, as they are: what is derived from them is kept)
    tools_p = None if tools is None else tools if decoded_json and shared.is_shared(tools) else copy(tools)
    docs_p = copy(documents) if documents is not None else None
    if docs_p is not None and not all(isinstance(d, dict) for d in docs_p):
        raise PromptError("documents must be a list of dicts with 'title' and 'text' keys")
    variables = {**special_tokens_map(tok), **plain(template_kwargs)}
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
    return fix_answer_turn(text, format, add_generation_prompt, keep_empty_thinking, variables)


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
    control token of the tokenizer (see chatsieve/prompt/isolation.py); `markers` replaces that list. `isolate_markers=False` gives exactly transformers' ids.
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
        return fix_answer_turn(text, format, add_generation_prompt, keep_empty_thinking, variables)

    raw = _render_request(source, msgs, tools_p, docs_p, add_generation_prompt, variables, format)
    text = finish(raw)
    if token_limit is not None and not truncation:
        floor = min_tokens(tok, text, token_limit)
        if floor > token_limit:
            raise PromptTooLong(floor, token_limit, exact=False)

    def rerender(marked_msgs: Any, marked_tools: Any, marked_docs: Any, marked_vars: dict) -> str:
        return _render_request(source, marked_msgs, marked_tools, marked_docs, add_generation_prompt,
                               marked_vars, format)

    text, ids, spans = isolated_ids(
        tok, raw, text, rerender, finish, format=format, markers=markers, isolate=isolate_markers, source=source,
        messages=msgs, tools=tools_p, documents=docs_p, trusted=trusted, untrusted=untrusted,
        decoded_json=decoded_json)

    if token_limit is not None and not truncation and len(ids) > token_limit:
        raise PromptTooLong(len(ids), token_limit, exact=True)
    if truncation:
        limit = max_length if max_length is not None else tok.model_max_length
        if limit is not None:
            if limit < 0:
                raise PromptError(f"max_length must be >= 0, got {limit}")
            ids, spans = truncate(ids, spans, limit, tok.truncation_side)
    return Prompt(text=text, token_ids=ids, isolated_spans=spans)
