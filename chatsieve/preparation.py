"""A validated request's prompt and engine constraint, shared by every front end that renders its
own prompt (`chatsieve serve`, the Dynamo integration): each refusal is a RequestError."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from jinja2 import TemplateError

from .constraints import plan as constraint_plan
from .grammar import Constraint, GrammarError, GrammarTooLarge
from .prompt import Prompt, PromptError, PromptTooLong, TemplateVariableError, render_prompt, thinking_switch
from .protocols.common import THINKING_SWITCHES, ChatRequest, RequestError, effort_budget

__all__ = [
    "MAX_TOKENS_HEADER",
    "check_vocabulary_bounds",
    "effective_thinking",
    "fitted_max_tokens",
    "parser_prompt",
    "model_context_length",
    "plan_request_constraint",
    "reasoning_budget",
    "render_request_prompt",
]

_CONTEXT_KEYS = ("max_position_embeddings", "max_sequence_length", "seq_length", "n_positions", "n_ctx")


def model_context_length(model_dir: Path, tokenizer: Any = None) -> int | None:
    """The model's context in tokens: config.json's max_position_embeddings (or kin), else the
    tokenizer's model_max_length; None if neither says."""
    try:
        config = json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        config = {}
    for section in (config, config.get("text_config") if isinstance(config, dict) else None):
        if isinstance(section, dict):
            for key in _CONTEXT_KEYS:
                value = section.get(key)
                if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                    return value
    value = getattr(tokenizer, "model_max_length", None)
    return value if isinstance(value, int) and value > 0 else None


def check_vocabulary_bounds(req: ChatRequest, vocab_size: int) -> None:
    """Fields that name token ids or count tokens stay inside the model's vocabulary."""
    bad = [i for i, _ in req.logit_bias if i >= vocab_size]
    if bad:
        raise RequestError(
            f"'logit_bias' names token id {bad[0]}, outside this model's vocabulary (0..{vocab_size - 1})",
            param="logit_bias",
        )
    if req.top_k is not None and req.top_k > vocab_size:
        raise RequestError(f"'top_k' must be at most the vocabulary size {vocab_size}, got {req.top_k}", param="top_k")


def effective_thinking(req: ChatRequest, *, format: str, tokenizer: Any, template: str | None = None) -> ChatRequest:
    """`req` without a "thinking on" the chat template does not read, for a family whose parser
    would then start inside a reasoning block the prompt never opened (Qwen3-Coder: an agent's
    "thinking on" made the whole answer reasoning); it keeps its own default."""
    if not req.thinking or not any(k in req.chat_template_kwargs for k in THINKING_SWITCHES):
        return req
    from . import formats

    if not formats.get(format).thinking_starts_in_reasoning:
        return req  # the parser starts in the answer either way: a reasoning block the model opens is read as one
    try:
        switch = thinking_switch(tokenizer, template, req.prompt_tools)
    except PromptError:
        return req  # the render reports it
    if switch:
        return req
    kwargs = {k: v for k, v in req.chat_template_kwargs.items() if k not in THINKING_SWITCHES}
    return dataclasses.replace(req, chat_template_kwargs=kwargs)


def render_request_prompt(
    req: ChatRequest,
    *,
    tokenizer: Any,
    format: str,
    context: int | None,
    template: str | None = None,
    decoded_json: bool = False,
) -> Prompt:
    """The request's prompt, every caller string isolated (its template variables included, see
    `render_prompt(request_variables=...)`), within `context` tokens minus room for the answer.
    `decoded_json`: the request holds data as a JSON decoder made it (`render_prompt`'s option)."""
    variables = dict(req.template_kwargs)
    # render_prompt options a request may give (RAG documents, Gemma 4's empty thought)
    documents = variables.pop("documents", None)
    keep_empty = variables.pop("keep_empty_thinking", False)
    if not isinstance(keep_empty, bool):
        raise RequestError(
            "chat_template_kwargs.keep_empty_thinking must be true or false", param="chat_template_kwargs"
        )
    # room for the answer: max_tokens if given (unless it is to be fitted to what is left), else at
    # least one token
    room = None if req.fit_max_tokens else req.max_tokens
    limit = None if context is None else context - (room or 1)
    try:
        return render_prompt(
            req.messages,
            tokenizer=tokenizer,
            template=template,
            tools=req.prompt_tools,
            documents=documents,
            format=format,
            token_limit=limit,
            keep_empty_thinking=keep_empty,
            request_variables=variables,
            decoded_json=decoded_json,
        )
    except PromptTooLong as e:
        asked = f" plus max_tokens {room}" if room else ", which leaves no room for an answer"
        raise RequestError(
            f"this model's context is {context} tokens; the prompt has "
            f"{'' if e.exact else 'at least '}{e.tokens} tokens{asked}: shorten the messages"
            + (" or lower max_tokens" if room else ""),
            param="messages",
            code="context_length_exceeded",
        ) from None
    except TemplateVariableError as e:
        raise RequestError(
            f"chat_template_kwargs: {e}", param="chat_template_kwargs", code="invalid_template_variable"
        ) from None
    except PromptError as e:
        raise RequestError(f"cannot build the prompt: {e}", param="messages", code="prompt_error") from None
    except (TemplateError, TypeError, KeyError, IndexError, AttributeError) as e:
        # the template refused (raise_exception) or choked on this request's messages
        raise RequestError(
            f"the chat template failed on this request: {type(e).__name__}: {e}",
            param="messages",
            code="template_error",
        ) from None


def parser_prompt(prompt: Prompt, *, format: str, tokenizer: Any) -> str:
    """The prompt text the parser reads its start state from (inside a reasoning block or not).

    Caller text may spell a reasoning marker (an edited file holding `<think>`): isolation keeps it
    ordinary pieces, but the parser reads text, where it looks the same. Where the family's
    reasoning markers are single tokens, the text from the last one the template wrote (by id;
    isolated spans hold none) on is what decides; a prompt without isolated spans is read whole."""
    if not prompt.isolated_spans:
        return prompt.text
    from . import formats

    spec = formats.get(format)
    markers = (*spec.reasoning_open, *spec.reasoning_close)
    ids = {tokenizer.single_token_id(m) for m in markers}
    if not markers or None in ids:
        return prompt.text
    token_ids = prompt.token_ids
    after = prompt.isolated_spans[-1][1]  # what follows the last caller delimiter
    for i in range(len(token_ids) - 1, after - 1, -1):
        if token_ids[i] in ids:
            return tokenizer.decode(list(token_ids[i:]))
    tail = tokenizer.decode(list(token_ids[after:]))
    spans = iter(reversed(prompt.isolated_spans))
    span = next(spans, None)
    for i in range(after - 1, -1, -1):  # the last marker the template wrote before it, if any
        while span is not None and i < span[0]:
            span = next(spans, None)
        if token_ids[i] in ids and not (span is not None and span[0] <= i < span[1]):
            return tokenizer.decode([token_ids[i]]) + tail
    return tail


# says that a request's max_tokens was lowered to the room its prompt left in the context
MAX_TOKENS_HEADER = "x-chatsieve-max-tokens-lowered"


def fitted_max_tokens(req: ChatRequest, prompt_tokens: int, context: int | None) -> int | None:
    """The max_tokens to generate with: the request's, lowered to the room the prompt leaves in the
    context when the request asks for fitting (`ChatRequest.fit_max_tokens`) and asked for more."""
    if not req.fit_max_tokens or context is None or req.max_tokens is None:
        return req.max_tokens
    return min(req.max_tokens, context - prompt_tokens)


def plan_request_constraint(req: ChatRequest, *, format: str, engine: str, tokenizer: Any) -> Constraint | None:
    """What the engine must enforce for the request's tool_choice / response_format (constraints.plan)."""
    try:
        return constraint_plan(
            format,
            engine=engine,
            tools=req.prompt_tools,
            tool_choice=req.tool_choice.mode,
            response_format=req.response_format,
            token_id=tokenizer.single_token_id,
            parallel=req.parallel_tool_calls,
            thinking=req.thinking,
            strict=req.strict_tools,
            aliases=req.tool_aliases,
        )
    except GrammarError as e:
        param = ("tool_choice" if req.tool_choice.mode in ("required", "function")
                 else "response_format" if req.response_format else "tools")  # fmt: skip
        code = "grammar_too_large" if isinstance(e, GrammarTooLarge) else "unsupported_constraint"
        raise RequestError(str(e), param=param, code=code) from None


def reasoning_budget(req: ChatRequest, *, format: str, efforts: Mapping[str, int] | None = None) -> int | None:
    """The reasoning tokens the request allows before its reasoning is closed: the budget it gives
    (Messages' ``budget_tokens``, chat completions' ``thinking_token_budget``), else its effort's
    (`efforts`, the server's table; `protocols.common.EFFORT_BUDGETS` by default); None: no budget."""
    if req.reasoning_budget is not None:
        return req.reasoning_budget
    return effort_budget(req.effort, format, efforts)
