"""The template's inputs as transformers' apply_chat_template hands them: plain JSON-like copies
of the caller's data, and messages in one normal form."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from ..messages import MessageError, normalize_messages
from .errors import PromptError

# Fields a message's reasoning is passed under (transformers fills the first two from any of them).
_REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")


def plain(value: Any) -> Any:
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
        return {plain(k): plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, tuple):
        return tuple(plain(v) for v in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if callable(getattr(value, "model_dump", None)):
        return plain(value.model_dump())
    return f"<{type(value).__name__}>"  # an inert placeholder, as transformers renders unknown objects


def plain_list(values: Any) -> list:
    """`values` as a fresh list of plain copies (`plain`)."""
    return plain(list(values))


def prepare_messages(messages: Sequence[Any], arguments_as_objects: bool = False,
                     null_call_content: bool = False, decoded_json: bool = False) -> list[dict]:
    """`messages` checked and normalized (`chatsieve.messages`), reasoning under each field a template
    reads; tool-call arguments as objects, and null content beside calls, when the template wants
    them so (`template.call_shape`). Copied into plain types unless `decoded_json`."""
    if isinstance(messages, str | bytes) or not isinstance(messages, Sequence):
        raise PromptError("messages must be a list of {'role': ..., 'content': ...} dicts")
    if not messages:
        raise PromptError("cannot render an empty conversation: give at least one message")
    given = []
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping):
            m = plain(m)
        if not isinstance(m, Mapping):
            raise PromptError(f"message {i} is a {type(m).__name__}, expected a dict with 'role' and 'content'")
        given.append(m if decoded_json else plain(m))
    try:
        # One normal form for every OpenAI message shape (null content, text parts, developer and
        # function roles, arguments as JSON strings); null fields are dropped, since templates
        # handle a missing key but often render "None".
        normal = normalize_messages(given, arguments_as_objects=arguments_as_objects)
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
