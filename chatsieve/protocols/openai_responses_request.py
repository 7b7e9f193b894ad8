"""OpenAI Responses requests (``POST /v1/responses``): the body checked, its input items folded
into chat messages, its tools, tool choice and text format, and the one internal request.

What a request becomes (decisions where the API leaves room):

- ``input`` items become chat messages in order: ``message`` (roles user / assistant / system /
  developer; text parts only, an image, file or audio part is a 400 naming it), ``function_call``
  (joined to the assistant turn it belongs to), ``function_call_output`` (a tool message, named
  after its call), ``reasoning`` (its text becomes the reasoning of the assistant turn that follows
  it, where the template renders reasoning). ``instructions`` become a leading system message
  (system / developer messages the template would drop reach it: see chatsieve/prompt/).
- ``tools``: ``function`` tools are offered; the functions inside a ``namespace`` tool are offered
  under their own names (the call item then carries ``namespace``); every other type (web_search,
  file_search, mcp, custom, local_shell, ...) needs a host-side service this server does not have
  and is left out -- named in the ``x-chatsieve-tools-left-out`` response header and the server log.
- ``tool_choice`` / ``parallel_tool_calls`` / ``text.format`` take the chat-completions machinery
  (engine-enforced, see protocols/openai_chat.py); ``allowed_tools`` narrows the offered tools.
  ``max_tool_calls: N`` returns the first N calls the model makes; later ones are dropped (named
  in the server log), as ``parallel_tool_calls: false`` drops all but the first. It is echoed.
- ``reasoning.effort`` ``none`` / ``minimal`` turns thinking off; for families that cannot (their
  template takes an effort instead, gpt-oss) it becomes that template's lowest effort, ``low``.
  ``low`` .. ``xhigh`` turn thinking on (and reach templates that take an effort); without an
  effort the family's default holds.
- ``include: ["message.output_text.logprobs"]`` (or ``top_logprobs``) returns the answer's
  token logprobs on its output_text parts and deltas, ``top_logprobs`` alternatives each.
- Accepted and ignored: ``store`` (the server keeps or not), ``metadata`` (echoed), ``user``,
  other ``include`` values, ``truncation``, ``reasoning.summary``, ``prompt_cache_key``,
  ``client_metadata``, ``safety_identifier``, ``service_tier``, ``text.verbosity``, ``stream_options``.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from chatsieve import shared
from chatsieve._json import dumps
from chatsieve.messages import MessageError, normalize_messages, order_tool_results
from chatsieve.protocols.common import (
    MAX_TOKENS_CEILING,
    ChatRequest,
    Fields,
    RequestError,
    RequestLimits,
    ToolChoice,
    max_tokens_ceiling,
    media_placeholder,
    reasoning_switches,
    response_format,
)

__all__ = [
    "ResponsesRequest",
    "item_id",
    "items_to_messages",
    "namespaced_aliases",
    "parse_responses_request",
    "response_id",
]

INPUT_ROLES = frozenset({"user", "assistant", "system", "developer"})
_TEXT_PARTS = frozenset({"input_text", "output_text", "text"})
_MEDIA_PARTS = frozenset({"input_image", "input_file", "input_audio", "image_url", "file"})
MAX_METADATA_KEYS = 16


def response_id() -> str:
    return f"resp_{uuid.uuid4().hex}"


def item_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


@dataclass(frozen=True)
class ResponsesRequest:
    """A validated ``POST /v1/responses`` body.

    `input` holds the request's own items, checked and given ids (what input_items lists);
    `chat_request(history)` turns history + input into the one internal ChatRequest.
    """

    input: list[dict]
    model: str | None = None
    instructions: str | None = None
    previous_response_id: str | None = None
    store: bool = True
    stream: bool = False
    tools: list[dict] = field(default_factory=list)  # as sent, echoed in the response
    offered: list[dict] = field(default_factory=list)  # chat-completions function tools
    left_out: tuple[str, ...] = ()  # tools that cannot be offered, by type (and name)
    namespaces: dict[str, str] = field(default_factory=dict)  # function name -> its namespace
    tool_choice: ToolChoice = ToolChoice("auto")
    tool_choice_echo: Any = "auto"
    parallel_tool_calls: bool = True
    max_tool_calls: int | None = None  # calls returned at most; later ones are dropped
    max_output_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    response_format: dict | None = None
    text: dict = field(default_factory=lambda: {"format": {"type": "text"}})
    reasoning_effort: str | None = None
    reasoning_summary: str | None = None
    metadata: dict = field(default_factory=dict)
    user: str | None = None
    truncation: str = "disabled"
    logprobs: bool = False  # the answer's token logprobs (include message.output_text.logprobs)
    top_logprobs: int = 0

    def chat_request(self, history: Sequence[Mapping] = (), *, format: str | None = None) -> ChatRequest:
        """The internal request for `history` (earlier items, from previous_response_id) + input.

        `format` (the served family) decides what ``reasoning.effort: none`` means."""
        try:
            messages = normalize_messages(items_to_messages([*history, *self.input], self.instructions))
            messages = order_tool_results(messages)
        except MessageError as e:  # items are checked already; this is the template's last word
            raise RequestError(str(e), param="input") from None
        if not messages:
            raise RequestError("'input' holds no message to answer", param="input")
        effort = self.reasoning_effort
        # none / minimal: thinking off; an effort asks for reasoning: thinking on where it switches
        thinking = None if effort is None else effort not in ("none", "minimal")
        kwargs, effort = reasoning_switches(format, thinking=thinking, effort="none" if effort == "minimal" else effort)
        return ChatRequest(
            messages=messages,
            model=self.model,
            tools=self.offered or None,
            tool_choice=self.tool_choice,
            parallel_tool_calls=self.parallel_tool_calls,
            max_tool_calls=self.max_tool_calls,
            max_tokens=self.max_output_tokens,
            fit_max_tokens=True,
            note_unusable_calls=True,
            tool_aliases=namespaced_aliases(self.namespaces),
            # Responses: a function is strict unless `strict: false` (OpenAI's Responses default)
            strict_tools=tuple(t["function"]["name"] for t in self.offered if t["function"].get("strict") is not False),
            temperature=self.temperature,
            top_p=self.top_p,
            stream=self.stream,
            chat_template_kwargs=kwargs,
            reasoning_effort=effort,
            effort=self.reasoning_effort,
            response_format=self.response_format,
            logprobs=self.logprobs,
            top_logprobs=self.top_logprobs,
        )

    def skeleton(self, *, id: str, model: str, created_at: int | None = None) -> dict:
        """The response object's fields that do not depend on the output."""
        return {
            "id": id,
            "object": "response",
            "created_at": int(time.time()) if created_at is None else created_at,
            "status": "in_progress",
            "background": False,
            "error": None,
            "incomplete_details": None,
            "instructions": self.instructions,
            "max_output_tokens": self.max_output_tokens,
            "max_tool_calls": self.max_tool_calls,
            "model": model,
            "output": [],
            "parallel_tool_calls": self.parallel_tool_calls,
            "previous_response_id": self.previous_response_id,
            "reasoning": {"effort": self.reasoning_effort, "summary": self.reasoning_summary},
            "service_tier": "default",
            "store": self.store,
            "temperature": self.temperature,
            "text": self.text,
            "tool_choice": self.tool_choice_echo,
            "tools": self.tools,
            "top_p": self.top_p,
            "top_logprobs": self.top_logprobs,
            "truncation": self.truncation,
            "usage": None,
            "user": self.user,
            "metadata": self.metadata,
        }


def parse_responses_request(body: Any, limits: RequestLimits | None = None) -> ResponsesRequest:
    """Validate a decoded JSON body; raise RequestError (HTTP 400) naming the bad field."""
    limits = limits or RequestLimits()
    get = Fields.of(body, limits)

    for name, what in (
        ("background", "background responses"),
        ("conversation", "conversations"),
        ("prompt", "stored prompts"),
    ):
        if body.get(name) not in (None, False):
            raise RequestError(
                f"'{name}' is not supported by this server ({what}); leave it out",
                param=name,
                code="unsupported_parameter",
            )

    model = get.string("model")
    previous = get.string("previous_response_id")
    media: list[str] = []  # images and files in tool outputs, left out of the prompt
    items = _input_items(body.get("input"), previous is not None, media)
    instructions = get.string("instructions")

    tools = body.get("tools")
    if tools is None:
        tools = []
    if not isinstance(tools, list):
        raise RequestError("'tools' must be an array", param="tools")
    offered, left_out, namespaces = shared.once(tools, "responses tools", _tools)
    tool_choice, offered = _tool_choice(body.get("tool_choice"), offered, left_out)

    # above the room the prompt leaves, it is lowered to that room (ChatRequest.fit_max_tokens)
    max_output_tokens = get.integer("max_output_tokens", minimum=1, maximum=max_tokens_ceiling(limits, fit=True))

    text = body.get("text")
    fmt = None
    text_echo: dict = {"format": {"type": "text"}}
    if text is not None:
        if not isinstance(text, dict):
            raise RequestError("'text' must be an object", param="text")
        fmt = _text_format(text.get("format"))
        text_echo = {k: v for k, v in text.items() if v is not None}
        text_echo.setdefault("format", {"type": "text"})

    reasoning = body.get("reasoning")
    effort = summary = None
    if reasoning is not None:
        if not isinstance(reasoning, dict):
            raise RequestError("'reasoning' must be an object", param="reasoning")
        effort = reasoning.get("effort")
        if effort is not None and effort not in ("none", "minimal", "low", "medium", "high", "xhigh"):
            raise RequestError(
                "'reasoning.effort' must be one of none, minimal, low, medium, high, xhigh",
                param="reasoning.effort",
            )
        summary = reasoning.get("summary") or reasoning.get("generate_summary")
        if summary is not None and not isinstance(summary, str):
            raise RequestError("'reasoning.summary' must be a string", param="reasoning.summary")

    metadata = body.get("metadata")
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise RequestError("'metadata' must be an object of string values", param="metadata")
    if len(metadata) > MAX_METADATA_KEYS:
        raise RequestError(f"'metadata' may hold at most {MAX_METADATA_KEYS} keys", param="metadata")

    truncation = get.string("truncation") or "disabled"
    if truncation not in ("auto", "disabled"):
        raise RequestError("'truncation' must be 'auto' or 'disabled'", param="truncation")
    include = body.get("include")
    if include is not None and not (isinstance(include, list) and all(isinstance(s, str) for s in include)):
        raise RequestError("'include' must be an array of strings", param="include")
    top_logprobs = get.integer("top_logprobs", minimum=0, maximum=20) or 0
    max_tool_calls = get.integer("max_tool_calls", minimum=1, maximum=MAX_TOKENS_CEILING)

    parallel = get.boolean("parallel_tool_calls")
    store = get.boolean("store")
    return ResponsesRequest(
        input=items,
        model=model,
        instructions=instructions,
        previous_response_id=previous,
        store=True if store is None else store,
        stream=get.boolean("stream") or False,
        tools=tools,
        offered=offered,
        left_out=(*left_out, *media),
        namespaces=namespaces,
        tool_choice=tool_choice,
        tool_choice_echo=body.get("tool_choice") or "auto",
        parallel_tool_calls=True if parallel is None else parallel,
        max_tool_calls=max_tool_calls,
        max_output_tokens=max_output_tokens,
        temperature=get.number("temperature", minimum=0.0, maximum=2.0),
        top_p=get.number("top_p", minimum=0.0, maximum=1.0),
        response_format=fmt,
        text=text_echo,
        reasoning_effort=effort,
        reasoning_summary=summary,
        metadata=dict(metadata),
        user=get.string("user"),
        truncation=truncation,
        logprobs="message.output_text.logprobs" in (include or ()) or top_logprobs > 0,
        top_logprobs=top_logprobs,
    )


def _input_items(value: Any, has_previous: bool, media: list[str]) -> list[dict]:
    """The input as checked items, each with an id (a string input is one user message); an image
    or file in a tool's output becomes a placeholder text, named in `media`."""
    if isinstance(value, str):
        return [
            {
                "id": item_id("msg"),
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": value}],
            }
        ]
    if value is None and has_previous:
        return []
    if not isinstance(value, list) or (not value and not has_previous):
        raise RequestError("'input' must be a string or a non-empty array of items", param="input")
    return [_item(it, f"input[{i}]", media) for i, it in enumerate(value)]


def _item(it: Any, param: str, media: list[str]) -> dict:
    if not isinstance(it, dict):
        raise RequestError(f"{param} must be an object", param=param)
    kind = it.get("type")
    if kind is None and "role" in it:
        kind = "message"
    if kind == "message":
        role = it.get("role")
        if role not in INPUT_ROLES:
            raise RequestError(
                f"{param}.role must be one of {', '.join(sorted(INPUT_ROLES))}, got {role!r}",
                param=f"{param}.role",
            )
        content = it.get("content")
        if isinstance(content, str):
            parts = [{"type": "output_text" if role == "assistant" else "input_text", "text": content}]
        elif isinstance(content, list):
            parts = [_part(p, f"{param}.content[{j}]") for j, p in enumerate(content)]
        else:
            raise RequestError(
                f"{param}.content must be a string or an array of parts", param=f"{param}.content"
            )
        return {
            "id": _str(it, "id", param) or item_id("msg"),
            "type": "message",
            "role": role,
            "content": parts,
            **({"status": it["status"]} if isinstance(it.get("status"), str) else {}),
        }
    if kind == "function_call":
        call_id = _required_str(it, "call_id", param)
        name = _required_str(it, "name", param)
        args = it.get("arguments", "{}")
        if isinstance(args, dict):
            args = dumps(args).decode()
        if not isinstance(args, str):
            raise RequestError(f"{param}.arguments must be a JSON string", param=f"{param}.arguments")
        out = {
            "id": _str(it, "id", param) or item_id("fc"),
            "type": "function_call",
            "call_id": call_id,
            "name": name,
            "arguments": args,
            "status": "completed",
        }
        namespace = _str(it, "namespace", param)
        if namespace:
            out["namespace"] = namespace
        return out
    if kind == "function_call_output":
        call_id = _required_str(it, "call_id", param)
        output = it.get("output")
        if isinstance(output, list):
            pieces = [_output_part(p, f"{param}.output[{j}]", media) for j, p in enumerate(output)]
            # text parts join as written; a placeholder stands on a line of its own
            output = "".join(
                ("\n" if j and (placed or pieces[j - 1][1]) else "") + text for j, (text, placed) in enumerate(pieces)
            )
        if not isinstance(output, str):
            raise RequestError(
                f"{param}.output must be a string or an array of text, image or file parts", param=f"{param}.output"
            )
        return {
            "id": _str(it, "id", param) or item_id("fco"),
            "type": "function_call_output",
            "call_id": call_id,
            "output": output,
            "status": "completed",
        }
    if kind == "reasoning":  # its text parts are checked; encrypted_content is ignored
        for key, part_type in (("content", "reasoning_text"), ("summary", "summary_text")):
            parts = it.get(key)
            if parts is None:
                continue
            if not isinstance(parts, list):
                raise RequestError(f"{param}.{key} must be an array", param=f"{param}.{key}")
            for j, p in enumerate(parts):
                if not (isinstance(p, dict) and isinstance(p.get("text"), str)):
                    raise RequestError(
                        f"{param}.{key}[{j}] must be a {part_type} part with text",
                        param=f"{param}.{key}[{j}]",
                    )
        content = [{"type": "reasoning_text", "text": p["text"]} for p in it.get("content") or []]
        summary = [{"type": "summary_text", "text": p["text"]} for p in it.get("summary") or []]
        return {
            "id": _str(it, "id", param) or item_id("rs"),
            "type": "reasoning",
            "summary": summary,
            "content": content,
        }
    if kind == "item_reference":
        raise RequestError(
            f"{param} is an item_reference: this server does not resolve item references; "
            "send the item itself, or continue with previous_response_id",
            param=param,
            code="unsupported_item",
        )
    raise RequestError(
        f"{param} has type {kind!r}; this server takes message, function_call, function_call_output "
        "and reasoning items",
        param=f"{param}.type",
        code="unsupported_item",
    )


def _part(p: Any, param: str) -> dict:
    kind = p.get("type") if isinstance(p, dict) else None
    if kind in _TEXT_PARTS:
        if not isinstance(p.get("text"), str):
            raise RequestError(f"{param} has no text string", param=param)
        return {"type": kind, "text": p["text"], **({"annotations": []} if kind == "output_text" else {})}
    if kind == "refusal":
        if not isinstance(p.get("refusal"), str):
            raise RequestError(f"{param} has no refusal string", param=param)
        return {"type": "refusal", "refusal": p["refusal"]}
    if kind in _MEDIA_PARTS:
        raise RequestError(
            f"{param} is an {kind} part: this server serves a text-only model; send text parts "
            "(input_text) only",
            param=param,
            code="unsupported_content",
        )
    raise RequestError(f"{param} must be a text part (input_text / output_text), got {kind!r}", param=param)


def _output_part(p: Any, param: str, media: list[str]) -> tuple[str, bool]:
    """A part of a tool's output as text, and whether it is a placeholder: an image or file
    (Codex's view_image, an MCP tool's picture) becomes one -- the served model reads text only --
    named in `media`, so a session that met one goes on; any other part is checked as `_part`
    checks it."""
    kind = p.get("type") if isinstance(p, dict) else None
    if kind in _MEDIA_PARTS:
        media.append(f"{kind}:{param}")
        url = p.get("image_url") or p.get("file_data") or ""
        media_type = url[5 : url.find(";")] if isinstance(url, str) and url.startswith("data:") and ";" in url else None
        return media_placeholder("image" if "image" in kind else "file", p, media_type or p.get("filename")), True
    return _part_text(_part(p, param)), False


def _str(it: dict, key: str, param: str) -> str | None:
    v = it.get(key)
    if v is not None and not isinstance(v, str):
        raise RequestError(f"{param}.{key} must be a string", param=f"{param}.{key}")
    return v


def _required_str(it: dict, key: str, param: str) -> str:
    v = _str(it, key, param)
    if not v:
        raise RequestError(f"{param}.{key} must be a non-empty string", param=f"{param}.{key}")
    return v


def _part_text(p: dict) -> str:
    return p["refusal"] if p["type"] == "refusal" else p["text"]


def items_to_messages(items: Sequence[Mapping], instructions: str | None = None) -> list[dict]:
    """Checked items as OpenAI chat messages (before normalize_messages).

    An assistant turn is the run of assistant messages and function calls between other items;
    a reasoning item opens a turn and gives it its reasoning. Each tool result is named after the
    function its call_id called, for templates that print the name."""
    out: list[dict] = []
    if instructions:
        out.append({"role": "system", "content": instructions})
    turn: dict | None = None  # the assistant message being built
    names: dict[str, str] = {}

    def open_turn() -> dict:
        nonlocal turn
        if turn is None:
            turn = {"role": "assistant", "content": ""}
            out.append(turn)
        return turn

    for it in items:
        kind = it["type"]
        if kind == "reasoning":
            text = "".join(p["text"] for p in it.get("content") or it.get("summary") or [])
            if turn is not None and ("tool_calls" in turn or turn["content"]):
                turn = None  # reasoning after a turn's text or calls begins the next turn
            t = open_turn()
            t["reasoning_content"] = t.get("reasoning_content", "") + text
        elif kind == "message" and it["role"] == "assistant":
            if turn is not None and "tool_calls" in turn:
                turn = None
            t = open_turn()
            t["content"] += "".join(_part_text(p) for p in it["content"])
        elif kind == "function_call":
            t = open_turn()
            names[it["call_id"]] = it["name"]
            t.setdefault("tool_calls", []).append(
                {
                    "id": it["call_id"],
                    "type": "function",
                    "function": {"name": it["name"], "arguments": it["arguments"]},
                }
            )
        else:
            turn = None
            if kind == "message":
                out.append({"role": it["role"], "content": "".join(_part_text(p) for p in it["content"])})
            else:  # function_call_output
                msg = {"role": "tool", "tool_call_id": it["call_id"], "content": it["output"]}
                if it["call_id"] in names:
                    msg["name"] = names[it["call_id"]]
                out.append(msg)
    return out


# how a model may join a namespace and one of its functions into one name (Codex's MCP namespace
# `mcp__srv` and its `fetch_page`: `mcp__srv__fetch_page`)
_NAMESPACE_JOINS = ("__", "", ".", "/", ":")


def namespaced_aliases(namespaces: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """(joined name, function name) for each function offered inside a namespace: a call to the
    joined name is a call to the function. A joined name two functions could stand for, or that
    is itself a function's name, stands for none."""
    seen: dict[str, str | None] = {}
    for fn, ns in namespaces.items():
        for join in _NAMESPACE_JOINS:
            joined = f"{ns.rstrip('_.:/')}{join}{fn}"
            seen[joined] = fn if seen.get(joined, fn) == fn else None
    return tuple((alias, fn) for alias, fn in seen.items() if fn is not None and alias not in namespaces)


def _tools(tools: list) -> tuple[list[dict], list[str], dict[str, str]]:
    """(function tools offered, in chat-completions shape; left-out tools by label; namespaces)."""
    offered: list[dict] = []
    left_out: list[str] = []
    namespaces: dict[str, str] = {}

    def function(t: dict, param: str, namespace: str | None) -> None:
        name = t.get("name")
        if not isinstance(name, str) or not name:
            raise RequestError(f"{param}.name must be a non-empty string", param=f"{param}.name")
        params = t.get("parameters")
        if params is not None and not isinstance(params, dict):
            raise RequestError(f"{param}.parameters must be an object", param=f"{param}.parameters")
        if any(o["function"]["name"] == name for o in offered):
            if namespace is not None:  # a namespaced function whose name is taken stays out
                left_out.append(f"{namespace}.{name}")
                return
            raise RequestError(f"{param}: two tools are named {name!r}", param=f"{param}.name")
        if t.get("strict") is not None and not isinstance(t["strict"], bool):
            raise RequestError(f"{param}.strict must be true or false", param=f"{param}.strict")
        fn: dict = {"name": name}
        for key in ("description", "parameters", "strict"):
            if t.get(key) is not None:
                fn[key] = t[key]
        offered.append({"type": "function", "function": fn})
        if namespace is not None:
            namespaces[name] = namespace

    for i, t in enumerate(tools):
        param = f"tools[{i}]"
        if not isinstance(t, dict):
            raise RequestError(f"{param} must be an object", param=param)
        kind = t.get("type")
        if kind == "function":
            function(t, param, None)
        elif kind == "namespace":
            ns = t.get("name")
            inner = t.get("tools")
            if not isinstance(ns, str) or not isinstance(inner, list):
                raise RequestError(f"{param} (namespace) needs a name and a tools array", param=param)
            for j, s in enumerate(inner):
                sp = f"{param}.tools[{j}]"
                if isinstance(s, dict) and s.get("type") == "function":
                    function(s, sp, ns)
                else:
                    left_out.append(f"{ns}.{_label(s)}")
        elif isinstance(kind, str):
            left_out.append(_label(t))
        else:
            raise RequestError(f"{param}.type must be a string", param=f"{param}.type")
    # a function that a namespace offered first and a top-level function then took is fine:
    # names are unique across `offered` by construction
    return offered, left_out, namespaces


def _label(t: Any) -> str:
    if not isinstance(t, dict):
        return "?"
    kind = str(t.get("type"))
    name = t.get("name") or t.get("server_label")
    return f"{kind}:{name}" if isinstance(name, str) and name else kind


def _tool_choice(value: Any, offered: list[dict], left_out: list[str]) -> tuple[ToolChoice, list[dict]]:
    names = [t["function"]["name"] for t in offered]
    if value is None or value == "auto":
        return ToolChoice("auto"), offered
    if value in ("none", "required"):
        if value == "required" and not offered:
            raise RequestError("tool_choice 'required' needs a function tool in 'tools'", param="tool_choice")
        return ToolChoice(value), offered
    kind = value.get("type") if isinstance(value, dict) else None
    if kind == "function":
        name = value.get("name")
        if not isinstance(name, str):
            raise RequestError("tool_choice.name must be a string", param="tool_choice")
        if name not in names:
            raise RequestError(
                f"tool_choice names function {name!r}, which is not in 'tools'", param="tool_choice"
            )
        return ToolChoice("function", name), offered
    if kind == "allowed_tools":
        mode = value.get("mode", "auto")
        allowed = value.get("tools")
        if mode not in ("auto", "required") or not isinstance(allowed, list):
            raise RequestError(
                "tool_choice allowed_tools needs mode 'auto' or 'required' and a tools array",
                param="tool_choice",
            )
        wanted = {t.get("name") for t in allowed if isinstance(t, dict) and t.get("type") == "function"}
        subset = [t for t in offered if t["function"]["name"] in wanted]
        if mode == "required" and not subset:
            raise RequestError(
                "tool_choice allowed_tools 'required' names no offered function", param="tool_choice"
            )
        return ToolChoice(mode if subset else "none"), subset
    if isinstance(kind, str):
        raise RequestError(
            f"tool_choice asks for a {kind!r} tool, which this server cannot offer"
            + (f" (left out: {', '.join(left_out)})" if left_out else ""),
            param="tool_choice",
            code="unsupported_tool",
        )
    raise RequestError(
        "tool_choice must be 'auto', 'none', 'required', {'type': 'function', 'name': ...} "
        "or {'type': 'allowed_tools', ...}",
        param="tool_choice",
    )


def _text_format(value: Any) -> dict | None:
    """``text.format`` as the chat-completions ``response_format`` (None for plain text)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise RequestError("'text.format' must be an object", param="text.format")
    kind = value.get("type")
    if kind == "json_schema":
        if not isinstance(value.get("schema"), dict):
            raise RequestError(
                "'text.format.schema' must be an object (a JSON Schema)", param="text.format.schema"
            )
        wrapper = {
            k: value[k] for k in ("name", "schema", "strict", "description") if value.get(k) is not None
        }
        value = {"type": "json_schema", "json_schema": wrapper}
    try:
        return response_format(value)
    except RequestError:
        raise RequestError(
            "'text.format' must be {'type': 'text' | 'json_object' | 'json_schema', ...}", param="text.format"
        ) from None
