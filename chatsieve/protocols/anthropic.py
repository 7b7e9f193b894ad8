"""Anthropic Messages protocol (``POST /v1/messages``, ``/v1/messages/count_tokens``): its request
blocks into the shared `ChatRequest`; parser events into its stream events or one ``message``.

Sans-I/O like the rest of chatsieve. Mapping onto the shared machinery (protocols.common):

- ``system`` (a string or text blocks) and ``system``-role messages become system messages;
  ``text`` / ``tool_use`` / ``tool_result`` / ``thinking`` blocks become OpenAI-form messages
  (``tool_use`` -> ``tool_calls``, each ``tool_result`` -> a ``tool`` message, ``thinking`` ->
  the turn's ``reasoning_content``, rendered where the template takes it); ``redacted_thinking``
  carries no text and is dropped; ``image``, ``document`` and every other block are a 400.
- ``tools`` (custom: ``name``, ``description``, ``input_schema``) become functions; tool types
  hosted by Anthropic are a 400, except its tool search (`LEFT_OUT_TOOL_TYPES`: every tool is
  rendered anyway), left out of the prompt and named in the ``x-chatsieve-tools-left-out`` header.
- ``tool_choice`` ``auto`` / ``any`` / ``tool`` / ``none`` -> ``auto`` / ``required`` / named /
  ``none``; ``disable_parallel_tool_use`` -> ``parallel_tool_calls: false``.
- ``thinking`` ``enabled`` / ``disabled`` -> the template's thinking switch on / off (``adaptive``
  or absent: the family's default); ``budget_tokens`` -> `ChatRequest.reasoning_budget`.
- Tool-use ids are the family's own call ids written as ``toolu_`` ids (`tool_use_id`), and read
  back (`native_call_id`), so templates that render ids (Kimi, Mistral) see their own.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from chatsieve import shared
from chatsieve._json import dumps, string
from chatsieve.events import Event, ToolCallStart
from chatsieve.messages import MessageError, normalize_messages, order_tool_results
from chatsieve.protocols.common import (
    THINKING_SWITCHES,
    ChatRequest,
    Fields,
    Outcome,
    ParsedRequest,
    RequestError,
    RequestLimits,
    ResponseInfo,
    ToolChoice,
    left_out_headers,
    max_tokens_ceiling,
    media_placeholder,
    reasoning_switches,
    runs,
    sse_event,
    stop_strings,
)

PING_INTERVAL = 10.0  # seconds of engine silence before a ``ping`` event

# Tool types Anthropic runs itself that can be left out without losing a tool: its tool search
# (every tool, deferred or not, is rendered into the prompt here). Left out of the prompt and
# named in the LEFT_OUT_HEADER of the response; every other hosted type is a 400. (Claude Code
# 2.1.328 sends no hosted tool to a custom ANTHROPIC_BASE_URL, with or without --tools.)
LEFT_OUT_TOOL_TYPES = ("tool_search_tool_",)

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    502: "api_error",
    503: "overloaded_error",
    529: "overloaded_error",
}

_EFFORTS = ("low", "medium", "high", "xhigh", "max")

STOP_REASONS = {"tool_calls": "tool_use", "length": "max_tokens"}
_TEXT_BLOCKS = frozenset({"text"})
_MEDIA_BLOCKS = frozenset({"image", "document"})  # in a tool result: a placeholder text


def error_type(status: int) -> str:
    """Anthropic's error ``type`` for an HTTP status."""
    return ERROR_TYPES.get(status) or ("api_error" if status >= 500 else "invalid_request_error")


def error_body(message: str, status: int = 400, details: dict | None = None) -> dict:
    """Anthropic's error shape: ``{"type": "error", "error": {"type", "message"}}`` (and the
    ``details`` the SDK reads, where there are some)."""
    error: dict[str, Any] = {"type": error_type(status), "message": message}
    if details:
        error["details"] = details
    return {"type": "error", "error": error}


# ---------------------------------------------------------------- tool-use ids

_ID_SAFE = re.compile(r"[A-Za-z0-9_]")
_ESCAPE = re.compile(r"-([0-9A-F]{2})")


def tool_use_id(native: str) -> str:
    """The family's call id as a ``toolu_`` id: characters outside ``[A-Za-z0-9_]`` are written
    as ``-XX`` (their UTF-8 bytes), so `native_call_id` gives the id back exactly."""
    out = []
    for ch in native:
        if _ID_SAFE.fullmatch(ch):
            out.append(ch)
        else:
            out.extend(f"-{b:02X}" for b in ch.encode("utf-8"))
    return "toolu_" + "".join(out)


def native_call_id(tool_id: str) -> str:
    """The family's call id behind a `tool_use_id`; any other id as it is."""
    if not tool_id.startswith("toolu_"):
        return tool_id
    body = tool_id[len("toolu_") :]
    if "-" in _ESCAPE.sub("", body):
        return tool_id  # not one of ours: a '-' that escapes nothing
    try:
        return _unescape(body)
    except UnicodeDecodeError:
        return tool_id


def _unescape(body: str) -> str:
    out = bytearray()
    i = 0
    while i < len(body):
        if body[i] == "-":
            out.append(int(body[i + 1 : i + 3], 16))
            i += 3
        else:
            out += body[i].encode()
            i += 1
    return out.decode("utf-8")


# ---------------------------------------------------------------- requests


@dataclass(frozen=True)
class MessagesRequest(ParsedRequest):
    """A parsed ``/v1/messages`` body: the shared request, and the hosted tools left out."""

    left_out_tools: tuple[str, ...] = ()


def parse_messages_request(
    body: Any, limits: RequestLimits | None = None, *, count_tokens: bool = False, format: str | None = None
) -> MessagesRequest:
    """Validate a decoded ``/v1/messages`` body (or a ``count_tokens`` one, which has no
    ``max_tokens`` and is never streamed); RequestError (HTTP 400) naming the bad field.
    `format` (the served family) decides what the thinking switch and effort become."""
    limits = limits or RequestLimits()
    get = Fields.of(body, limits)
    if get.value("thread") is not None:
        raise thread_refusal()

    model = get.value("model")
    if not isinstance(model, str) or not model:
        raise RequestError("'model' is required: the model's name, a string", param="model")
    # above the room the prompt leaves, it is lowered to that room (ChatRequest.fit_max_tokens)
    max_tokens = get.integer("max_tokens", minimum=1, maximum=max_tokens_ceiling(limits, fit=True))
    if max_tokens is None and not count_tokens:
        raise RequestError("'max_tokens' is required: the most tokens to generate", param="max_tokens")

    messages = _system(get.value("system"))
    raw = get.value("messages")
    if not isinstance(raw, list) or not raw:
        raise RequestError("'messages' must be a non-empty array", param="messages")
    media: list[str] = []  # images and documents in tool results, left out of the prompt
    for i, m in enumerate(raw):
        messages += _message(m, i, media)
    try:
        messages = order_tool_results(normalize_messages(messages))
    except MessageError as e:  # a result for a call the turn before did not make
        raise RequestError(str(e), param="messages") from None

    tools, left_out, strict = shared.once(get.value("tools"), "anthropic tools", _tools)
    tool_choice, parallel = _tool_choice(get.value("tool_choice"), tools)
    if get.value("mcp_servers"):
        raise RequestError(
            "'mcp_servers' is not supported: this server runs no MCP connector; offer the tools as "
            "'tools' and run them in the client",
            param="mcp_servers",
        )

    kwargs = get.value("chat_template_kwargs")  # chatsieve's extension, as in chat completions
    if kwargs is not None and not isinstance(kwargs, dict):
        raise RequestError("'chat_template_kwargs' must be an object", param="chat_template_kwargs")
    kwargs = dict(kwargs or {})
    thinking, budget = _thinking(get.value("thinking"), max_tokens)
    asked = _effort(get.value("output_config"))
    switches, effort = reasoning_switches(format, thinking=thinking, effort=asked)
    # an absent `thinking` leaves the switch a request set itself (chat_template_kwargs) alone
    if get.value("thinking") is not None or not any(k in kwargs for k in THINKING_SWITCHES):
        kwargs.update(switches)

    top_k = get.integer("top_k", minimum=0)
    headers = left_out_headers((*left_out, *media))
    chat = ChatRequest(
        messages=messages,
        model=model,
        tools=tools,
        tool_choice=tool_choice,
        parallel_tool_calls=parallel,
        max_tokens=max_tokens,
        temperature=get.number("temperature", minimum=0.0, maximum=1.0),
        top_p=get.number("top_p", minimum=0.0, maximum=1.0),
        top_k=top_k or None,
        stop=stop_strings(get.value("stop_sequences"), limits, "stop_sequences"),
        stream=False if count_tokens else bool(get.boolean("stream")),
        chat_template_kwargs=kwargs,
        reasoning_effort=effort,
        reasoning_budget=budget,
        strict_tools=strict,
        # thinking off (disabled, or no `thinking`): the effort's budget is none's (a family that
        # cannot switch thinking off gets the smallest)
        effort="none" if thinking is False else asked,
        fit_max_tokens=True,
        note_unusable_calls=True,
    )
    return MessagesRequest(chat, headers=headers, left_out_tools=left_out)


def thread_refusal() -> RequestError:
    """The 400 for a ``thread`` request (server-held conversations, anthropic SDK 2.17's
    ``messages.thread()`` and the tool runner's default). Its ``details`` are the ones the SDK
    reads as "this server cannot thread": a tool runner then sends the whole conversation instead."""
    return RequestError(
        "'thread' (a conversation held by the server) is not supported by this server: send the whole "
        "conversation in 'messages' on every request, without 'thread'",
        param="thread",
        code="thread_unsupported_request",
        details={"error_code": "thread_unsupported_request", "unsupported": ["thread"]},
    )


# Claude Code's first system line, different in every session (its version and a hash): left out,
# as vLLM, Ollama and llama.cpp do, so that sessions share a cached prompt prefix
BILLING_HEADER = "x-anthropic-billing-header:"


def _system(value: Any) -> list[dict]:
    if value is None:
        return []
    if isinstance(value, list):
        value = [b for b in value if not (isinstance(b, dict) and _is_billing_line(b.get("text")))]
    elif isinstance(value, str) and BILLING_HEADER in value:
        value = "\n".join(line for line in value.split("\n") if not _is_billing_line(line))
    text = _text_of(value, "system", "system")
    return [{"role": "system", "content": text}] if text or isinstance(value, str) else []


def _is_billing_line(text: Any) -> bool:
    return isinstance(text, str) and text.lstrip().startswith(BILLING_HEADER) and "\n" not in text.strip()


def _text_of(content: Any, param: str, where: str, media: list[str] | None = None) -> str:
    """A string, or text blocks joined: the text a system prompt or tool result holds. With
    `media` (a tool result), an image or document block becomes a placeholder text, named there."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise RequestError(f"'{param}' must be a string or an array of text blocks", param=param)
    texts: list[str] = []
    placed = False  # the last piece was a placeholder (each stands on a line of its own)
    for j, block in enumerate(content):
        kind = block.get("type") if isinstance(block, dict) else None
        if media is not None and kind in _MEDIA_BLOCKS:
            media.append(f"{kind}:{param}[{j}]")
            source = block.get("source")
            text = media_placeholder(kind, block, source.get("media_type") if isinstance(source, dict) else None)
            texts.append(("\n" if texts else "") + text)
            placed = True
            continue
        if kind not in _TEXT_BLOCKS or not isinstance(block.get("text"), str):
            raise _block_error(kind, f"{param}[{j}]", where, "text, image or document" if media is not None else "text")
        texts.append(("\n" if placed else "") + block["text"])
        placed = False
    return ("\n\n" if param == "system" else "").join(texts)


def _block_error(kind: Any, param: str, where: str, allowed: str) -> RequestError:
    if kind in ("image", "document", "search_result", "container_upload"):
        why = f"'{kind}' blocks are not supported: this server serves a text model; send the content as text"
    elif isinstance(kind, str):
        why = f"'{kind}' blocks are not supported in {where}; use {allowed} blocks"
    else:
        why = f"must be a block object with a 'type' ({allowed})"
    return RequestError(f"{param}: {why}", param=param)


def _message(m: Any, i: int, media: list[str]) -> list[dict]:
    """One Anthropic message as OpenAI-form messages (a user turn's tool results become tool
    messages, in their order among its text; images in them placeholders, named in `media`)."""
    param = f"messages[{i}]"
    if not isinstance(m, dict):
        raise RequestError(f"{param} must be an object with 'role' and 'content'", param=param)
    role = m.get("role")
    if role not in ("user", "assistant", "system"):
        raise RequestError(f"{param}.role must be 'user' or 'assistant', got {role!r}", param=f"{param}.role")
    content = m.get("content")
    cparam = f"{param}.content"
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    if not isinstance(content, list):
        raise RequestError(f"{cparam} must be a string or an array of content blocks", param=cparam)
    if role == "system":
        return [{"role": "system", "content": _text_of(content, cparam, "a system message")}]
    if role == "assistant":
        return [_assistant(content, cparam)]
    out: list[dict] = []
    texts: list[str] = []
    for j, block in enumerate(content):
        kind = block.get("type") if isinstance(block, dict) else None
        bparam = f"{cparam}[{j}]"
        if kind == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif kind == "tool_result":
            if texts:
                out.append({"role": "user", "content": "".join(texts)})
                texts = []
            out.append(_tool_result(block, bparam, media))
        else:
            raise _block_error(kind, bparam, "a user message", "text or tool_result")
    if texts or not out:
        out.append({"role": "user", "content": "".join(texts)})
    return out


def _tool_result(block: dict, param: str, media: list[str]) -> dict:
    tool_id = block.get("tool_use_id")
    if not isinstance(tool_id, str) or not tool_id:
        raise RequestError(f"{param}.tool_use_id must be a non-empty string", param=f"{param}.tool_use_id")
    content = block.get("content")
    text = "" if content is None else _text_of(content, f"{param}.content", "a tool_result", media)
    is_error = block.get("is_error")
    if is_error is not None and not isinstance(is_error, bool):
        raise RequestError(f"{param}.is_error must be a boolean", param=f"{param}.is_error")
    if is_error:
        text = f"Error: {text}"  # templates have no error flag; the model reads it in the text
    return {"role": "tool", "tool_call_id": native_call_id(tool_id), "content": text}


def _assistant(content: list, param: str) -> dict:
    texts: list[str] = []
    thinking: list[str] = []
    calls: list[dict] = []
    for j, block in enumerate(content):
        kind = block.get("type") if isinstance(block, dict) else None
        bparam = f"{param}[{j}]"
        if kind == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif kind == "thinking" and isinstance(block.get("thinking"), str):
            thinking.append(block["thinking"])
        elif kind == "redacted_thinking":
            continue  # encrypted by Anthropic: no text to render
        elif kind == "tool_use":
            tool_id, name, args = block.get("id"), block.get("name"), block.get("input")
            if not isinstance(tool_id, str) or not tool_id:
                raise RequestError(f"{bparam}.id must be a non-empty string", param=f"{bparam}.id")
            if not isinstance(name, str) or not name:
                raise RequestError(f"{bparam}.name must be a non-empty string", param=f"{bparam}.name")
            if not isinstance(args, dict):
                raise RequestError(f"{bparam}.input must be an object", param=f"{bparam}.input")
            calls.append(
                {
                    "id": native_call_id(tool_id),
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)},
                }
            )
        else:
            raise _block_error(kind, bparam, "an assistant message", "text, thinking or tool_use")
    msg: dict[str, Any] = {"role": "assistant", "content": "".join(texts)}
    if thinking:
        msg["reasoning_content"] = "".join(thinking)
    if calls:
        msg["tool_calls"] = calls
    return msg


def _tools(value: Any) -> tuple[list[dict] | None, tuple[str, ...], tuple[str, ...]]:
    """The custom tools as OpenAI functions, the names of the hosted tools left out, and the names
    of the strict tools (``strict: true``: Anthropic's strict tool use, the input must match
    ``input_schema``; kept out of the function, so the prompt is the same either way)."""
    if value is None:
        return None, (), ()
    if not isinstance(value, list):
        raise RequestError("'tools' must be an array", param="tools")
    tools, left_out, strict_names = [], [], []
    for i, t in enumerate(value):
        param = f"tools[{i}]"
        if not isinstance(t, dict):
            raise RequestError(f"{param} must be an object", param=param)
        kind = t.get("type")
        if kind not in (None, "custom"):
            if isinstance(kind, str) and kind.startswith(LEFT_OUT_TOOL_TYPES):
                left_out.append(str(t.get("name") or kind))
                continue
            raise RequestError(
                f"{param}.type {kind!r} is a tool Anthropic runs itself, which this server cannot: "
                "define it as a custom tool (name, description, input_schema) and run it in the client",
                param=f"{param}.type",
            )
        name, schema, description = t.get("name"), t.get("input_schema"), t.get("description")
        if not isinstance(name, str) or not name:
            raise RequestError(f"{param}.name must be a non-empty string", param=f"{param}.name")
        if not isinstance(schema, dict):
            raise RequestError(f"{param}.input_schema must be a JSON Schema object", param=f"{param}.input_schema")
        if description is not None and not isinstance(description, str):
            raise RequestError(f"{param}.description must be a string", param=f"{param}.description")
        strict = t.get("strict")
        if strict is not None and not isinstance(strict, bool):
            raise RequestError(f"{param}.strict must be true or false", param=f"{param}.strict")
        fn: dict[str, Any] = {"name": name, "parameters": schema}
        if description is not None:
            fn["description"] = description
        if strict:
            strict_names.append(name)
        tools.append({"type": "function", "function": fn})
    return tools or None, tuple(left_out), tuple(strict_names)


def _tool_choice(value: Any, tools: list[dict] | None) -> tuple[ToolChoice, bool]:
    if value is None:
        return ToolChoice("auto"), True
    kind = value.get("type") if isinstance(value, dict) else None
    if kind not in ("auto", "any", "tool", "none"):
        raise RequestError(
            "tool_choice must be {'type': 'auto' | 'any' | 'tool' | 'none'} ('tool' with a 'name')",
            param="tool_choice",
        )
    disable = value.get("disable_parallel_tool_use")
    if disable is not None and not isinstance(disable, bool):
        raise RequestError(
            "tool_choice.disable_parallel_tool_use must be a boolean", param="tool_choice.disable_parallel_tool_use"
        )
    parallel = not disable
    if kind in ("any", "tool") and not tools:
        raise RequestError(f"tool_choice {kind!r} needs 'tools'", param="tool_choice")
    if kind == "tool":
        name = value.get("name")
        if not isinstance(name, str):
            raise RequestError("tool_choice.name must be a string", param="tool_choice.name")
        if name not in {t["function"]["name"] for t in tools or ()}:
            raise RequestError(f"tool_choice names tool {name!r}, which is not in 'tools'", param="tool_choice.name")
        return ToolChoice("function", name), parallel
    return ToolChoice({"auto": "auto", "any": "required", "none": "none"}[kind]), parallel


def _thinking(value: Any, max_tokens: int | None) -> tuple[bool, int | None]:
    """Whether the request asks for thinking, and its reasoning budget if it gives one. Absent or
    ``disabled`` is off (Anthropic's API does not think unless asked); ``adaptive`` (Claude Code's)
    and ``enabled`` are on."""
    if value is None:
        return False, None
    kind = value.get("type") if isinstance(value, dict) else None
    if kind == "adaptive":
        return True, None
    if kind == "disabled":
        return False, None
    if kind != "enabled":
        raise RequestError(
            "thinking must be {'type': 'enabled', 'budget_tokens': N}, {'type': 'disabled'} or "
            "{'type': 'adaptive'}",
            param="thinking",
        )
    budget = value.get("budget_tokens")
    if not isinstance(budget, int) or isinstance(budget, bool) or budget < 1:
        raise RequestError("thinking.budget_tokens must be a positive integer", param="thinking.budget_tokens")
    if max_tokens is not None and budget >= max_tokens:
        raise RequestError(
            f"thinking.budget_tokens ({budget}) must be less than max_tokens ({max_tokens})",
            param="thinking.budget_tokens",
        )
    return True, budget


def _effort(value: Any) -> str | None:
    """``output_config.effort`` (Claude Code's ``/effort``): low, medium, high, xhigh or max."""
    if value is None:
        return None
    effort = value.get("effort") if isinstance(value, dict) else None
    if effort is None:
        return None
    if effort not in _EFFORTS:
        raise RequestError(
            f"output_config.effort must be one of {', '.join(_EFFORTS)}, got {effort!r}", param="output_config.effort"
        )
    return effort


# ---------------------------------------------------------------- responses


def message_id() -> str:
    return f"msg_{uuid.uuid4().hex[:24]}"


def stop_reason(outcome: Outcome) -> tuple[str, str | None]:
    """(stop_reason, stop_sequence) for how the generation ended."""
    if outcome.finish_reason == "stop" and outcome.stop_sequence is not None:
        return "stop_sequence", outcome.stop_sequence
    return STOP_REASONS.get(outcome.finish_reason, "end_turn"), None


def usage(input_tokens: int, output_tokens: int, cached_tokens: int = 0) -> dict:
    """Anthropic's usage for a prompt of `input_tokens`, `cached_tokens` of them served from the
    engine's prefix cache: as Anthropic counts them, `input_tokens` is the uncached rest and the
    cache read a counter of its own (their sum is the prompt)."""
    return {
        "input_tokens": input_tokens - cached_tokens,
        "output_tokens": output_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": cached_tokens,
    }


def thinking_signature(text: str) -> str:
    """The ``signature`` of a thinking block: not Anthropic's (which only its API can make), a
    SHA-256 of the text, the same streamed or whole."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class BlockOps:
    """Events to content-block operations, numbered as Anthropic numbers blocks (0, 1, ... in
    order): ``("open", index, block)``, ``("delta", index, delta)``, ``("close", index, delta |
    None)`` (a thinking block closes with its ``signature_delta``). One reasoning, content or
    call run continues the open block of its kind; anything else closes it."""

    def __init__(self) -> None:
        self.index = -1
        self.kind: Any = None  # "thinking" | "text" | call index | None (no open block)
        self._signature: Any = None  # hashlib object of the open thinking block

    def apply(self, events: Iterable[Event]) -> Iterator[tuple[str, int, Any]]:
        for kind, value, _ in runs(events):
            if kind == "start":
                yield from self.close()
                yield self._open(value.index, _tool_block(value))
            elif kind == "reasoning":
                if self.kind != "thinking":
                    yield from self.close()
                    self._signature = hashlib.sha256()
                    yield self._open("thinking", {"type": "thinking", "thinking": "", "signature": ""})
                self._signature.update(value.encode("utf-8"))
                yield "delta", self.index, {"type": "thinking_delta", "thinking": value}
            elif kind == "content":
                if self.kind != "text":
                    yield from self.close()
                    yield self._open("text", {"type": "text", "text": ""})
                yield "delta", self.index, {"type": "text_delta", "text": value}
            elif kind == self.kind:  # arguments of the open call
                yield "delta", self.index, {"type": "input_json_delta", "partial_json": value}

    def more(self, kind: str, text: str) -> int | None:
        """The index of the open block where a run of `kind` ("reasoning" or "content") continues
        it, the text taken as `apply` takes it (only a delta follows); else None, nothing taken."""
        if kind == "content":
            if self.kind != "text":
                return None
        elif self.kind == "thinking":
            self._signature.update(text.encode("utf-8"))
        else:
            return None
        return self.index

    def close(self) -> Iterator[tuple[str, int, Any]]:
        if self.kind is None:
            return
        last = None
        if self.kind == "thinking":
            last = {"type": "signature_delta", "signature": self._signature.hexdigest()}
        self.kind = None
        yield "close", self.index, last

    def _open(self, kind: Any, block: dict) -> tuple[str, int, Any]:
        self.index += 1
        self.kind = kind
        return "open", self.index, block


def _tool_block(e: ToolCallStart) -> dict:
    return {"type": "tool_use", "id": tool_use_id(e.id), "name": e.name, "input": {}}


_PING = sse_event("ping", {"type": "ping"})
# a text or thinking delta's event, as `sse_event` writes it: (block index, the text's JSON)
_TEXT_DELTA = (b'event: content_block_delta\ndata: {"type":"content_block_delta","index":%d,'
               b'"delta":{"type":"text_delta","text":%s}}\n\n')
_THINKING_DELTA = (b'event: content_block_delta\ndata: {"type":"content_block_delta","index":%d,'
                   b'"delta":{"type":"thinking_delta","thinking":%s}}\n\n')


class MessageStream:
    """Parser events (filtered) to Anthropic's stream: ``message_start``; per block
    ``content_block_start`` / ``content_block_delta`` / ``content_block_stop``;
    ``message_delta`` (stop reason, output usage); ``message_stop``."""

    def __init__(self, info: ResponseInfo, id: str | None = None) -> None:
        self.info = info
        self.id = id or message_id()
        self.ops = BlockOps()

    def start(self) -> bytes:
        message = {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.info.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": usage(self.info.prompt_tokens, 0),
        }
        return sse_event("message_start", {"type": "message_start", "message": message})

    def encode(self, events: Iterable[Event]) -> bytes:
        return self._bytes(self.ops.apply(events))

    def encode_text(self, kind: str, text: str) -> bytes | None:
        """`encode` of one reasoning or content delta that continues the open block (see
        `StreamEncoder.encode`); None where it opens one."""
        index = self.ops.more(kind, text)
        if index is None:
            return None
        return (_TEXT_DELTA if kind == "content" else _THINKING_DELTA) % (index, string(text))

    def finish(self, outcome: Outcome) -> bytes:
        reason, sequence = stop_reason(outcome)
        delta = {
            "type": "message_delta",
            "delta": {"stop_reason": reason, "stop_sequence": sequence},
            # the engine says what its cache served only now: the SDKs take these over message_start's
            "usage": {"output_tokens": outcome.completion_tokens,
                      "input_tokens": outcome.prompt_tokens - outcome.cached_tokens,
                      "cache_read_input_tokens": outcome.cached_tokens},
        }
        return (
            self._bytes(self.ops.close())
            + sse_event("message_delta", delta)
            + sse_event("message_stop", {"type": "message_stop"})
        )

    def error(self, e: RequestError) -> bytes:
        return sse_event("error", error_body(e.message, e.status))

    def ping(self) -> bytes | None:
        return _PING

    @staticmethod
    def _bytes(ops: Iterable[tuple[str, int, Any]]) -> bytes:
        out: list[bytes] = []
        for op, index, value in ops:
            if op == "delta":
                if value["type"] == "text_delta":  # the common case, without a dict per event
                    out.append(_TEXT_DELTA % (index, dumps(value["text"])))
                    continue
                out.append(
                    sse_event("content_block_delta", {"type": "content_block_delta", "index": index, "delta": value})
                )
            elif op == "open":
                out.append(
                    sse_event(
                        "content_block_start", {"type": "content_block_start", "index": index, "content_block": value}
                    )
                )
            else:
                if value is not None:
                    out.append(
                        sse_event(
                            "content_block_delta", {"type": "content_block_delta", "index": index, "delta": value}
                        )
                    )
                out.append(sse_event("content_block_stop", {"type": "content_block_stop", "index": index}))
        return b"".join(out)


class MessageCollector:
    """Parser events (filtered) folded into the non-streaming ``message``: the same blocks, in
    the same order, as `MessageStream` streams."""

    def __init__(self, info: ResponseInfo, id: str | None = None) -> None:
        self.info = info
        self.id = id or message_id()
        self.ops = BlockOps()
        self.blocks: list[dict] = []
        self._args: dict[int, list[str]] = {}

    def apply(self, events: Iterable[Event]) -> None:
        self._fold(self.ops.apply(events))

    def body(self, outcome: Outcome) -> dict:
        self._fold(self.ops.close())
        reason, sequence = stop_reason(outcome)
        return {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.info.model,
            "content": self.blocks,
            "stop_reason": reason,
            "stop_sequence": sequence,
            "usage": usage(outcome.prompt_tokens, outcome.completion_tokens, outcome.cached_tokens),
        }

    def _fold(self, ops: Iterable[tuple[str, int, Any]]) -> None:
        for op, index, value in ops:
            if op == "open":
                self.blocks.append(dict(value))
                continue
            block = self.blocks[index]
            if op == "close":
                if value is not None:
                    block["signature"] = value["signature"]
                if index in self._args:
                    block["input"] = _input(self._args.pop(index))
            elif value["type"] == "text_delta":
                block["text"] += value["text"]
            elif value["type"] == "thinking_delta":
                block["thinking"] += value["thinking"]
            else:
                self._args.setdefault(index, []).append(value["partial_json"])


def _input(parts: list[str]) -> dict:
    """A call's arguments as the ``input`` object (released calls hold a JSON object)."""
    text = "".join(parts)
    try:
        value = json.loads(text) if text.strip() else {}
    except ValueError:
        return {"_arguments": text}  # not expected for a released call; kept, never lost
    return value if isinstance(value, dict) else {"_arguments": value}


def model_entry(name: str, created: int) -> dict:
    """A model as Anthropic's ``GET /v1/models`` lists it."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(created))
    return {"type": "model", "id": name, "display_name": name, "created_at": stamp}


def models_page(names: Iterable[str], created: int) -> dict:
    """Anthropic's ``GET /v1/models`` body: every name, on one page."""
    data = [model_entry(n, created) for n in names]
    return {
        "data": data,
        "has_more": False,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
    }


# ---------------------------------------------------------------- the protocol object


class AnthropicMessages:
    """``POST /v1/messages`` as a `chatsieve.protocols.common.ClientProtocol`."""

    name = "anthropic"
    ping_interval: float | None = PING_INTERVAL

    def parse(self, body: Any, limits: RequestLimits, *, format: str | None = None) -> MessagesRequest:
        return parse_messages_request(body, limits, format=format)

    def parse_count_tokens(self, body: Any, limits: RequestLimits, *, format: str | None = None) -> MessagesRequest:
        """The request as rendered for a generation, without what only steers decoding: the
        tool choice becomes the tools it renders (so no grammar is planned for a count)."""
        parsed = parse_messages_request(body, limits, count_tokens=True, format=format)
        chat = dataclasses.replace(parsed.chat, tools=parsed.chat.prompt_tools, tool_choice=ToolChoice("auto"))
        return dataclasses.replace(parsed, chat=chat)

    def encoder(self, request: ParsedRequest, info: ResponseInfo) -> MessageStream:
        return MessageStream(info)

    def collector(self, request: ParsedRequest, info: ResponseInfo) -> MessageCollector:
        return MessageCollector(info)

    def error_body(self, e: RequestError) -> dict:
        return error_body(e.message, e.status, e.details)


ANTHROPIC = AnthropicMessages()
