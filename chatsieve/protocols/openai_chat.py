"""OpenAI chat-completions protocol: request validation, parser events to chunks, the final response.

Sans-I/O like the rest of chatsieve: dicts in, dicts out; the server does the I/O.

The request becomes the shared `ChatRequest` (chatsieve.protocols.common, which states the
tool-choice policy); events become ``chat.completion.chunk`` SSE bytes or one ``chat.completion``.
"""

from __future__ import annotations

import functools
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from chatsieve import shared
from chatsieve._json import dumps, string
from chatsieve.events import (
    ContentDelta,
    Event,
    Message,
    MessageBuilder,
    ReasoningDelta,
    TokenLogprob,
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
    ToolCallFilter,
    ToolChoice,
    check_json_depth,
    finish_reason,
    json_depth_message,
    max_tokens_ceiling,
    response_format,
    runs,
    stop_strings,
    tool_name,
)

__all__ = [  # the shared names too, for the callers that import them from here
    "ChatRequest", "RequestError", "RequestLimits", "ToolCallFilter", "ToolChoice", "check_json_depth",
    "finish_reason", "json_depth_message", "OPENAI_CHAT", "ChunkStream", "CompletionCollector",
    "chat_completion", "error_body", "parse_chat_request", "sse", "sse_all", "usage",
]

ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
MAX_TOP_LOGPROBS = 20
SEED_RANGE = (-(2**63), 2**63 - 1)  # a 64-bit signed integer, as vLLM and SGLang take it
MAX_TOKEN_ID = 2**31 - 1  # logit_bias keys and top_k: the server bounds them by its vocabulary too


def error_body(
    message: str, *, type: str = "invalid_request_error", param: str | None = None, code: str | None = None
) -> dict:
    """OpenAI's error shape: ``{"error": {"message", "type", "param", "code"}}``."""
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


# ---------------------------------------------------------------- requests


def parse_chat_request(body: Any, limits: RequestLimits | None = None) -> ChatRequest:
    """Validate a decoded JSON body; raise RequestError (HTTP 400) naming the bad field."""
    limits = limits or RequestLimits()
    get = Fields.of(body, limits)

    n = get.integer("n", minimum=1)
    if n is not None and n != 1:
        raise RequestError("only n=1 is supported", param="n", code="unsupported_value")

    messages = get.value("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError("'messages' must be a non-empty array", param="messages")
    for i, m in enumerate(messages):
        _check_message(m, i)
    try:
        messages = order_tool_results(normalize_messages(messages))
    except MessageError as e:
        raise RequestError(str(e), param=e.param) from None

    tools = get.value("tools")
    if tools is not None:
        if not isinstance(tools, list):
            raise RequestError("'tools' must be an array", param="tools")
        shared.once(tools, "openai_chat tools checked", _check_tools)
        tools = tools or None
    tool_choice = _tool_choice(get.value("tool_choice"), tools)

    ceiling = max_tokens_ceiling(limits, fit=limits.fit_max_tokens)
    max_tokens = get.integer("max_completion_tokens", minimum=1, maximum=ceiling)
    if max_tokens is None:
        max_tokens = get.integer("max_tokens", minimum=1, maximum=ceiling)

    stops = stop_strings(get.value("stop"), limits, "stop")

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
    top_k = get.integer("top_k", minimum=-1, maximum=MAX_TOKEN_ID)
    effort = get.string("reasoning_effort")
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
        reasoning_effort=effort,
        effort=effort,
        # chat completions: a function is strict only with `strict: true` (OpenAI's default)
        strict_tools=shared.once(tools, "openai_chat strict tools", _strict_tools) if tools else (),
        reasoning_budget=_thinking_budget(get),
        top_k=None if top_k is None else max(top_k, 0),
        min_p=get.number("min_p", minimum=0.0, maximum=1.0),
        presence_penalty=get.number("presence_penalty", minimum=-2.0, maximum=2.0),
        frequency_penalty=get.number("frequency_penalty", minimum=-2.0, maximum=2.0),
        repetition_penalty=get.number("repetition_penalty", minimum=0.01, maximum=10.0),
        logit_bias=_logit_bias(get.value("logit_bias")),
        response_format=response_format(get.value("response_format")),
        fit_max_tokens=limits.fit_max_tokens,
    )


# vLLM's name for a reasoning budget on chat completions, and the name some clients send
BUDGET_FIELDS = ("thinking_token_budget", "max_reasoning_tokens")


def _thinking_budget(get: Fields) -> int | None:
    """The reasoning budget in tokens: ``thinking_token_budget`` (vLLM's field: a non-negative integer,
    -1 for none) or ``max_reasoning_tokens``; None when neither is given. Enforced by the server
    (the reasoning is closed where the budget runs out), whatever the engine."""
    budgets = {}
    for name in BUDGET_FIELDS:
        value = get.integer(name, minimum=-1, maximum=MAX_TOKENS_CEILING)
        if value is not None:
            budgets[name] = None if value == -1 else value
    if len(set(budgets.values())) > 1:
        raise RequestError(
            f"'thinking_token_budget' ({budgets['thinking_token_budget']}) and 'max_reasoning_tokens' "
            f"({budgets['max_reasoning_tokens']}) disagree: give one", param="thinking_token_budget"
        )
    return next(iter(budgets.values()), None)


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


def _check_tools(tools: list) -> bool:
    for i, t in enumerate(tools):
        _check_tool(t, i)
    return True


def _strict_tools(tools: list[dict]) -> tuple[str, ...]:
    return tuple(t["function"]["name"] for t in tools if t["function"].get("strict") is True)


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
    if fn.get("strict") is not None and not isinstance(fn["strict"], bool):
        raise RequestError(f"{param}.function.strict must be true or false", param=f"{param}.function.strict")


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
        if name not in {tool_name(t) for t in tools or ()}:
            raise RequestError(
                f"tool_choice names function {name!r}, which is not in 'tools'", param="tool_choice"
            )
        return ToolChoice("function", name)
    raise RequestError(
        "tool_choice must be 'auto', 'none', 'required' or {'type': 'function', 'function': {'name': ...}}",
        param="tool_choice",
    )


# ---------------------------------------------------------------- responses


def completion_id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex}"


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> dict:
    """OpenAI's usage: `prompt_tokens` includes the `cached_tokens` the engine's prefix cache served."""
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens},
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
        for kind, value, lps in runs(events):
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
        for kind, value, _ in runs(events):
            if kind == "content" or kind == "reasoning":
                out.append(self._text_chunk(kind, dumps(value)))
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

    def encode_text(self, kind: str, text: str) -> bytes | None:
        """`encode` of one reasoning or content delta (see `StreamEncoder.encode`); None with
        logprobs."""
        return None if self.logprobs else self._text_chunk(kind, string(text))

    def _text_chunk(self, kind: str, value: bytes) -> bytes:
        """The chunk of a reasoning or content delta whose text's JSON is `value`."""
        return value.join(self._text_frames[kind])

    def text_frames(self) -> dict[str, tuple[bytes, ...]] | None:
        """`encode_text`'s chunks as frames: for "reasoning" and "content", the parts that the
        text's JSON goes between (each two of them); None with logprobs. For the compiled text
        lane (`chatsieve._lane`), which writes ``value.join(frame)`` as `_text_chunk` does."""
        return None if self.logprobs else self._text_frames

    @functools.cached_property
    def _text_frames(self) -> dict[str, tuple[bytes, ...]]:
        head, tail = self._frame
        return {
            "content": (head + b'{"content":', b"}" + tail),
            "reasoning": (head + b'{"reasoning_content":', b',"reasoning":', b"}" + tail),
        }

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

    def __init__(self, request: ChatRequest | None = None, info: ResponseInfo | None = None) -> None:
        self.builder = MessageBuilder()
        self.content_logprobs: list[TokenLogprob] = []
        self.reasoning_logprobs: list[TokenLogprob] = []
        self.request = request
        self.info = info

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

    def body(self, outcome: Outcome) -> dict:
        """The ``chat.completion`` (the collector was made with the request and its info)."""
        req, info = self.request or ChatRequest(messages=[]), self.info or ResponseInfo(model="")
        return chat_completion(
            self.message,
            model=info.model,
            finish_reason=outcome.finish_reason,
            usage=usage(outcome.prompt_tokens, outcome.completion_tokens, outcome.cached_tokens),
            logprobs=req.logprobs,
            top_logprobs=req.top_logprobs,
            content_logprobs=self.content_logprobs,
            reasoning_logprobs=self.reasoning_logprobs,
            token_bytes=info.token_bytes,
        )


class ChatEncoder:
    """`ChunkStream` as the server's `StreamEncoder`: the role chunk first, ``[DONE]`` last."""

    def __init__(self, chunks: ChunkStream) -> None:
        self.chunks = chunks
        self.encode = chunks.encode
        self.encode_text = chunks.encode_text
        self.text_frames = chunks.text_frames

    def start(self) -> bytes:
        return sse(self.chunks.first())

    def finish(self, outcome: Outcome) -> bytes:
        end = self.chunks.finish(outcome.finish_reason, usage(outcome.prompt_tokens, outcome.completion_tokens, outcome.cached_tokens))
        return sse_all(end) + sse("[DONE]")

    def error(self, e: RequestError) -> bytes:
        return sse(OPENAI_CHAT.error_body(e)) + sse("[DONE]")

    def ping(self) -> bytes | None:
        return None


class OpenAIChat:
    """``POST /v1/chat/completions`` as a `chatsieve.protocols.common.ClientProtocol`."""

    name = "openai_chat"
    ping_interval: float | None = None  # chat completions has no keep-alive event

    def parse(self, body: Any, limits: RequestLimits) -> ParsedRequest:
        return ParsedRequest(parse_chat_request(body, limits))

    def encoder(self, request: ParsedRequest, info: ResponseInfo) -> ChatEncoder:
        req = request.chat
        return ChatEncoder(
            ChunkStream(
                model=info.model,
                logprobs=req.logprobs,
                top_logprobs=req.top_logprobs,
                include_usage=req.include_usage,
                token_bytes=info.token_bytes,
            )
        )

    def collector(self, request: ParsedRequest, info: ResponseInfo) -> CompletionCollector:
        return CompletionCollector(request.chat, info)

    def error_body(self, e: RequestError) -> dict:
        return error_body(e.message, type=e.type, param=e.param, code=e.code)


OPENAI_CHAT = OpenAIChat()


def sse(data: Mapping | str) -> bytes:
    """One server-sent event carrying JSON (or the literal ``[DONE]``)."""
    if isinstance(data, str):
        return f"data: {data}\n\n".encode()
    return b"data: " + dumps(data) + b"\n\n"


def sse_all(chunks: Iterable[Mapping]) -> bytes:
    """Several server-sent events in one buffer (one write to the client)."""
    return b"".join([b"data: " + dumps(c) + b"\n\n" for c in chunks])
