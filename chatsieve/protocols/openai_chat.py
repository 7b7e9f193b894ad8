"""OpenAI chat-completions protocol: request validation, parser events to chunks, the final response.

Sans-I/O like the rest of chatsieve: dicts in, dicts out; the server does the I/O.

Tool-choice policy (what chatsieve does where OpenAI would constrain decoding):

- A call is returned only if it names a function the prompt offered; any other call (to a
  function the request did not define, or made when no tools were offered) is dropped: it never
  reaches ``content`` (its markup is not text) and is counted in the server log.
- ``auto`` (the default): the request's tools are rendered into the prompt.
- ``none``: no tools are rendered, so the model is offered none, and no call is returned.
- ``required``: tools are rendered, and the engine is given a grammar (chatsieve.grammar) that
  forces at least one call, in the family's own syntax, whose arguments follow the tool's schema;
  a family, engine or schema the grammar cannot express is refused with a 400.
- named (``{"type": "function", "function": {"name": N}}``): only tool ``N`` is rendered, only
  calls to ``N`` are returned, and the grammar forces exactly one call to ``N``.
- ``response_format`` ``json_object`` / ``json_schema``: the engine constrains the reply to JSON
  (to the schema); not with tool_choice ``required`` or named, where the call grammar wins.
- ``parallel_tool_calls: false``: only the first returned call is kept; later ones are dropped.
"""

from __future__ import annotations

import functools
import math
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from chatsieve._json import dumps
from chatsieve.events import (
    ContentDelta,
    Dropped,
    Event,
    Message,
    MessageBuilder,
    ReasoningDelta,
    TokenLogprob,
    ToolCallArgsDelta,
    ToolCallEnd,
    ToolCallStart,
)
from chatsieve.messages import MessageError, normalize_messages

ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
MAX_TOP_LOGPROBS = 20
MAX_TOKENS_CEILING = 2**31 - 1  # no engine takes more; anything above is a client's mistake
SEED_RANGE = (-(2**63), 2**63 - 1)  # a 64-bit signed integer, as vLLM and SGLang take it
MAX_TOKEN_ID = 2**31 - 1  # logit_bias keys and top_k: the server bounds them by its vocabulary too


@dataclass(frozen=True)
class RequestLimits:
    """What a request may ask for (the server's --max-stop-strings, ... options).

    OpenAI allows 4 stop strings; the default here is larger but bounded, since every stop
    string is matched against the whole output. `max_model_len` (the model's context), when
    known, bounds `max_tokens`.
    """

    max_stop_strings: int = 16
    max_stop_length: int = 256  # characters
    max_json_depth: int = 64  # nesting of objects and arrays in the request body
    max_model_len: int | None = None


# ---------------------------------------------------------------- errors


class RequestError(ValueError):
    """A request the server refuses, with the HTTP status and OpenAI's error fields."""

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        status: int = 400,
        type: str = "invalid_request_error",
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code
        self.status = status
        self.type = type

    def to_dict(self) -> dict:
        return error_body(self.message, type=self.type, param=self.param, code=self.code)


def error_body(
    message: str, *, type: str = "invalid_request_error", param: str | None = None, code: str | None = None
) -> dict:
    """OpenAI's error shape: ``{"error": {"message", "type", "param", "code"}}``."""
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


# ---------------------------------------------------------------- requests


@dataclass(frozen=True, slots=True)
class ToolChoice:
    mode: str  # "auto" | "none" | "required" | "function"
    name: str | None = None


@dataclass(frozen=True)
class ChatRequest:
    """A validated ``POST /v1/chat/completions`` body (unknown fields dropped)."""

    messages: list[dict]
    model: str | None = None
    tools: list[dict] | None = None
    tool_choice: ToolChoice = ToolChoice("auto")
    parallel_tool_calls: bool = True
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    stop: tuple[str, ...] = ()
    logprobs: bool = False
    top_logprobs: int = 0
    stream: bool = False
    include_usage: bool = False
    chat_template_kwargs: dict = field(default_factory=dict)
    reasoning_effort: str | None = None
    # passed to the engine (server/backends.py SAMPLING_FIELDS); enforced structure (grammar.py)
    top_k: int | None = None  # 0 or -1: no top-k cut
    min_p: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None
    logit_bias: tuple[tuple[int, float], ...] = ()
    response_format: dict | None = None

    @property
    def prompt_tools(self) -> list[dict] | None:
        """The tools rendered into the prompt and given to the parser (see the module docstring)."""
        if not self.tools or self.tool_choice.mode == "none":
            return None
        if self.tool_choice.mode == "function":
            return [t for t in self.tools if _tool_name(t) == self.tool_choice.name]
        return self.tools

    @property
    def thinking(self) -> bool | None:
        """``enable_thinking`` (or ``thinking``) from chat_template_kwargs; ``reasoning_effort: none``
        means off; otherwise None, the format's default."""
        for key in ("enable_thinking", "thinking"):
            value = self.chat_template_kwargs.get(key)
            if isinstance(value, bool):
                return value
        if self.reasoning_effort == "none":
            return False
        return None

    @property
    def template_kwargs(self) -> dict:
        """Extra variables for the chat template."""
        kwargs = dict(self.chat_template_kwargs)
        if self.reasoning_effort is not None:
            kwargs.setdefault("reasoning_effort", self.reasoning_effort)
            if self.reasoning_effort == "none":
                kwargs.setdefault("enable_thinking", False)
        return kwargs

    def tool_call_filter(self) -> ToolCallFilter:
        """Calls may name only the functions the prompt offered (see the module docstring)."""
        allowed = frozenset(n for n in map(_tool_name, self.prompt_tools or ()) if n)
        return ToolCallFilter(allowed=allowed, max_calls=None if self.parallel_tool_calls else 1)


def parse_chat_request(body: Any, limits: RequestLimits | None = None) -> ChatRequest:
    """Validate a decoded JSON body; raise RequestError (HTTP 400) naming the bad field."""
    limits = limits or RequestLimits()
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object")
    check_json_depth(body, limits.max_json_depth)
    get = _Fields(body)

    n = get.integer("n", minimum=1)
    if n is not None and n != 1:
        raise RequestError("only n=1 is supported", param="n", code="unsupported_value")

    messages = get.value("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError("'messages' must be a non-empty array", param="messages")
    for i, m in enumerate(messages):
        _check_message(m, i)
    try:
        messages = normalize_messages(messages)
    except MessageError as e:
        raise RequestError(str(e), param=e.param) from None

    tools = get.value("tools")
    if tools is not None:
        if not isinstance(tools, list):
            raise RequestError("'tools' must be an array", param="tools")
        for i, t in enumerate(tools):
            _check_tool(t, i)
        tools = tools or None
    tool_choice = _tool_choice(get.value("tool_choice"), tools)

    ceiling = min(MAX_TOKENS_CEILING, limits.max_model_len or MAX_TOKENS_CEILING)
    max_tokens = get.integer("max_completion_tokens", minimum=1, maximum=ceiling)
    if max_tokens is None:
        max_tokens = get.integer("max_tokens", minimum=1, maximum=ceiling)

    stop = get.value("stop")
    if stop is None:
        stops: tuple[str, ...] = ()
    elif isinstance(stop, str):
        stops = (stop,) if stop else ()
    elif isinstance(stop, list) and all(isinstance(s, str) for s in stop):
        stops = tuple(s for s in stop if s)
    else:
        raise RequestError("'stop' must be a string or an array of strings", param="stop")
    if len(stops) > limits.max_stop_strings:
        raise RequestError(
            f"'stop' may hold at most {limits.max_stop_strings} strings, got {len(stops)}", param="stop"
        )
    if any(len(s) > limits.max_stop_length for s in stops):
        raise RequestError(
            f"each stop string may be at most {limits.max_stop_length} characters long", param="stop"
        )

    logprobs = get.boolean("logprobs") or False
    top_logprobs = get.integer("top_logprobs", minimum=0, maximum=MAX_TOP_LOGPROBS)
    if top_logprobs is not None and not logprobs:
        raise RequestError("'top_logprobs' requires 'logprobs': true", param="top_logprobs")

    stream = get.boolean("stream") or False
    stream_options = get.value("stream_options")
    include_usage = False
    if stream_options is not None:
        if not isinstance(stream_options, dict):
            raise RequestError("'stream_options' must be an object", param="stream_options")
        value = stream_options.get("include_usage")
        if value is not None and not isinstance(value, bool):
            raise RequestError(
                "'stream_options.include_usage' must be a boolean", param="stream_options.include_usage"
            )
        include_usage = bool(value)

    kwargs = get.value("chat_template_kwargs")
    if kwargs is not None and not isinstance(kwargs, dict):
        raise RequestError("'chat_template_kwargs' must be an object", param="chat_template_kwargs")

    model = get.value("model")
    if model is not None and not isinstance(model, str):
        raise RequestError("'model' must be a string", param="model")

    parallel = get.boolean("parallel_tool_calls")
    response_format = _response_format(get.value("response_format"))
    top_k = get.integer("top_k", minimum=-1, maximum=MAX_TOKEN_ID)
    return ChatRequest(
        messages=messages,
        model=model,
        tools=tools,
        tool_choice=tool_choice,
        parallel_tool_calls=True if parallel is None else parallel,
        max_tokens=max_tokens,
        temperature=get.number("temperature", minimum=0.0, maximum=2.0),
        top_p=get.number("top_p", minimum=0.0, maximum=1.0),
        seed=get.integer("seed", minimum=SEED_RANGE[0], maximum=SEED_RANGE[1]),
        stop=stops,
        logprobs=logprobs,
        top_logprobs=top_logprobs or 0,
        stream=stream,
        include_usage=include_usage and stream,
        chat_template_kwargs=dict(kwargs or {}),
        reasoning_effort=get.string("reasoning_effort"),
        top_k=None if top_k is None else max(top_k, 0),
        min_p=get.number("min_p", minimum=0.0, maximum=1.0),
        presence_penalty=get.number("presence_penalty", minimum=-2.0, maximum=2.0),
        frequency_penalty=get.number("frequency_penalty", minimum=-2.0, maximum=2.0),
        repetition_penalty=get.number("repetition_penalty", minimum=0.01, maximum=10.0),
        logit_bias=_logit_bias(get.value("logit_bias")),
        response_format=response_format,
    )


def check_json_depth(value: Any, limit: int) -> None:
    """RequestError when objects and arrays nest deeper than `limit` (checked without recursion)."""
    stack = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        children = v.values() if isinstance(v, dict) else v if isinstance(v, list) else None
        if children is None:
            continue
        if depth > limit:
            raise RequestError(json_depth_message(limit), code="too_deeply_nested")
        stack.extend((c, depth + 1) for c in children if isinstance(c, dict | list))


def json_depth_message(limit: int) -> str:
    return f"the request body nests objects and arrays deeper than {limit} levels"
def _logit_bias(value: Any) -> tuple[tuple[int, float], ...]:
    """OpenAI's ``{"token id": bias}`` (bias in [-100, 100]) as sorted (id, bias) pairs."""
    if value is None:
        return ()
    if not isinstance(value, dict):
        raise RequestError("'logit_bias' must be an object mapping token ids to biases", param="logit_bias")
    pairs = []
    for key, bias in value.items():
        # ASCII digits only: "²" and "①" pass str.isdigit() but are no number int() reads
        if not (isinstance(key, str) and key.isascii() and key.isdigit() and int(key) <= MAX_TOKEN_ID):
            raise RequestError(
                f"'logit_bias' keys must be token ids (decimal integers), got {key[:40]!r}", param="logit_bias"
            )
        if not isinstance(bias, int | float) or isinstance(bias, bool) or not -100 <= bias <= 100:
            raise RequestError(f"'logit_bias' values must be numbers in [-100, 100], got {bias!r}", param="logit_bias")
        pairs.append((int(key), float(bias)))
    return tuple(sorted(pairs))


def _response_format(value: Any) -> dict | None:
    if value is None:
        return None
    kind = value.get("type") if isinstance(value, dict) else None
    if kind not in ("text", "json_object", "json_schema"):
        raise RequestError(
            "'response_format' must be {'type': 'text' | 'json_object' | 'json_schema', ...}",
            param="response_format",
        )
    if kind == "json_schema":
        wrapper = value.get("json_schema")
        if not isinstance(wrapper, dict) or not isinstance(wrapper.get("schema", {}), dict):
            raise RequestError(
                "'response_format.json_schema' must be an object with a 'schema' object",
                param="response_format.json_schema",
            )
    return None if kind == "text" else value


class _Fields:
    """Typed reads of optional top-level fields; null counts as absent, as in OpenAI's API."""

    def __init__(self, body: dict) -> None:
        self.body = body

    def value(self, name: str) -> Any:
        return self.body.get(name)

    def integer(self, name: str, *, minimum: int | None = None, maximum: int | None = None) -> int | None:
        v = self.body.get(name)
        if v is None:
            return None
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        if not isinstance(v, int) or isinstance(v, bool):
            raise RequestError(f"'{name}' must be an integer", param=name)
        _check_range(name, v, minimum, maximum)
        return v

    def number(
        self, name: str, *, minimum: float | None = None, maximum: float | None = None
    ) -> float | None:
        v = self.body.get(name)
        if v is None:
            return None
        if not isinstance(v, int | float) or isinstance(v, bool) or not math.isfinite(v):
            raise RequestError(f"'{name}' must be a number", param=name)
        _check_range(name, v, minimum, maximum)
        return float(v)

    def boolean(self, name: str) -> bool | None:
        v = self.body.get(name)
        if v is not None and not isinstance(v, bool):
            raise RequestError(f"'{name}' must be a boolean", param=name)
        return v

    def string(self, name: str) -> str | None:
        v = self.body.get(name)
        if v is not None and not isinstance(v, str):
            raise RequestError(f"'{name}' must be a string", param=name)
        return v


def _check_range(name: str, v: float, minimum: float | None, maximum: float | None) -> None:
    if minimum is not None and v < minimum:
        raise RequestError(f"'{name}' must be >= {minimum}, got {v}", param=name)
    if maximum is not None and v > maximum:
        raise RequestError(f"'{name}' must be <= {maximum}, got {v}", param=name)


def _check_message(m: Any, i: int) -> None:
    """The role; the rest of the message's shape is checked (and normalised) by normalize_messages."""
    param = f"messages[{i}]"
    if not isinstance(m, dict):
        raise RequestError(f"{param} must be an object", param=param)
    role = m.get("role")
    if role not in ROLES:
        raise RequestError(
            f"{param}.role must be one of {', '.join(sorted(ROLES))}, got {role!r}", param=f"{param}.role"
        )


def _tool_name(tool: dict) -> str | None:
    fn = tool.get("function") if isinstance(tool.get("function"), dict) else tool
    name = fn.get("name")
    return name if isinstance(name, str) else None


def _check_tool(t: Any, i: int) -> None:
    param = f"tools[{i}]"
    if not isinstance(t, dict):
        raise RequestError(f"{param} must be an object", param=param)
    if t.get("type", "function") != "function":
        raise RequestError(f"{param}.type must be 'function'", param=f"{param}.type")
    fn = t.get("function")
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
        raise RequestError(f"{param}.function.name must be a non-empty string", param=f"{param}.function")
    params = fn.get("parameters")
    if params is not None and not isinstance(params, dict):
        raise RequestError(f"{param}.function.parameters must be an object", param=f"{param}.function")


def _tool_choice(value: Any, tools: list[dict] | None) -> ToolChoice:
    if value is None:
        return ToolChoice("auto")
    if value in ("auto", "none", "required"):
        if value == "required" and not tools:
            raise RequestError("tool_choice 'required' needs 'tools'", param="tool_choice")
        return ToolChoice(value)
    if isinstance(value, dict) and value.get("type") == "function":
        fn = value.get("function")
        name = fn.get("name") if isinstance(fn, dict) else None
        if not isinstance(name, str):
            raise RequestError("tool_choice.function.name must be a string", param="tool_choice")
        if name not in {_tool_name(t) for t in tools or ()}:
            raise RequestError(
                f"tool_choice names function {name!r}, which is not in 'tools'", param="tool_choice"
            )
        return ToolChoice("function", name)
    raise RequestError(
        "tool_choice must be 'auto', 'none', 'required' or {'type': 'function', 'function': {'name': ...}}",
        param="tool_choice",
    )


# ---------------------------------------------------------------- tool-call policy


class ToolCallFilter:
    """Applies tool_choice / parallel_tool_calls to parser events.

    Calls that are not allowed disappear with all their events and are reported as Dropped;
    kept calls are renumbered 0, 1, ... so the client sees contiguous indexes.
    """

    def __init__(self, *, allowed: frozenset[str] | None = None, max_calls: int | None = None) -> None:
        self.allowed = allowed
        self.max_calls = max_calls
        self._map: dict[int, int | None] = {}  # parser index -> output index, None = dropped
        self._dropped_args: dict[int, list[str]] = {}
        self.kept = 0
        self.dropped: list[Dropped] = []

    def apply(self, events: Iterable[Event]) -> list[Event]:
        out: list[Event] = []
        for e in events:
            if isinstance(e, ToolCallStart):
                why = self._refusal(e.name)
                if why is None:
                    self._map[e.index] = self.kept
                    out.append(ToolCallStart(self.kept, e.id, e.name))
                    self.kept += 1
                else:
                    self._map[e.index] = None
                    self._dropped_args[e.index] = [why, e.name]
            elif isinstance(e, ToolCallArgsDelta | ToolCallEnd):
                j = self._map.get(e.index)
                if j is not None:
                    out.append(
                        ToolCallArgsDelta(j, e.json_text)
                        if isinstance(e, ToolCallArgsDelta)
                        else ToolCallEnd(j, e.incomplete)
                    )
                elif e.index in self._dropped_args:
                    if isinstance(e, ToolCallArgsDelta):
                        self._dropped_args[e.index].append(e.json_text)
                    else:
                        self._drop(e.index)
            else:
                out.append(e)
        return out

    def finish(self) -> None:
        """Report dropped calls that never saw their end event."""
        for index in list(self._dropped_args):
            self._drop(index)

    def _drop(self, index: int) -> None:
        why, name, *args = self._dropped_args.pop(index)
        self.dropped.append(Dropped(f"{name}({''.join(args)})", why))

    def _refusal(self, name: str) -> str | None:
        if self.allowed is not None and name not in self.allowed:
            if not self.allowed:
                return "no tools were offered (no tools, or tool_choice 'none')"
            return "the function was not offered (not in tools, or not the tool_choice function)"
        if self.max_calls is not None and self.kept >= self.max_calls:
            return "parallel_tool_calls is false; only the first call is kept"
        return None


def finish_reason(parser_reason: str | None, calls: int) -> str:
    """The OpenAI finish_reason: tool_calls when calls were returned, else length or stop."""
    if calls:
        return "tool_calls"
    if parser_reason == "length":
        return "length"
    return "stop"


# ---------------------------------------------------------------- responses


def completion_id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex}"


def usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


TokenBytes = Callable[[int], bytes]


def logprob_entries(
    logprobs: Iterable[TokenLogprob], top: int, token_bytes: TokenBytes | None = None
) -> list[dict]:
    """OpenAI's ``logprobs.content[]`` items: token, logprob, bytes, top_logprobs.

    `token_bytes(id)` gives a token's raw bytes, so that a character split over several
    tokens (an emoji in byte-level BPE) is rebuilt by joining ``bytes``; without it, and for
    the alternatives (known by text only), the text's UTF-8 is used.
    """
    out = []
    for lp in logprobs:
        raw = token_bytes(lp.token_id) if token_bytes is not None else lp.token.encode("utf-8")
        out.append(
            {
                "token": lp.token,
                "logprob": lp.logprob,
                "bytes": list(raw),
                "top_logprobs": [
                    {"token": t, "logprob": v, "bytes": list(t.encode("utf-8"))} for t, v in lp.top[:top]
                ],
            }
        )
    return out


class ChunkStream:
    """Parser events (already filtered) to ``chat.completion.chunk`` dicts for one choice.

    Adjacent deltas of one kind in one ``events()`` call are merged into one chunk; a tool call
    is announced by one chunk (index, id, type, name, arguments "") and then its argument
    fragments. Reasoning is sent as ``reasoning_content`` and, as vLLM does, ``reasoning``.
    Logprobs of content tokens go in ``logprobs.content``; those of reasoning tokens in
    ``logprobs.reasoning_content`` (an extension), so each list lines up with its own text.
    """

    def __init__(
        self,
        *,
        model: str,
        id: str | None = None,
        created: int | None = None,
        logprobs: bool = False,
        top_logprobs: int = 0,
        include_usage: bool = False,
        token_bytes: TokenBytes | None = None,
    ) -> None:
        self.id = id or completion_id()
        self.token_bytes = token_bytes
        self.model = model
        self.created = int(time.time()) if created is None else created
        self.logprobs = logprobs
        self.top_logprobs = top_logprobs
        self.include_usage = include_usage

    def first(self) -> dict:
        return self._chunk({"role": "assistant", "content": ""})

    def events(self, events: Iterable[Event]) -> list[dict]:
        chunks: list[dict] = []
        for kind, value, lps in _runs(events):
            if kind == "content":
                logprobs = {"content": self._entries(lps), "refusal": None} if self.logprobs else None
                chunks.append(self._chunk({"content": value}, logprobs=logprobs))
            elif kind == "reasoning":
                logprobs = (
                    {"content": None, "refusal": None, "reasoning_content": self._entries(lps)}
                    if self.logprobs
                    else None
                )
                chunks.append(
                    self._chunk({"reasoning_content": value, "reasoning": value}, logprobs=logprobs)
                )
            elif kind == "start":
                chunks.append(self._chunk({"tool_calls": [_call_start(value)]}))
            else:  # arguments of call `kind`
                chunks.append(
                    self._chunk({"tool_calls": [{"index": kind, "function": {"arguments": value}}]})
                )
        return chunks

    def encode(self, events: Iterable[Event]) -> bytes:
        """``sse_all(self.events(events))``, the same bytes, built without a dict per chunk."""
        if self.logprobs:
            return sse_all(self.events(events))
        head, tail = self._frame
        out: list[bytes] = []
        for kind, value, _ in _runs(events):
            if kind == "content":
                out += (head, b'{"content":', dumps(value), b"}", tail)
            elif kind == "reasoning":
                text = dumps(value)
                out += (head, b'{"reasoning_content":', text, b',"reasoning":', text, b"}", tail)
            elif kind == "start":
                out += (head, dumps({"tool_calls": [_call_start(value)]}), tail)
            else:
                out += (
                    head,
                    b'{"tool_calls":[{"index":%d,"function":{"arguments":' % kind,
                    dumps(value),
                    b"}}]}",
                    tail,
                )
        return b"".join(out)

    @functools.cached_property
    def _frame(self) -> tuple[bytes, bytes]:
        """What comes before and after the delta in a chunk without finish_reason or logprobs."""
        marker = "\x00delta\x00"
        whole = sse(self._chunk(marker))  # type: ignore[arg-type]
        head, _, tail = whole.partition(dumps(marker))
        return head, tail

    def finish(self, finish_reason: str, usage: dict | None = None) -> list[dict]:
        """The closing chunk with finish_reason, then the usage chunk if the client asked."""
        chunks = [self._chunk({}, finish_reason=finish_reason)]
        if self.include_usage and usage is not None:
            chunks.append(
                {
                    "id": self.id,
                    "object": "chat.completion.chunk",
                    "created": self.created,
                    "model": self.model,
                    "choices": [],
                    "usage": usage,
                }
            )
        return chunks

    def _entries(self, lps: list[TokenLogprob]) -> list[dict]:
        return logprob_entries(lps, self.top_logprobs, self.token_bytes)

    def _chunk(self, delta: dict, *, finish_reason: str | None = None, logprobs: dict | None = None) -> dict:
        chunk = {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish_reason}],
        }
        if self.include_usage:
            chunk["usage"] = None
        return chunk


def _call_start(e: ToolCallStart) -> dict:
    return {"index": e.index, "id": e.id, "type": "function", "function": {"name": e.name, "arguments": ""}}


def _runs(events: Iterable[Event]) -> Iterable[tuple[Any, Any, list[TokenLogprob]]]:
    """Adjacent deltas of one kind joined: ("content" | "reasoning", text, logprobs),
    (call index, arguments text, []), or ("start", ToolCallStart, []). Empty text is skipped;
    ToolCallEnd and Dropped have no wire form."""
    kind: Any = None
    texts: list[str] = []
    lps: list[TokenLogprob] = []
    for e in events:
        t = type(e)
        if t is ContentDelta or t is ReasoningDelta:
            k: Any = "content" if t is ContentDelta else "reasoning"
            text = e.text
        elif t is ToolCallArgsDelta:
            k = e.index
            text = e.json_text
        elif t is ToolCallStart:
            if kind is not None:
                joined = "".join(texts)
                if joined:
                    yield kind, joined, lps
                kind, texts, lps = None, [], []
            yield "start", e, []
            continue
        else:
            continue
        if k != kind:
            if kind is not None:
                joined = "".join(texts)
                if joined:
                    yield kind, joined, lps
            kind, texts, lps = k, [], []
        texts.append(text)
        if t is not ToolCallArgsDelta and e.logprobs:
            lps.extend(e.logprobs)
    if kind is not None:
        joined = "".join(texts)
        if joined:
            yield kind, joined, lps


def chat_completion(
    message: Message,
    *,
    model: str,
    finish_reason: str,
    usage: dict,
    logprobs: bool = False,
    top_logprobs: int = 0,
    reasoning_logprobs: list[TokenLogprob] | None = None,
    content_logprobs: list[TokenLogprob] | None = None,
    id: str | None = None,
    created: int | None = None,
    token_bytes: TokenBytes | None = None,
) -> dict:
    """The non-streaming ``chat.completion`` for one choice."""
    msg: dict[str, Any] = {
        "role": "assistant",
        "content": message.content,
        "reasoning_content": message.reasoning,
        "reasoning": message.reasoning,
        "tool_calls": [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in message.tool_calls
        ]
        or None,
    }
    choice_logprobs = None
    if logprobs:
        choice_logprobs = {
            "content": logprob_entries(content_logprobs or [], top_logprobs, token_bytes),
            "refusal": None,
            "reasoning_content": logprob_entries(reasoning_logprobs or [], top_logprobs, token_bytes),
        }
    return {
        "id": id or completion_id(),
        "object": "chat.completion",
        "created": int(time.time()) if created is None else created,
        "model": model,
        "choices": [
            {"index": 0, "message": msg, "logprobs": choice_logprobs, "finish_reason": finish_reason}
        ],
        "usage": usage,
    }


class CompletionCollector:
    """Folds filtered events into what ``chat_completion`` needs, keeping reasoning and content
    logprobs apart (Message.logprobs interleaves them)."""

    def __init__(self) -> None:
        self.builder = MessageBuilder()
        self.content_logprobs: list[TokenLogprob] = []
        self.reasoning_logprobs: list[TokenLogprob] = []

    def apply(self, events: Iterable[Event]) -> None:
        for e in events:
            self.builder.apply(e)
            if isinstance(e, ContentDelta) and e.logprobs:
                self.content_logprobs.extend(e.logprobs)
            elif isinstance(e, ReasoningDelta) and e.logprobs:
                self.reasoning_logprobs.extend(e.logprobs)

    @property
    def message(self) -> Message:
        return self.builder.message


def sse(data: Mapping | str) -> bytes:
    """One server-sent event carrying JSON (or the literal ``[DONE]``)."""
    if isinstance(data, str):
        return f"data: {data}\n\n".encode()
    return b"data: " + dumps(data) + b"\n\n"


def sse_all(chunks: Iterable[Mapping]) -> bytes:
    """Several server-sent events in one buffer (one write to the client)."""
    return b"".join([b"data: " + dumps(c) + b"\n\n" for c in chunks])
