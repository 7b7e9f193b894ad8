"""A validated request's prompt and engine constraint, shared by every front end that renders its
own prompt (`chatsieve serve`, the Dynamo integration): each refusal is a RequestError."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from jinja2 import TemplateError

from .grammar import Constraint, GrammarError, GrammarTooLarge
from .grammar import plan as constraint_plan
from .prompt import Prompt, PromptError, PromptTooLong, TemplateVariableError, render_prompt
from .protocols.common import ChatRequest, RequestError

__all__ = [
    "check_vocabulary_bounds",
    "model_context_length",
    "plan_request_constraint",
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
    # room for the answer: max_tokens if given, else at least one token
    limit = None if context is None else context - (req.max_tokens or 1)
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
        asked = f" plus max_tokens {req.max_tokens}" if req.max_tokens else ""
        raise RequestError(
            f"this model's context is {context} tokens; the prompt has "
            f"{'' if e.exact else 'at least '}{e.tokens} tokens{asked}: shorten the messages"
            + (" or lower max_tokens" if req.max_tokens else ""),
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


def plan_request_constraint(req: ChatRequest, *, format: str, engine: str, tokenizer: Any) -> Constraint | None:
    """What the engine must enforce for the request's tool_choice / response_format (grammar.plan)."""
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
        )
    except GrammarError as e:
        param = "tool_choice" if req.tool_choice.mode in ("required", "function") else "response_format"
        code = "grammar_too_large" if isinstance(e, GrammarTooLarge) else "unsupported_constraint"
        raise RequestError(str(e), param=param, code=code) from None
