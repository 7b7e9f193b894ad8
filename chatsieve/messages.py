"""Chat messages in every shape the OpenAI API accepts, normalised once for chat templates.

`normalize_messages` turns OpenAI request messages into the plain form chat templates are
written against: string content, system/user/assistant/tool roles, arguments as objects.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["MessageError", "TEXT_PART_SEPARATOR", "normalize_messages", "order_tool_results"]

# Text parts of one message are concatenated as written (templates that take parts do the same).
TEXT_PART_SEPARATOR = ""

# OpenAI's role aliases: `developer` is the newer name of `system`; `function` is the
# deprecated form of a tool result (named by `name`, without a tool_call_id).
_ROLE_ALIASES = {"developer": "system", "function": "tool"}
_TEXT_PART_TYPES = frozenset({"text", "input_text", "output_text", "refusal"})


class MessageError(ValueError):
    """A message the chat template cannot be given; `param` names the field (messages[i]...)."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


def normalize_messages(messages: Sequence[Mapping[str, Any]], *, arguments_as_objects: bool = False) -> list[dict]:
    """Plain-dict copies of `messages`, normalised; MessageError names the first bad field.

    - `developer` becomes `system`; `function` (deprecated) becomes `tool`, keeping its `name`.
    - `content`: null or absent becomes ""; an array of text parts becomes one string (the parts
      concatenated); any other part type (image, audio, file) is refused, never dropped.
    - an assistant's deprecated `function_call` becomes one `tool_calls` entry.
    - `tool_calls[].function.arguments` stay as given (OpenAI sends a JSON string), unless
      `arguments_as_objects`: then a JSON string holding an object becomes that object, for
      templates that iterate it or `tojson` it; other strings are kept as they are. Without it, an
      object a client sent becomes its JSON string.
    - `name`, `tool_call_id` and other string fields are kept; null fields are dropped.
    Roles are not checked here (a caller's template may know more); the server checks them.
    """
    out = []
    for i, m in enumerate(messages):
        param = f"messages[{i}]"
        if not isinstance(m, Mapping):
            raise MessageError(f"{param} must be an object with 'role' and 'content'", param)
        msg = {k: v for k, v in m.items() if v is not None}
        role = msg.get("role")
        if not isinstance(role, str):
            raise MessageError(f"{param}.role must be a string", f"{param}.role")
        msg["role"] = _ROLE_ALIASES.get(role, role)
        msg["content"] = _content(msg.get("content"), f"{param}.content")
        for key in ("name", "tool_call_id"):
            if key in msg and not isinstance(msg[key], str):
                raise MessageError(f"{param}.{key} must be a string", f"{param}.{key}")
        call = msg.pop("function_call", None)
        if call is not None and "tool_calls" not in msg:
            msg["tool_calls"] = [{"id": f"call_{i}", "type": "function", "function": call}]
        if "tool_calls" in msg:
            msg["tool_calls"] = _tool_calls(msg["tool_calls"], f"{param}.tool_calls", arguments_as_objects)
        out.append(msg)
    return out


def _content(content: Any, param: str) -> Any:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence) and not isinstance(content, bytes | bytearray):
        texts = []
        for j, part in enumerate(content):
            if isinstance(part, str):
                texts.append(part)
                continue
            kind = part.get("type") if isinstance(part, Mapping) else None
            if kind not in _TEXT_PART_TYPES:
                what = f"type {kind!r}" if isinstance(part, Mapping) else f"a {type(part).__name__}"
                raise MessageError(
                    f"{param}[{j}] is {what}: this server takes only text content parts "
                    "({'type': 'text', 'text': ...})",
                    f"{param}[{j}]",
                )
            text = part.get("refusal") if kind == "refusal" else part.get("text")
            if not isinstance(text, str):
                raise MessageError(f"{param}[{j}] has no text string", f"{param}[{j}]")
            texts.append(text)
        return TEXT_PART_SEPARATOR.join(texts)
    raise MessageError(f"{param} must be a string or an array of text parts", param)


def _tool_calls(calls: Any, param: str, as_objects: bool) -> list[dict]:
    if not isinstance(calls, Sequence) or isinstance(calls, str | bytes):
        raise MessageError(f"{param} must be an array", param)
    out = []
    for j, c in enumerate(calls):
        fn = c.get("function") if isinstance(c, Mapping) else None
        if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
            raise MessageError(f"{param}[{j}] must have a function with a name", f"{param}[{j}]")
        args = fn.get("arguments")
        if isinstance(args, str) and as_objects:
            try:
                parsed = json.loads(args) if args.strip() else {}
            except (ValueError, RecursionError):
                parsed = None
            if isinstance(parsed, dict):
                args = parsed
        elif args is None:
            args = {} if as_objects else "{}"
        elif isinstance(args, Mapping) and not as_objects:
            args = json.dumps(args, ensure_ascii=False)  # a client sent an object: the JSON string
        elif not isinstance(args, str | Mapping):
            raise MessageError(
                f"{param}[{j}].function.arguments must be a JSON string", f"{param}[{j}].function.arguments"
            )
        call = {k: v for k, v in c.items() if v is not None}
        call.setdefault("type", "function")
        call["function"] = {**{k: v for k, v in fn.items() if v is not None}, "arguments": args}
        out.append(call)
    return out


def order_tool_results(messages: Sequence[Mapping[str, Any]]) -> list[dict]:
    """`messages` (normalised) with each run of tool results in the order of the calls they answer.

    Agents return parallel results in the order the tools finished; templates that print no call
    id (Qwen3, Gemma 4, GLM) or number results by position (Kimi) would hand the model the second
    call's output as the first's. Each run of consecutive `tool` messages is sorted by the position
    of its `tool_call_id` among the calls of the last assistant message with calls before it (a
    stable sort: results without an id keep their place relative to each other, last). A result
    whose id no such call has is a MessageError: answering a call the conversation never made.
    """
    out = [dict(m) for m in messages]
    calls: list[str] = []  # the ids of the last assistant message's calls
    i = 0
    while i < len(out):
        m = out[i]
        if m.get("role") == "assistant" and m.get("tool_calls"):
            calls = [c.get("id") for c in m["tool_calls"] if isinstance(c, Mapping)]
        if m.get("role") != "tool":
            i += 1
            continue
        j = i
        while j < len(out) and out[j].get("role") == "tool":
            j += 1
        run = out[i:j]
        for k, r in enumerate(run):
            rid = r.get("tool_call_id")
            if rid is not None and rid not in calls:
                answered = ", ".join(repr(c) for c in calls if c) or "none"
                raise MessageError(
                    f"messages[{i + k}] is the result of tool call {rid!r}, which the assistant turn before it "
                    f"did not make (its calls: {answered}); send each result with the id of its call",
                    f"messages[{i + k}].tool_call_id",
                )
        rank = {c: n for n, c in enumerate(calls) if c}
        out[i:j] = sorted(run, key=lambda r: rank.get(r.get("tool_call_id"), len(rank)))
        i = j
    return out
