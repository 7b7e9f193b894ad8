"""chatsieve inside SGLang's server: `--tool-call-parser chatsieve_F` renders and parses by token id.

    pip install 'chatsieve[sglang]'
    python -m sglang.launch_server --model-path MODEL --tool-call-parser chatsieve_qwen3 \\
        --reasoning-parser chatsieve_qwen3

SGLang loads this module's `register` from the entry-point group `sglang.srt.plugins` before it
parses its arguments. It registers, for every chatsieve format F, `chatsieve_F` as a tool-call
parser (`FunctionCallParser.ToolCallParserEnum`) and, for formats with reasoning markers, as a
reasoning parser (`ReasoningParser.DetectorMap`), so SGLang's argument parser accepts the names.
A server that names them serves its chat requests through SGLang's chat-encoding adapter route
(the one DeepSeek-V4 uses): `OpenAIServingChat` resolves the chat encoding spec "chatsieve"
(a HookRegistry hook on `_resolve_chat_encoding_spec`), whose adapter

- renders the prompt token ids with chatsieve (`encode_messages`: the model's chat template,
  every caller string isolated so that no message can spell a control token), and
- parses the output token ids (`output_ids`) with the gated StreamParser in `stream_chat_chunks`
  and `parse_chat_response`: a delimiter counts only as its own special-token id.

The detectors registered under the same names see text only (the delimiters are matched as
strings); SGLang uses them only where it has no token ids (its `/parse_function_call` and
`/separate_reasoning` endpoints). They are the fallback, not the serving path.

Written against SGLang SUPPORTED_SGLANG (tested with TESTED_SGLANG); importing it under another
SGLang, or one whose hooks differ, raises ImportError naming those versions.

Policies where SGLang leaves a choice (docs/integrations.md, "Inside SGLang"):
- chatsieve decides reasoning and calls together: `--tool-call-parser chatsieve_F` alone also
  separates reasoning; `--reasoning-parser chatsieve_F` alone returns no calls (SGLang parses none
  without a tool-call parser); chatsieve_F beside another parser is refused at start;
- calls are returned only for functions the request offered (`tools`, the named `tool_choice`),
  none for `tool_choice: "none"`, the first only when `parallel_tool_calls` is false; other calls
  are dropped and logged, never shown as content;
- `required` / named tool choice do not switch SGLang to JSON-constrained output: the model writes
  its native call syntax and chatsieve parses it;
- a call is released whole once complete (a call cut by max_tokens is never executed); with
  CHATSIEVE_STREAM_ARGUMENTS=1 in the server's environment, arguments stream as they arrive;
- thinking: `chat_template_kwargs.enable_thinking` (or `thinking`), `reasoning_effort: "none"` means
  off, else the format's default; `separate_reasoning: false` sends the reasoning as content text;
- stop strings and stop token ids are cut by chatsieve from the ids (`no_stop_trim` keeps a stop
  string); tool-call ids are chatsieve's (the family's convention);
- image, audio and video parts are refused (400): chatsieve renders text prompts; so is
  `continue_final_message` (a trailing assistant message is rendered as a finished turn).
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .. import formats
from ..detect import AUTO, resolve
from ..events import ContentDelta, Event, ToolCallEnd
from ..parser import StreamParser, parse
from ..preparation import parser_prompt, render_request_prompt
from ..protocols.common import ChatRequest, RequestError, ToolCallFilter, runs
from ..protocols.openai_chat import parse_chat_request
from .hf_tokenizer import chatsieve_tokenizer, prompt_tail, stream_arguments_from_env
from .versions import installed_version, release

_DISTRIBUTIONS = ("sglang",)  # whose installed version the gate reads
SUPPORTED_SGLANG = ">=0.5.23,<0.5.24"
TESTED_SGLANG = "0.5.23"
_SUPPORTED_RANGE = ((0, 5, 23), (0, 5, 24))
PARSER_PREFIX = "chatsieve_"
ENCODING_SPEC = "chatsieve"
RESOLVE_TARGET = "sglang.srt.entrypoints.openai.serving_chat.OpenAIServingChat._resolve_chat_encoding_spec"

log = logging.getLogger("chatsieve.sglang")


def _incompatible(reason: str) -> ImportError:
    return ImportError(
        f"chatsieve.integrations.sglang supports SGLang {SUPPORTED_SGLANG} (tested with {TESTED_SGLANG}); "
        f"the installed sglang {installed_version(*_DISTRIBUTIONS)} differs: {reason}. Install a supported one "
        "(pip install 'sglang==0.5.23'), or run `chatsieve serve` in front of SGLang instead."
    )


try:
    from sglang.srt.entrypoints.openai import chat_encoding_adapters as adapters
    from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest, FunctionResponse, ToolCall
    from sglang.srt.entrypoints.openai.serving_chat import OpenAIServingChat
    from sglang.srt.function_call.base_format_detector import BaseFormatDetector
    from sglang.srt.function_call.core_types import StreamingParseResult, ToolCallItem
    from sglang.srt.function_call.function_call_parser import FunctionCallParser
    from sglang.srt.parser import reasoning_parser as sglang_reasoning
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType
    from sglang.srt.runtime_context import get_serving
except ImportError as e:  # SGLang missing, or its modules moved
    if e.name in ("sglang", "sglang.srt"):
        raise ImportError(
            "chatsieve.integrations.sglang needs SGLang 0.5.23: pip install 'sglang==0.5.23'"
        ) from e
    raise _incompatible(f"cannot import {e.name or e}") from e


# (owner, member) -> the parameters this adapter passes or receives by name
_CALLED = {
    (adapters, "select_new_output_ids"): (
        "output_ids", "num_consumed_tokens", "completion_tokens", "finish_reason_type", "incremental",
    ),
    (adapters, "token_output_sse_chunks"): (
        "chunk_id", "created", "model", "index", "usage", "logprobs", "reasoning", "content", "tool_calls",
    ),
    (adapters, "build_chat_encoding_adapter"): ("ctx",),
    (adapters, "has_chat_encoding_adapter"): ("chat_encoding_spec",),
    (adapters.ChatEncodingAdapter, "encode_messages"): ("messages", "request", "tools", "thinking", "image_data"),
    (adapters.ChatEncodingOutputAdapter, "parse_chat_response"): ("request", "output_ids", "finish_reason"),
    (adapters.ChatEncodingOutputAdapter, "stream_chat_chunks"): (
        "content", "index", "request", "created", "parser_dict", "has_tool_calls", "choice_logprobs",
        "finish_reason_type", "usage",
    ),
    (adapters.ChatEncodingOutputAdapter, "parse_responses_output"): (
        "request", "require_reasoning", "output_ids", "finish_reason", "separate_reasoning", "parse_tool_calls",
    ),
    (adapters.ChatEncodingOutputAdapter, "new_responses_stream"): (
        "request", "require_reasoning", "separate_reasoning", "parse_tool_calls",
    ),
    (OpenAIServingChat, "_resolve_chat_encoding_spec"): ("self",),
    (BaseFormatDetector, "detect_and_parse"): ("text", "tools"),
    (BaseFormatDetector, "parse_streaming_increment"): ("new_text", "tools"),
    (BaseFormatDetector, "finish"): ("tools",),
    (sglang_reasoning.BaseReasoningFormatDetector, "__init__"): (
        "think_start_token", "think_end_token", "force_reasoning", "stream_reasoning",
    ),
}  # fmt: skip


def _check_interfaces() -> None:
    """The version, and the names and parameters this adapter relies on (checked at import)."""
    installed = installed_version(*_DISTRIBUTIONS)
    low, high = _SUPPORTED_RANGE
    if installed != "unknown" and not (low <= release(installed)[:3] < high):
        raise _incompatible("a version this adapter was not written against")
    for (owner, name), params in _CALLED.items():
        member = getattr(owner, name, None)
        where = getattr(owner, "__name__", owner)
        if member is None:
            raise _incompatible(f"{where}.{name} is missing")
        got = inspect.signature(member).parameters
        missing = [p for p in params if p not in got]
        if missing:
            raise _incompatible(f"{where}.{name} has no parameter {', '.join(missing)}")
    if not isinstance(getattr(adapters, "_BUILDERS", None), dict):
        raise _incompatible("chat_encoding_adapters._BUILDERS (the chat encoding spec table) is missing")
    fields = set(getattr(adapters.ChatEncodingAdapterContext, "__struct_fields__", ()))
    missing = [
        f for f in ("tokenizer", "reasoning_parser", "tool_call_parser", "model_path") if f not in fields
    ]
    if missing:
        raise _incompatible(f"ChatEncodingAdapterContext has no field {', '.join(missing)}")
    if not isinstance(getattr(FunctionCallParser, "ToolCallParserEnum", None), dict):
        raise _incompatible("FunctionCallParser.ToolCallParserEnum is not a dict")
    if not isinstance(getattr(sglang_reasoning.ReasoningParser, "DetectorMap", None), dict):
        raise _incompatible("ReasoningParser.DetectorMap is not a dict")
    for model, names in (
        (ToolCall, ("id", "index", "type", "function")),
        (FunctionResponse, ("name", "arguments")),
        (ToolCallItem, ("tool_index", "name", "parameters")),
        (
            ChatCompletionRequest,
            ("separate_reasoning", "no_stop_trim", "stop_token_ids", "stream", "input_ids"),
        ),
    ):
        missing = [f for f in names if f not in model.model_fields]
        if missing:
            raise _incompatible(f"{model.__name__} has no field {', '.join(missing)}")
    if not callable(getattr(HookRegistry, "register", None)) or not isinstance(
        getattr(HookRegistry, "_hooks", None), dict
    ):
        raise _incompatible("HookRegistry.register / HookRegistry._hooks is missing")


_check_interfaces()


# ---------------------------------------------------------------- which format


def parser_names() -> list[str]:
    """The `--tool-call-parser` names registered with SGLang: `chatsieve_<format>` for every format."""
    return [PARSER_PREFIX + name for name in (*formats.names(), AUTO)]


def reasoning_parser_names() -> list[str]:
    """The `--reasoning-parser` names: `chatsieve_<format>` for the formats with reasoning markers
    (and chatsieve_auto)."""
    return [PARSER_PREFIX + name for name in formats.names() if formats.get(name).reasoning_close] + [
        PARSER_PREFIX + AUTO]


def _format_of(name: str | None) -> str | None:
    if not isinstance(name, str) or not name.startswith(PARSER_PREFIX):
        return None
    if name == PARSER_PREFIX + AUTO:
        return AUTO
    return formats.get(name[len(PARSER_PREFIX) :]).name


_AUTO_FORMAT: list[str] = []  # the format `auto` resolved to for this server's model (the text detectors' too)


def format_for_parsers(tool_call_parser: str | None, reasoning_parser: str | None) -> str | None:
    """The chatsieve format a server's parser flags name, or None when neither is chatsieve's.
    ValueError when they name two different formats, or chatsieve's beside another parser."""
    t_fmt, r_fmt = _format_of(tool_call_parser), _format_of(reasoning_parser)
    if t_fmt is None and r_fmt is None:
        return None
    if tool_call_parser and t_fmt is None or reasoning_parser and r_fmt is None:
        named = tool_call_parser if t_fmt is not None else reasoning_parser
        raise ValueError(
            f"{named} decides reasoning and tool calls together: name it for both --reasoning-parser and "
            f"--tool-call-parser (or for one of them alone), got --tool-call-parser {tool_call_parser} "
            f"--reasoning-parser {reasoning_parser}"
        )
    if t_fmt is not None and r_fmt is not None and t_fmt != r_fmt:
        raise ValueError(
            f"--tool-call-parser {tool_call_parser} and --reasoning-parser {reasoning_parser} name different "
            "chatsieve formats; name the same one for both"
        )
    return t_fmt or r_fmt


def _resolve_chat_encoding_spec(original, self) -> str | None:
    """OpenAIServingChat._resolve_chat_encoding_spec: "chatsieve" when the server names chatsieve's parsers."""
    if format_for_parsers(self.tool_call_parser, self.reasoning_parser) is not None:
        return ENCODING_SPEC
    return original(self)


# ---------------------------------------------------------------- one request


@dataclass(frozen=True)
class Rendered:
    """What encode_messages decided for a request, kept on it for the output parser."""

    request: ChatRequest
    prompt: str  # the rendered prompt text: its tail tells the parser where the output starts


_RENDERED_ATTR = "_chatsieve_rendered"


def _wire(request: Any) -> dict:
    """The client's chat-completions body as SGLang holds it (unset fields left out)."""
    return request.model_dump(exclude_unset=True, by_alias=True, mode="json")


_MEDIA = ("image_url", "input_image", "image", "audio_url", "input_audio", "video_url", "video")


def _refuse_media(body: dict) -> None:
    for i, message in enumerate(body.get("messages") or ()):
        content = message.get("content") if isinstance(message, dict) else None
        for part in content if isinstance(content, list) else ():
            if isinstance(part, dict) and part.get("type") in _MEDIA:
                raise ValueError(
                    f"messages[{i}] has a {part['type']} part: chatsieve renders text prompts only; "
                    "send text, or serve this model without --tool-call-parser chatsieve_*"
                )


class OutputSession:
    """One choice's output: the gated StreamParser, the tool-call policy, and what SGLang asks of
    the object it keeps in `parser_dict` (tokens consumed, calls left incomplete)."""

    def __init__(
        self,
        format: str,
        tokenizer: Any,
        *,
        request: Any,
        tools: list[dict] | None,
        thinking: bool | None,
        prompt: str,
        stop: Sequence[str],
        calls: ToolCallFilter,
        separate_reasoning: bool,
    ) -> None:
        stop_ids = set(tokenizer.stop_token_ids) | set(getattr(request, "stop_token_ids", None) or ())
        self.parser = StreamParser(
            format,
            tools=tools,
            thinking=thinking,
            prompt=prompt,
            tokenizer=tokenizer,
            stop=list(stop) or None,
            stop_token_ids=sorted(stop_ids),
            include_stop_str_in_output=bool(getattr(request, "no_stop_trim", False)),
            stream_arguments=stream_arguments_from_env(),
            keep_logprobs=False,
        )
        self.calls = calls
        self.separate_reasoning = separate_reasoning
        self.num_consumed_tokens = 0
        self.incomplete: set[int] = set()  # calls cut short (only with argument streaming)
        self.complete_calls = 0
        self.finished = False

    @property
    def incomplete_tool_call_indices(self) -> set[int]:
        """What SGLang asks before it turns a stream's "stop" into "tool_calls": the cut calls, but
        only when no call completed (a complete call makes the finish "tool_calls")."""
        return set() if self.complete_calls else set(self.incomplete)

    def feed(self, ids: Sequence[int]) -> list[Event]:
        self.num_consumed_tokens += len(ids)
        if self.finished or not ids:
            return []
        try:
            events = self.parser.feed(token_ids=list(ids))
        except Exception:  # chatsieve never raises on model output; a bug must not end the stream
            log.exception("chatsieve: parser failed on an engine step; its text is kept as content")
            events = [ContentDelta(self.parser.tokenizer.decode(list(ids)))]
        return self._kept(events)

    def finish(self, ids: Sequence[int], finish_reason: dict | None) -> list[Event]:
        events = self.feed(ids)
        if self.finished:
            return events
        self.finished = True
        # "length" is news to the parser; at a stop (an end token, a stop string) it has seen the
        # ids itself and judges whether the output ended inside a call (then cut, never executed)
        kind = (finish_reason or {}).get("type")
        events += self._kept(self.parser.finish("length" if kind == "length" else None))
        self.calls.finish()
        for d in self.calls.dropped:
            log.info("chatsieve: dropped call %s: %s", d.raw[:200], d.why)
        return events

    def _kept(self, events: list[Event]) -> list[Event]:
        events = self.calls.apply(events) if events else events
        for e in events:
            if isinstance(e, ToolCallEnd):
                if e.incomplete:
                    self.incomplete.add(e.index)
                    log.info("chatsieve: call %d ended incomplete (output cut short)", e.index)
                else:
                    self.complete_calls += 1
        return events

    def pieces(self, events: list[Event]) -> tuple[str, str, list[ToolCall]]:
        """The events of one step as SGLang's (reasoning, content, tool-call deltas): a call opens
        with its id and name (arguments ""), then its argument fragments follow."""
        reasoning: list[str] = []
        content: list[str] = []
        calls: list[ToolCall] = []
        for kind, value, _ in runs(events):
            if kind == "reasoning":
                (reasoning if self.separate_reasoning else content).append(value)
            elif kind == "content":
                content.append(value)
            elif kind == "start":
                calls.append(
                    ToolCall(
                        id=value.id,
                        index=value.index,
                        function=FunctionResponse(name=value.name, arguments=""),
                    )
                )
            else:
                calls.append(ToolCall(index=kind, function=FunctionResponse(arguments=value)))
        return "".join(reasoning), "".join(content), calls


class ChatsieveResponsesStream:
    """SGLang's ResponsesOutputStream (the /v1/responses streaming step) over an OutputSession."""

    def __init__(self, session: OutputSession) -> None:
        self.session = session
        self._incremental = get_serving().incremental_streaming_output

    def step(self, chunk: dict, finish_reason: dict | None) -> tuple[str, str, list[ToolCallItem]]:
        s = self.session
        ids = adapters.select_new_output_ids(
            output_ids=chunk.get("output_ids") or [],
            num_consumed_tokens=s.num_consumed_tokens,
            completion_tokens=chunk["meta_info"]["completion_tokens"],
            finish_reason_type=finish_reason["type"] if finish_reason else None,
            incremental=self._incremental,
        )
        events = s.feed(ids) if finish_reason is None else s.finish(ids, finish_reason)
        reasoning, content, calls = s.pieces(events)
        return reasoning, content, _call_items(calls)


def _call_items(calls: list[ToolCall]) -> list[ToolCallItem]:
    return [
        ToolCallItem(tool_index=c.index, name=c.function.name, parameters=c.function.arguments or "")
        for c in calls
    ]


class ChatsieveChatEncodingAdapter:
    """SGLang's ChatEncodingAdapter and its output adapter, for the chat encoding spec "chatsieve"."""

    collects_openai_media = False  # text prompts only (media parts are refused)
    strict_tool_call_arguments = True  # history call arguments reach chatsieve as JSON text

    def __init__(self, *, format: str, tokenizer: Any, hooks: Any) -> None:
        self.format = resolve(format, tokenizer)
        if format == AUTO:
            _AUTO_FORMAT[:] = [self.format]
        self.tokenizer = tokenizer
        if tokenizer.chat_template is None:
            raise ValueError(
                f"chatsieve_{self.format}: the model's tokenizer has no chat template (tokenizer_config.json "
                "or chat_template.jinja); give the model directory one"
            )
        self._hooks = hooks

    @property
    def output(self) -> ChatsieveChatEncodingAdapter:
        return self

    # ---- prompt ----------------------------------------------------------------------
    def encode_messages(
        self, *, messages: list, request: Any, tools: list | None, thinking: bool, image_data: list
    ) -> list[int]:
        """The prompt ids, rendered by chatsieve from the client's own request (SGLang's copies of
        the messages and tools are not used: the request is read as chatsieve serve reads it)."""
        body = _wire(request)
        _refuse_media(body)
        last = (body.get("messages") or [{}])[-1]
        if body.get("continue_final_message") and isinstance(last, dict) and last.get("role") == "assistant":
            raise ValueError(
                "continue_final_message is not supported by chatsieve's prompts (a trailing assistant "
                "message is rendered as a finished turn); leave it out, or send the prompt as input_ids"
            )
        try:
            req = parse_chat_request(body)
            prompt = render_request_prompt(req, tokenizer=self.tokenizer, format=self.format, context=None)
        except RequestError as e:
            raise ValueError(e.message) from None  # SGLang answers a ValueError with its 400
        text = parser_prompt(prompt, format=self.format, tokenizer=self.tokenizer)  # never caller text's markers
        setattr(request, _RENDERED_ATTR, Rendered(req, text))
        return list(prompt.token_ids)

    def _session(self, request: Any) -> OutputSession:
        rendered = getattr(request, _RENDERED_ATTR, None)
        if rendered is None:  # the client sent prompt `input_ids`: SGLang rendered nothing
            try:
                req = parse_chat_request(_wire(request))
            except RequestError as e:
                raise ValueError(e.message) from None
            tail = prompt_tail(formats.get(self.format), request.input_ids, self.tokenizer)
            rendered = Rendered(req, tail or "")
        req = rendered.request
        active = self._hooks.tool_call_parsing_active(request)
        return OutputSession(
            self.format,
            self.tokenizer,
            request=request,
            tools=req.prompt_tools,
            thinking=req.thinking,
            prompt=rendered.prompt,
            stop=req.stop,
            calls=req.tool_call_filter() if active else ToolCallFilter(allowed=frozenset()),
            separate_reasoning=getattr(request, "separate_reasoning", True) is not False,
        )

    # ---- output: chat completions ----------------------------------------------------
    def parse_chat_response(
        self, *, request: Any, output_ids: list[int], finish_reason: dict
    ) -> tuple[str | None, str, list[ToolCall] | None, dict]:
        session = self._session(request)
        reasoning, content, pieces = session.pieces(session.finish(output_ids, finish_reason))
        calls = _whole_calls(pieces, session.incomplete)
        if calls and finish_reason.get("type") == "stop":
            finish_reason = {**finish_reason, "type": "tool_calls", "matched": None}
        return reasoning or None, content, calls or None, finish_reason

    def stream_chat_chunks(
        self,
        *,
        content: dict,
        index: int,
        request: Any,
        created: int,
        parser_dict: dict,
        has_tool_calls: dict,
        choice_logprobs: dict | None,
        finish_reason_type: str | None,
        usage: dict | None,
    ) -> list[str]:
        if index not in parser_dict:
            parser_dict[index] = self._session(request)
        session: OutputSession = parser_dict[index]
        ids = adapters.select_new_output_ids(
            output_ids=content.get("output_ids") or [],
            num_consumed_tokens=session.num_consumed_tokens,
            completion_tokens=content["meta_info"]["completion_tokens"],
            finish_reason_type=finish_reason_type,
            incremental=get_serving().incremental_streaming_output,
        )
        if finish_reason_type is None:
            events = session.feed(ids)
        else:
            events = session.finish(ids, content["meta_info"].get("finish_reason"))
        reasoning, text, calls = session.pieces(events)
        if any(c.function.name is not None for c in calls):
            has_tool_calls[index] = True
        return adapters.token_output_sse_chunks(
            chunk_id=content["meta_info"]["id"],
            created=created,
            model=request.model,
            index=index,
            usage=usage,
            logprobs=choice_logprobs,
            reasoning=reasoning,
            content=text,
            tool_calls=calls,
        )

    # ---- output: responses -----------------------------------------------------------
    def parse_responses_output(
        self,
        *,
        request: Any,
        require_reasoning: bool,
        output_ids: list[int],
        finish_reason: dict | None,
        separate_reasoning: bool,
        parse_tool_calls: bool,
    ) -> tuple[str, str, list[ToolCallItem]]:
        session = self._responses_session(request, parse_tool_calls, separate_reasoning)
        reasoning, content, pieces = session.pieces(session.finish(output_ids, finish_reason))
        return reasoning, content, _call_items(_whole_calls(pieces, session.incomplete))

    def new_responses_stream(
        self, *, request: Any, require_reasoning: bool, separate_reasoning: bool, parse_tool_calls: bool
    ) -> ChatsieveResponsesStream:
        return ChatsieveResponsesStream(
            self._responses_session(request, parse_tool_calls, separate_reasoning)
        )

    def _responses_session(self, request: Any, calls: bool, separate_reasoning: bool) -> OutputSession:
        """A /v1/responses output: its function tools are the calls allowed (the prompt was rendered
        for a chat request SGLang made from it, so no rendered prompt is at hand)."""
        tools = [
            {"type": "function", "function": {"name": t["name"], "parameters": t.get("parameters") or {}}}
            for t in _tool_dicts(getattr(request, "tools", None)) or ()
            if t.get("type") == "function" and isinstance(t.get("name"), str)
        ]
        allowed = frozenset(t["function"]["name"] for t in tools) if calls else frozenset()
        parallel = getattr(request, "parallel_tool_calls", True) is not False
        stop = getattr(request, "stop", None) or ()
        return OutputSession(
            self.format,
            self.tokenizer,
            request=request,
            tools=tools or None,
            thinking=None,
            prompt="",
            stop=[stop] if isinstance(stop, str) else list(stop),
            calls=ToolCallFilter(allowed=allowed, max_calls=None if parallel else 1),
            separate_reasoning=separate_reasoning,
        )


def _whole_calls(pieces: list[ToolCall], incomplete: set[int]) -> list[ToolCall]:
    """A finished output's call deltas joined into one ToolCall per call; a call cut short (only
    with argument streaming) is not returned: it is never executed."""
    calls: dict[int, ToolCall] = {}
    for p in pieces:
        if p.index in incomplete:
            continue
        if p.function.name is not None:
            calls[p.index] = ToolCall(
                id=p.id, index=p.index, function=FunctionResponse(name=p.function.name, arguments="")
            )
        elif p.index in calls:
            calls[p.index].function.arguments += p.function.arguments or ""
    return list(calls.values())


def _build_adapter(ctx: Any) -> ChatsieveChatEncodingAdapter | None:
    """The builder SGLang calls for the chat encoding spec "chatsieve" (once per server)."""
    if ctx.tokenizer is None:
        return None  # --skip-tokenizer-init: the server encodes no chat prompts
    fmt = format_for_parsers(ctx.tool_call_parser, ctx.reasoning_parser)
    if fmt is None:
        raise ValueError(
            "the chat encoding spec 'chatsieve' needs --tool-call-parser or --reasoning-parser chatsieve_<format>"
        )
    tokenizer = chatsieve_tokenizer(ctx.tokenizer, ctx.model_path)
    if tokenizer is None:
        raise ValueError(
            f"chatsieve_{fmt} parses token ids and needs the model's tokenizer files (tokenizer.json): none "
            f"found for {ctx.model_path!r}"
        )
    log.info("chatsieve: serving format %s (prompts rendered and output parsed by token id)", fmt)
    return ChatsieveChatEncodingAdapter(format=fmt, tokenizer=tokenizer, hooks=ctx.chat_hooks)


# ---------------------------------------------------------------- text-only detectors (fallback)


def _tool_dicts(tools: Sequence[Any] | None) -> list[dict] | None:
    out = [t.model_dump(exclude_none=True) if hasattr(t, "model_dump") else t for t in tools or ()]
    return [t for t in out if isinstance(t, dict)] or None


class ChatsieveToolDetector(BaseFormatDetector):
    """`--tool-call-parser chatsieve_F` as a text detector: chatsieve's text-mode parser (delimiters
    matched as strings, not gated). SGLang uses it only where it has no ids."""

    format_name: str = ""

    def __init__(self) -> None:
        super().__init__()
        if self.format_name == AUTO:  # the text fallback: the format the chat encoding adapter found
            if not _AUTO_FORMAT:
                raise ValueError("chatsieve_auto: the model's format is not known yet (no chat template read)")
            self.format_name = _AUTO_FORMAT[0]
        self._spec = formats.get(self.format_name)
        self._stream: StreamParser | None = None

    def has_tool_call(self, text: str) -> bool:
        return any(m in text for m in self._spec.call_open + self._spec.text_call_open)

    def detect_and_parse(self, text: str, tools: list) -> StreamingParseResult:
        dicts = _tool_dicts(tools)
        msg = parse(text, format=self.format_name, tools=dicts, thinking=False)
        index = {n: i for i, n in enumerate((t.get("function") or t).get("name") for t in dicts or ())}
        calls = [
            ToolCallItem(tool_index=index.get(c.name, -1), name=c.name, parameters=c.arguments)
            for c in msg.tool_calls
        ]
        return StreamingParseResult(normal_text=msg.content or "", calls=calls)

    def parse_streaming_increment(self, new_text: str, tools: list) -> StreamingParseResult:
        if self._stream is None:
            self._stream = StreamParser(self.format_name, tools=_tool_dicts(tools), thinking=False)
        return self._result(self._stream.feed(new_text))

    def finish(self, tools: list) -> StreamingParseResult:
        if self._stream is None:
            return StreamingParseResult()
        return self._result(self._stream.finish())

    @staticmethod
    def _result(events: list[Event]) -> StreamingParseResult:
        content: list[str] = []
        calls: list[ToolCallItem] = []
        for kind, value, _ in runs(events):
            if kind in ("content", "reasoning"):
                content.append(value)
            elif kind == "start":
                calls.append(ToolCallItem(tool_index=value.index, name=value.name, parameters=""))
            else:
                calls.append(ToolCallItem(tool_index=kind, parameters=value))
        return StreamingParseResult(normal_text="".join(content), calls=calls)

    def supports_structural_tag(self) -> bool:
        return False  # the model writes its native call syntax; no grammar is imposed

    def parses_required_natively(self) -> bool:
        return True  # tool_choice required / named: parsed from the native syntax, not forced JSON

    @classmethod
    def parses_without_tools(cls) -> bool:
        return True  # markup of an undeclared call is dropped by policy, never left in content

    def structure_info(self):
        raise NotImplementedError(f"chatsieve_{self.format_name} imposes no structural tag")


class ChatsieveReasoningDetector(sglang_reasoning.BaseReasoningFormatDetector):
    """`--reasoning-parser chatsieve_F` as a text detector: SGLang's marker splitter with the
    format's reasoning markers (matched as strings). SGLang uses it only where it has no ids."""

    format_name: str = ""

    def __init__(
        self,
        stream_reasoning: bool = True,
        force_reasoning: bool | None = None,
        continue_final_message: bool = False,
        previous_content: str = "",
    ) -> None:
        if self.format_name == AUTO:
            if not _AUTO_FORMAT:
                raise ValueError("chatsieve_auto: the model's format is not known yet (no chat template read)")
            self.format_name = _AUTO_FORMAT[0]
        spec = formats.get(self.format_name)
        super().__init__(
            spec.reasoning_open[0] if spec.reasoning_open else spec.reasoning_close[0],
            spec.reasoning_close[0],
            force_reasoning=bool(force_reasoning),
            stream_reasoning=stream_reasoning,
            continue_final_message=continue_final_message,
            previous_content=previous_content or "",
        )


# ---------------------------------------------------------------- registration


def register() -> None:
    """The `sglang.srt.plugins` entry point: chatsieve_F parser names, the "chatsieve" chat
    encoding spec, and the hook that selects it. Repeating it is harmless."""
    tool_map = FunctionCallParser.ToolCallParserEnum
    reasoning_map = sglang_reasoning.ReasoningParser.DetectorMap
    for fmt in (*formats.names(), AUTO):  # chatsieve_auto: the format the model's chat template writes
        name = PARSER_PREFIX + fmt
        attrs = {"format_name": fmt, "__module__": __name__}
        tool_map[name] = type(f"ChatsieveToolDetector_{fmt}", (ChatsieveToolDetector,), attrs)
        if fmt == AUTO or formats.get(fmt).reasoning_close:
            reasoning_map[name] = type(
                f"ChatsieveReasoningDetector_{fmt}", (ChatsieveReasoningDetector,), attrs
            )
    adapters._BUILDERS[ENCODING_SPEC] = {"builtin": _build_adapter}
    if not any(h is _resolve_chat_encoding_spec for _, h, _ in HookRegistry._hooks.get(RESOLVE_TARGET, ())):
        HookRegistry.register(RESOLVE_TARGET, _resolve_chat_encoding_spec, HookType.AROUND)
