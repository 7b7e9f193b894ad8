"""Template variables a request may set (`chat_template_kwargs`): the names the renderer and the
tokenizer own, the switches that must be booleans, and thinking switches that must agree."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..tokenizer import Tokenizer
from .context import plain
from .errors import TemplateVariableError

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
        out[name] = plain(value)
    given = {out[k] for k in _THINKING_SWITCHES if k in out}
    if len(given) > 1:
        raise TemplateVariableError(
            "thinking", "enable_thinking and thinking disagree (or reasoning_effort 'none' asked for no "
            "thinking): give one value")
    return out
