"""OpenAI Responses protocol (``POST /v1/responses``): request items to the one internal request,
parser events to the Responses event stream and the final ``response`` object.

Sans-I/O like the rest of chatsieve: dicts in, dicts and bytes out; the server does the I/O
(the response store, previous_response_id lookups, the engine).

What a request becomes (decisions where the API leaves room):

- ``input`` items become chat messages in order: ``message`` (roles user / assistant / system /
  developer; text parts only, an image, file or audio part is a 400 naming it), ``function_call``
  (joined to the assistant turn it belongs to), ``function_call_output`` (a tool message, named
  after its call), ``reasoning`` (its text becomes the reasoning of the assistant turn that follows
  it, where the template renders reasoning). ``instructions`` become a leading system message
  (system / developer messages the template would drop reach it: see prompt.py).
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
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from chatsieve._json import Raw, dumps, loads
from chatsieve.events import (
    ContentDelta,
    Event,
    ReasoningDelta,
    TokenLogprob,
    ToolCallArgsDelta,
    ToolCallEnd,
    ToolCallStart,
)
from chatsieve.messages import MessageError, normalize_messages, order_tool_results
from chatsieve.protocols.common import (
    MAX_TOKENS_CEILING,
    ChatRequest,
    Fields,
    Outcome,
    ParsedRequest,
    RequestError,
    RequestLimits,
    ResponseInfo,
    ToolChoice,
    check_json_depth,
    left_out_headers,
    max_tokens_ceiling,
    media_placeholder,
    reasoning_switches,
    response_format,
)
from chatsieve.protocols.openai_chat import TokenBytes, error_body, logprob_entries

__all__ = [
    "OPENAI_RESPONSES",
    "ResponsesParsed",
    "ResponseStream",
    "ResponsesRequest",
    "input_items_page",
    "items_to_messages",
    "not_found",
    "parse_responses_request",
    "response_id",
    "response_object",
]

INPUT_ROLES = frozenset({"user", "assistant", "system", "developer"})
_TEXT_PARTS = frozenset({"input_text", "output_text", "text"})
_MEDIA_PARTS = frozenset({"input_image", "input_file", "input_audio", "image_url", "file"})
MAX_METADATA_KEYS = 16
PING_INTERVAL = 10.0  # seconds; Codex's idle timeout (stream_idle_timeout_ms) is 300 s by default


def response_id() -> str:
    return f"resp_{uuid.uuid4().hex}"


def _item_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def not_found(response_id: str) -> RequestError:
    """OpenAI's 404 for an unknown (or another key's) response id."""
    return RequestError(
        f"Response with id '{response_id}' not found.", param="response_id", code="not_found", status=404
    )


# ---------------------------------------------------------------- requests


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
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object")
    check_json_depth(body, limits.max_json_depth)
    get = Fields(body)

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
    offered, left_out, namespaces = _tools(tools)
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
                "id": _item_id("msg"),
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
            "id": _str(it, "id", param) or _item_id("msg"),
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
            "id": _str(it, "id", param) or _item_id("fc"),
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
            "id": _str(it, "id", param) or _item_id("fco"),
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
            "id": _str(it, "id", param) or _item_id("rs"),
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


# ---------------------------------------------------------------- responses


def usage(input_tokens: int, output_tokens: int, reasoning_tokens: int = 0, cached_tokens: int = 0) -> dict:
    """The Responses usage: `input_tokens` includes the `cached_tokens` the engine's cache served."""
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": cached_tokens, "cache_write_tokens": 0},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": min(reasoning_tokens, output_tokens)},
        "total_tokens": input_tokens + output_tokens,
    }


def response_object(
    skeleton: Mapping,
    output: list[dict],
    *,
    status: str,
    usage: dict | None,
    incomplete_reason: str | None = None,
    error: dict | None = None,
) -> dict:
    """The ``response`` object: `skeleton` (ResponsesRequest.skeleton) with its outcome."""
    return {
        **skeleton,
        "status": status,
        "output": output,
        "usage": usage,
        "incomplete_details": {"reason": incomplete_reason} if incomplete_reason else None,
        "error": error,
    }


class _Item:
    """One output item being built: its wire id, index, kind and text so far."""

    __slots__ = ("id", "index", "kind", "parts", "call_id", "name", "logprobs")

    def __init__(self, kind: str, index: int, id: str, call_id: str = "", name: str = "") -> None:
        self.kind = kind  # "reasoning" | "message" | "function_call"
        self.index = index
        self.id = id
        self.parts: list[str] = []
        self.call_id = call_id
        self.name = name
        # a message's token logprob entries, when asked for: their JSON, comma-separated, as they
        # were sent (a long answer's entries as Python objects would be many times their size)
        self.logprobs = bytearray()

    def logprobs_json(self) -> Raw | list:
        """The entries as one JSON array (spliced into the closing events as it is); [] for none."""
        return Raw(b"[" + self.logprobs + b"]") if self.logprobs else []


def _sse(kind: str, payload: dict) -> bytes:
    return b"event: " + kind.encode() + b"\ndata: " + dumps(payload) + b"\n\n"


class ResponseStream:
    """Parser events (already filtered) to Responses output items, and to their event stream.

    Adjacent deltas of one kind become one item (reasoning, message, function_call), in order; a
    change of kind closes the open item. `encode(events)` gives the SSE bytes of the deltas (an
    ``event:`` line and the JSON with its ``sequence_number``); with ``emit=False`` only the items
    are built (non-streaming). `output` is the finished items so far; `finish` closes the rest.
    `response` is then the response object, its logprobs as encoded JSON (`_json.Raw`: `dumps`
    writes it); `final` the same decoded.
    """

    def __init__(
        self,
        skeleton: dict,
        *,
        namespaces: Mapping[str, str] | None = None,
        emit: bool = True,
        logprobs: bool = False,
        top_logprobs: int = 0,
        token_bytes: TokenBytes | None = None,
        summary: bool = False,
    ) -> None:
        self.skeleton = skeleton
        self.summary = summary  # reasoning items carry their text as a summary part too
        self.logprobs = logprobs
        self.top_logprobs = top_logprobs
        self.token_bytes = token_bytes
        self.namespaces = dict(namespaces or {})
        self.emit = emit
        self.seq = 0
        self.output: list[dict] = []
        self._open: _Item | None = None
        self._calls: dict[int, _Item] = {}  # parser call index -> its open item
        self._buf: list[bytes] = []
        self._later: list[tuple[str, dict]] | None = None  # events kept unencoded (finish_parts)
        self._index: dict[str, int] = {}  # item id -> output_index
        self.response: dict | None = None

    @property
    def final(self) -> dict | None:
        """The response object as plain JSON values (its logprobs decoded)."""
        return None if self.response is None else loads(dumps(self.response))

    # -- the wire

    def _event(self, kind: str, fields: dict) -> None:
        if self.emit:
            payload = {"type": kind, "sequence_number": self.seq, **fields}
            if self._later is not None:
                self._later.append((kind, payload))
            else:
                self._buf.append(_sse(kind, payload))
        self.seq += 1

    def _take(self) -> bytes:
        out = b"".join(self._buf)
        self._buf.clear()
        return out

    def start(self) -> bytes:
        """``response.created`` and ``response.in_progress``."""
        self._event("response.created", {"response": self.skeleton})
        self._event("response.in_progress", {"response": self.skeleton})
        return self._take()

    def encode(self, events: Iterable[Event]) -> bytes:
        """The SSE bytes for `events`; adjacent deltas of one item go out as one delta event."""
        run: list[str] = []  # delta texts of `run_item` not yet sent
        run_lps: list[TokenLogprob] = []  # their tokens' logprobs (a message's, when asked for)
        run_item: _Item | None = None
        for e in events:
            t = type(e)
            if t is ContentDelta or t is ReasoningDelta:
                if not e.text:
                    continue
                kind = "message" if t is ContentDelta else "reasoning"
                item = self._open
                if item is None or item.kind != kind:
                    self._delta(run_item, run, run_lps)
                    item = self._open_item(kind)
                text = e.text
                if self.logprobs and e.logprobs and t is ContentDelta:
                    run_lps.extend(e.logprobs)
            elif t is ToolCallArgsDelta:
                item = self._calls.get(e.index)
                if item is None or not e.json_text:
                    continue
                text = e.json_text
            else:
                self._delta(run_item, run, run_lps)
                if t is ToolCallStart:
                    self._close_open()
                    call = self._new_item("function_call", "fc", e.id, e.name)
                    self._calls[e.index] = call
                    self._open = call
                    self._event(
                        "response.output_item.added",
                        {"output_index": call.index, "item": self._call_item(call, "in_progress")},
                    )
                elif t is ToolCallEnd:
                    done = self._calls.pop(e.index, None)
                    if done is not None:
                        self._close_call(done, "incomplete" if e.incomplete else "completed")
                continue
            if item is not run_item:
                self._delta(run_item, run, run_lps)
                run_item = item
            item.parts.append(text)
            run.append(text)
        self._delta(run_item, run, run_lps)
        return self._take()

    def _delta(self, item: _Item | None, run: list[str], lps: list[TokenLogprob]) -> None:
        """One delta event for `item` carrying the texts in `run` and their logprobs (both then
        emptied)."""
        if not run or item is None:
            return
        entries = b"[]"
        if lps:
            entries = dumps(logprob_entries(lps, self.top_logprobs, self.token_bytes))
            if item.logprobs:
                item.logprobs += b","
            item.logprobs += memoryview(entries)[1:-1]
            lps.clear()
        if self.emit:
            text = dumps(run[0] if len(run) == 1 else "".join(run))
            if item.kind == "function_call":
                self._buf.append(
                    b'event: response.function_call_arguments.delta\ndata: {"type":'
                    b'"response.function_call_arguments.delta","sequence_number":%d,"item_id":"%s",'
                    b'"output_index":%d,"delta":%s}\n\n' % (self.seq, item.id.encode(), item.index, text)
                )
            else:
                name = (
                    b"response.output_text.delta"
                    if item.kind == "message"
                    else b"response.reasoning_text.delta"
                )
                self._buf.append(
                    b'event: %s\ndata: {"type":"%s","sequence_number":%d,"item_id":"%s","output_index":%d,'
                    b'"content_index":0,"delta":%s%s}\n\n'
                    % (
                        name,
                        name,
                        self.seq,
                        item.id.encode(),
                        item.index,
                        text,
                        b',"logprobs":' + entries if item.kind == "message" else b"",
                    )
                )
                if self.summary and item.kind == "reasoning":
                    self.seq += 1
                    self._buf.append(
                        b'event: response.reasoning_summary_text.delta\ndata: {"type":'
                        b'"response.reasoning_summary_text.delta","sequence_number":%d,"item_id":"%s",'
                        b'"output_index":%d,"summary_index":0,"delta":%s}\n\n'
                        % (self.seq, item.id.encode(), item.index, text)
                    )
        elif self.summary and item.kind == "reasoning":
            self.seq += 1
        self.seq += 1
        run.clear()

    def _new_item(self, kind: str, prefix: str, call_id: str = "", name: str = "") -> _Item:
        item = _Item(kind, len(self._index), _item_id(prefix), call_id, name)
        self._index[item.id] = item.index
        return item

    def _open_item(self, kind: str) -> _Item:
        self._close_open()
        item = self._new_item(kind, "msg" if kind == "message" else "rs")
        self._open = item
        if kind == "message":
            added = {
                "id": item.id,
                "type": "message",
                "status": "in_progress",
                "role": "assistant",
                "content": [],
            }
            part: dict = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        else:
            added = {
                "id": item.id,
                "type": "reasoning",
                "summary": [],
                "content": [],
                "status": "in_progress",
            }
            part = {"type": "reasoning_text", "text": ""}
        self._event("response.output_item.added", {"output_index": item.index, "item": added})
        self._event(
            "response.content_part.added",
            {"item_id": item.id, "output_index": item.index, "content_index": 0, "part": part},
        )
        if self.summary and kind == "reasoning":
            self._event(
                "response.reasoning_summary_part.added",
                {"item_id": item.id, "output_index": item.index, "summary_index": 0,
                 "part": {"type": "summary_text", "text": ""}},
            )
        return item

    def _close_open(self, status: str = "completed") -> None:
        item, self._open = self._open, None
        if item is None or item.kind == "function_call":
            return  # calls close on their ToolCallEnd (or at finish)
        text = "".join(item.parts)
        where = {"item_id": item.id, "output_index": item.index, "content_index": 0}
        if item.kind == "message":
            logprobs = item.logprobs_json()
            item.logprobs = bytearray()
            part = {"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs}
            self._event("response.output_text.done", {**where, "text": text, "logprobs": logprobs})
            done = {
                "id": item.id,
                "type": "message",
                "status": status,
                "role": "assistant",
                "content": [part],
            }
        else:
            part = {"type": "reasoning_text", "text": text}
            self._event("response.reasoning_text.done", {**where, "text": text})
            summary = []
            if self.summary:  # the reasoning text itself, whole (docs/serving.md)
                summary = [{"type": "summary_text", "text": text}]
                at = {"item_id": item.id, "output_index": item.index, "summary_index": 0}
                self._event("response.reasoning_summary_text.done", {**at, "text": text})
                self._event("response.reasoning_summary_part.done", {**at, "part": summary[0]})
            done = {
                "id": item.id,
                "type": "reasoning",
                "summary": summary,
                "content": [part],
                "status": status,
            }
        self._event("response.content_part.done", {**where, "part": part})
        self._done(item, done)

    def _call_item(self, item: _Item, status: str) -> dict:
        out = {
            "id": item.id,
            "type": "function_call",
            "status": status,
            "call_id": item.call_id,
            "name": item.name,
            "arguments": "".join(item.parts) if status != "in_progress" else "",
        }
        ns = self.namespaces.get(item.name)
        if ns is not None:
            out["namespace"] = ns
        return out

    def _close_call(self, item: _Item, status: str) -> None:
        if self._open is item:
            self._open = None
        done = self._call_item(item, status)
        self._event(
            "response.function_call_arguments.done",
            {
                "item_id": item.id,
                "output_index": item.index,
                "name": item.name,
                "arguments": done["arguments"],
            },
        )
        self._done(item, done)

    def _done(self, item: _Item, done: dict) -> None:
        self._event("response.output_item.done", {"output_index": item.index, "item": done})
        # items finish in the order they were opened (one open text item; calls end in order)
        self.output.append(done)
        if len(self.output) > 1 and self._index[self.output[-2]["id"]] > item.index:
            self.output.sort(key=lambda d: self._index[d["id"]])  # a call that ended after a later item

    def close_items(self, *, cut: bool = False) -> None:
        """Close every open item (at the end of the output); `cut` (max_output_tokens) marks the
        item the output was cut in, and unfinished calls, incomplete."""
        self._close_open("incomplete" if cut else "completed")
        for index in sorted(self._calls):
            self._close_call(self._calls.pop(index), "incomplete" if cut else "completed")

    def keepalive(self) -> bytes:
        """A ``keepalive`` event (numbered like the others) for a stream the engine keeps silent:
        clients skip an event type they do not know (Codex, the openai SDK), but it resets their
        idle timeout, which a comment line would not (SSE readers drop comments unseen)."""
        self._event("keepalive", {})
        return self._take()

    def finish(self, *, usage: dict, incomplete_reason: str | None = None) -> bytes:
        """Close the open items, then ``response.completed`` (or ``response.incomplete``)."""
        return b"".join(self.finish_parts(usage=usage, incomplete_reason=incomplete_reason))

    def finish_parts(
        self, *, usage: dict, incomplete_reason: str | None = None, stored: Callable[[dict], None] | None = None
    ) -> Iterator[bytes]:
        """`finish`'s bytes an event at a time, each encoded when asked for: a long answer's
        logprob entries are in four of them, which need not all exist at once. `stored(response)`
        is called before the last event (the one that tells a client the response is done)."""
        if self._buf:
            yield self._take()
        self._later = []
        try:
            self.close_items(cut=incomplete_reason is not None)
            status = "incomplete" if incomplete_reason else "completed"
            self.response = response_object(
                self.skeleton, self.output, status=status, usage=usage, incomplete_reason=incomplete_reason
            )
            self._event(f"response.{status}", {"response": self.response})
            later, self._later = self._later, None
        finally:
            self._later = None
        while later:
            kind, payload = later.pop(0)
            if not later and stored is not None:
                stored(self.response)
            data = _sse(kind, payload)
            del payload
            yield data
            del data

    def fail(self, message: str, *, code: str = "server_error", usage: dict | None = None) -> bytes:
        """An ``error`` event, then ``response.failed`` with the items finished so far."""
        self._event("error", {"code": code, "message": message, "param": None})
        self.response = response_object(
            # the response's error.code is one of OpenAI's fixed set: ours goes in the error event
            self.skeleton,
            self.output,
            status="failed",
            usage=usage,
            error={"code": "server_error", "message": message},
        )
        self._event("response.failed", {"response": self.response})
        return self._take()


def input_items_page(
    items: Sequence[Mapping],
    *,
    after: str | None = None,
    before: str | None = None,
    limit: str | int | None = None,
    order: str | None = None,
) -> dict:
    """``GET /v1/responses/{id}/input_items``: one page of a response's input items
    (``order`` desc by default, as OpenAI's; ``after`` / ``before`` are item ids; limit 1..100)."""
    if order is None:
        order = "desc"
    if order not in ("asc", "desc"):
        raise RequestError("'order' must be 'asc' or 'desc'", param="order")
    try:
        n = 20 if limit is None else int(limit)
    except ValueError:
        n = 0
    if not 1 <= n <= 100:
        raise RequestError("'limit' must be an integer from 1 to 100", param="limit")
    seq = list(items) if order == "asc" else list(reversed(items))
    ids = [it.get("id") for it in seq]
    for name, cursor in (("after", after), ("before", before)):
        if cursor is not None and cursor not in ids:
            raise RequestError(f"'{name}' names no input item of this response: {cursor!r}", param=name)
    start = ids.index(after) + 1 if after is not None else 0
    stop = ids.index(before) if before is not None else len(seq)
    page = seq[start:stop][:n]
    return {
        "object": "list",
        "data": page,
        "first_id": page[0].get("id") if page else None,
        "last_id": page[-1].get("id") if page else None,
        "has_more": start + len(page) < stop,
    }


# ---------------------------------------------------------------- the protocol


@dataclass(frozen=True)
class ResponsesParsed(ParsedRequest):
    """A parsed Responses request: the internal request, the Responses fields, and what the
    server hands in -- `keep(response)` stores the finished response (store: true), and
    `count_tokens(text)` counts the reasoning tokens for usage."""

    request: ResponsesRequest | None = None
    keep: Callable[[dict], None] | None = None
    count_tokens: Callable[[str], int] | None = None


class _Outcomes:
    """Shared by the encoder and the collector: the response's skeleton and its ending.

    Closing a response stores it (`keep`) and counts its reasoning tokens, so closing blocks: the
    runner asks for the encoder's `finish_parts` and the collector's `body` (`blocking`) in a
    worker thread."""

    blocking = True

    def __init__(self, parsed: ResponsesParsed, info: ResponseInfo, emit: bool) -> None:
        assert parsed.request is not None
        self.parsed = parsed
        req = parsed.request
        self.out = ResponseStream(
            req.skeleton(id=response_id(), model=info.model),
            namespaces=req.namespaces,
            emit=emit,
            logprobs=req.logprobs,
            top_logprobs=req.top_logprobs,
            token_bytes=info.token_bytes,
            summary=req.reasoning_summary not in (None, "none"),
        )

    def _ending(self, outcome: Outcome) -> tuple[dict, str | None]:
        """(usage, incomplete reason) of the finished response."""
        reasoning = "".join(
            p["text"] for item in self.out.output if item["type"] == "reasoning" for p in item["content"]
        )
        count = self.parsed.count_tokens
        # the reasoning text's own tokens where it can be counted; the runner's count (tokens
        # before the first content or call) takes in the batch the content began in
        spent = count(reasoning) if reasoning and count else outcome.reasoning_tokens
        cut = outcome.finish_reason == "length"
        return (usage(outcome.prompt_tokens, outcome.completion_tokens, spent, outcome.cached_tokens),
                "max_output_tokens" if cut else None)


class ResponsesEncoder(_Outcomes):
    """The Responses event stream for one request (a `StreamEncoder`)."""

    def __init__(self, parsed: ResponsesParsed, info: ResponseInfo) -> None:
        super().__init__(parsed, info, emit=True)

    def start(self) -> bytes:
        return self.out.start()

    def encode(self, events: Iterable[Event]) -> bytes:
        return self.out.encode(events)

    def finish(self, outcome: Outcome) -> bytes:
        return b"".join(self.finish_parts(outcome))

    def finish_parts(self, outcome: Outcome) -> Iterator[bytes]:
        """The closing events one at a time, each encoded when asked for; the response is stored
        (`keep`) before the last, which tells the client it is done."""
        usage_, reason = self._ending(outcome)
        yield from self.out.finish_parts(usage=usage_, incomplete_reason=reason, stored=self.parsed.keep)

    def error(self, e: RequestError) -> bytes:
        return self.out.fail(e.message, code=e.code or "server_error")

    def ping(self) -> bytes | None:
        return self.out.keepalive()


class ResponsesCollector(_Outcomes):
    """The whole ``response`` object for one request (a `Collector`)."""

    def __init__(self, parsed: ResponsesParsed, info: ResponseInfo) -> None:
        super().__init__(parsed, info, emit=False)

    def apply(self, events: Iterable[Event]) -> None:
        self.out.encode(events)

    def body(self, outcome: Outcome) -> bytes:
        """The response object's JSON (stored first, with `keep`)."""
        usage_, reason = self._ending(outcome)
        self.out.finish(usage=usage_, incomplete_reason=reason)
        assert self.out.response is not None
        if self.parsed.keep is not None:
            self.parsed.keep(self.out.response)
        return dumps(self.out.response)


class OpenAIResponses:
    """``POST /v1/responses`` as a `chatsieve.protocols.common.ClientProtocol`.

    `parse` alone knows no earlier responses; the server's `parse_with(history, ...)` gives the
    items a previous_response_id stands for and the store's `keep`."""

    name = "openai_responses"
    # seconds of engine silence (a long prefill) before a `keepalive` event; sent until the engine
    # answers or the server's --backend-timeout gives up on it (then the stream fails)
    ping_interval: float | None = PING_INTERVAL

    def parse(self, body: Any, limits: RequestLimits) -> ResponsesParsed:
        return self.parse_with(parse_responses_request(body, limits))

    def parse_with(
        self,
        req: ResponsesRequest,
        history: Sequence[Mapping] = (),
        *,
        format: str | None = None,
        keep: Callable[[dict], None] | None = None,
        count_tokens: Callable[[str], int] | None = None,
    ) -> ResponsesParsed:
        headers = left_out_headers(req.left_out)
        return ResponsesParsed(
            chat=req.chat_request(history, format=format),
            headers=headers,
            request=req,
            keep=keep if req.store else None,
            count_tokens=count_tokens,
        )

    def encoder(self, request: ParsedRequest, info: ResponseInfo) -> ResponsesEncoder:
        assert isinstance(request, ResponsesParsed)
        return ResponsesEncoder(request, info)

    def collector(self, request: ParsedRequest, info: ResponseInfo) -> ResponsesCollector:
        assert isinstance(request, ResponsesParsed)
        return ResponsesCollector(request, info)

    def error_body(self, e: RequestError) -> dict:
        return error_body(e.message, type=e.type, param=e.param, code=e.code)


OPENAI_RESPONSES = OpenAIResponses()
