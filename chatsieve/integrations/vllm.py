"""chatsieve as vLLM's tool-call and reasoning parser: one `StreamParser` per request.

    vllm serve MODEL --tool-parser-plugin chatsieve.integrations.vllm \\
        --reasoning-parser-plugin chatsieve.integrations.vllm \\
        --tool-call-parser chatsieve_qwen3 --reasoning-parser chatsieve_qwen3 --enable-auto-tool-choice

Importing this module registers, for every chatsieve format `F` (`chatsieve.formats.names()`),
a tool parser and a reasoning parser named `chatsieve_F`. vLLM's `ParserManager` composes the
parsers a server names into one `Parser` per request; when they are chatsieve's it composes a
`ChatsieveParser` instead, which decides reasoning, content and calls together with a single
chatsieve parser, fed the delta's token ids (delimiters gated by id) when vLLM gives them and
its text otherwise. The reasoning parser alone is what vLLM's engine core uses for structured
outputs (is reasoning over at this token?), so it answers from the marker token ids.

Written against vLLM's interfaces of SUPPORTED_VLLM (tested with TESTED_VLLM); importing it
under a vLLM whose interfaces differ raises ImportError naming those versions.

Policies where vLLM leaves a choice (see docs/integrations.md, "Inside vLLM"):
- calls are returned only for functions the request offered (`tools`, the named
  `tool_choice`), none for `tool_choice: "none"`, the first only when
  `parallel_tool_calls` is false; other calls are dropped and logged, never shown as content;
- `required` / named tool choice do not switch vLLM to JSON-constrained output: the model
  writes its native call syntax and chatsieve parses it;
- a call is released whole once complete (a call cut by max_tokens is never executed); with
  CHATSIEVE_STREAM_ARGUMENTS=1 in the server's environment, arguments stream as they arrive;
- thinking: `chat_template_kwargs.enable_thinking` (or `thinking`), `reasoning_effort: "none"`
  means off, else the format's default; the prompt's tail (does it end inside a reasoning
  block?) is read from the prompt token ids.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Iterable, Sequence
from typing import Any

from .. import formats
from ..detect import AUTO, resolve
from ..events import (
    ContentDelta,
    Dropped,
    Event,
    MessageBuilder,
    ReasoningDelta,
    ToolCallArgsDelta,
    ToolCallEnd,
    ToolCallStart,
)
from ..parser import StreamParser, resolve_delimiters
from ..protocols.openai_chat import ToolCallFilter
from .hf_tokenizer import chatsieve_tokenizer, prompt_tail, stream_arguments_from_env
from .versions import installed_version

SUPPORTED_VLLM = ">=0.33,<0.34"
TESTED_VLLM = "0.33.0"
PARSER_PREFIX = "chatsieve_"

log = logging.getLogger("chatsieve.vllm")


def _incompatible(reason: str) -> ImportError:
    return ImportError(
        f"chatsieve.integrations.vllm supports vLLM {SUPPORTED_VLLM} (tested with {TESTED_VLLM}); "
        f"the installed vLLM {installed_version('vllm')} differs: {reason}. Install a supported vLLM "
        "(pip install 'vllm>=0.33,<0.34'), or run `chatsieve serve` in front of vLLM instead."
    )


try:
    from vllm.entrypoints.generate.base.protocol import (
        DeltaFunctionCall,
        DeltaMessage,
        DeltaToolCall,
        ExtractedToolCallInformation,
        FunctionCall,
        ToolCall,
    )
    from vllm.parser.abstract_parser import Parser
    from vllm.parser.parser_manager import ParserManager
    from vllm.reasoning import ReasoningParser, ReasoningParserManager
    from vllm.tool_parsers import ToolParser, ToolParserManager
except ImportError as e:  # vLLM missing, or its modules moved
    if e.name == "vllm":
        raise ImportError(
            f"chatsieve.integrations.vllm needs vLLM {SUPPORTED_VLLM}: pip install 'vllm>=0.33,<0.34'"
        ) from e
    raise _incompatible(f"cannot import {e.name or e}") from e


_original_compose = ParserManager.__dict__.get("_compose_parser")
if getattr(
    getattr(_original_compose, "__func__", None), "_chatsieve", False
):  # imported twice (as a file and as a module): keep the first wrapper's original
    _original_compose = _original_compose.__func__._chatsieve_original


def _check_interfaces() -> None:
    """The members this adapter calls or overrides, with the parameters it relies on."""
    wanted = {
        (Parser, "parse"): ("model_output", "request", "enable_auto_tools", "model_output_token_ids"),
        (Parser, "parse_delta"): ("delta_text", "delta_token_ids", "request", "prompt_token_ids", "finished"),
        (Parser, "is_reasoning_end"): ("input_ids",),
        (Parser, "set_prompt_token_ids"): ("prompt_token_ids",),
        (Parser, "adjust_request"): ("request",),
        (Parser, "count_reasoning_tokens"): ("token_ids",),
        (ReasoningParser, "is_reasoning_end_streaming"): ("input_ids", "delta_ids"),
        (ReasoningParser, "extract_content_ids"): ("input_ids",),
        (ToolParser, "extract_tool_calls"): ("model_output", "request"),
    }
    for (owner, name), params in wanted.items():
        member = getattr(owner, name, None)
        if member is None:
            raise _incompatible(f"{owner.__name__}.{name} is missing")
        got = inspect.signature(member).parameters
        missing = [p for p in params if p not in got]
        if missing:
            raise _incompatible(f"{owner.__name__}.{name} has no parameter {', '.join(missing)}")
    compose = getattr(_original_compose, "__func__", None)
    if compose is None:
        raise _incompatible("ParserManager._compose_parser is missing")
    missing = [
        p
        for p in ("tool_parser_name", "reasoning_parser_name", "enable_auto_tools", "tool_strict_level")
        if p not in inspect.signature(compose).parameters
    ]
    if missing:
        raise _incompatible(f"ParserManager._compose_parser has no parameter {', '.join(missing)}")
    for model, fields in (
        (DeltaMessage, ("content", "reasoning", "tool_calls")),
        (DeltaToolCall, ("id", "type", "index", "function")),
        (ExtractedToolCallInformation, ("tools_called", "tool_calls", "content")),
        (FunctionCall, ("id", "name", "arguments")),
    ):
        missing = [f for f in fields if f not in model.model_fields]
        if missing:
            raise _incompatible(f"{model.__name__} has no field {', '.join(missing)}")
    for manager in (ToolParserManager, ReasoningParserManager):
        if not callable(getattr(manager, "register_module", None)):
            raise _incompatible(f"{manager.__name__}.register_module is missing")


_check_interfaces()


# ---------------------------------------------------------------- request options


def _thinking(chat_template_kwargs: dict | None, request: Any) -> bool | None:
    """What the prompt asked for: enable_thinking / thinking, reasoning_effort "none" = off."""
    kwargs = chat_template_kwargs
    if kwargs is None:
        kwargs = getattr(request, "chat_template_kwargs", None) or {}
    for key in ("enable_thinking", "thinking"):
        value = kwargs.get(key)
        if isinstance(value, bool):
            return value
    if getattr(request, "reasoning_effort", None) == "none":
        return False
    return None


def _tool_dicts(tools: Iterable[Any] | None) -> list[dict]:
    """vLLM's tool models (or dicts) as OpenAI tool definitions."""
    out = []
    for t in tools or ():
        d = t.model_dump(exclude_none=True) if hasattr(t, "model_dump") else t
        if isinstance(d, dict):
            out.append(d)
    return out


def _tool_name(tool: dict) -> str | None:
    fn = tool.get("function") if tool.get("type", "function") == "function" else None
    name = (fn or tool).get("name") if isinstance(fn or tool, dict) else None
    return name if isinstance(name, str) else None


def _named_choice(request: Any) -> str | None:
    choice = getattr(request, "tool_choice", None)
    if choice is None or isinstance(choice, str):
        return None
    fn = getattr(choice, "function", None)
    name = getattr(fn, "name", None) or getattr(choice, "name", None)
    if name is None and isinstance(choice, dict):
        name = (choice.get("function") or {}).get("name") or choice.get("name")
    return name if isinstance(name, str) else None


# ---------------------------------------------------------------- one request


class RequestSession:
    """One output of one request: a chatsieve StreamParser, the tool-call policy, and the
    mapping of chatsieve events to vLLM deltas."""

    def __init__(
        self,
        format: str,
        *,
        tokenizer: Any,
        vllm_tokenizer: Any,
        request: Any,
        thinking: bool | None,
        prompt_token_ids: Sequence[int] | None,
        calls_enabled: bool,
        stream_arguments: bool,
    ) -> None:
        self.spec = formats.get(resolve(format, tokenizer or chatsieve_tokenizer(vllm_tokenizer)))
        self.tokenizer = tokenizer
        tools = _tool_dicts(getattr(request, "tools", None))
        named = _named_choice(request)
        if not calls_enabled or getattr(request, "tool_choice", None) == "none":
            allowed: frozenset[str] = frozenset()
        elif named is not None:
            allowed = frozenset({named})
        else:
            allowed = frozenset(n for n in map(_tool_name, tools) if n)
        parallel = getattr(request, "parallel_tool_calls", True)
        self.filter = ToolCallFilter(allowed=allowed, max_calls=1 if parallel is False else None)
        self._options: dict[str, Any] = {
            "tools": tools or None,
            "thinking": thinking,
            "prompt": prompt_tail(self.spec, prompt_token_ids, tokenizer, vllm_tokenizer),
            "stream_arguments": stream_arguments,
        }
        self._request = request
        self.parser: StreamParser | None = None  # made at the first input: token or text mode
        self.builder = MessageBuilder()
        self.include_reasoning = getattr(request, "include_reasoning", True) is not False
        self.finished = False

    # ---- input -----------------------------------------------------------------------
    def _start(self, token_mode: bool) -> StreamParser:
        options = dict(self._options)
        if token_mode:
            request = self._request
            # vLLM cuts stop strings and stop ids out of its text only: fed ids, chatsieve cuts them
            options.update(
                tokenizer=self.tokenizer,
                stop=getattr(request, "stop", None) or None,
                stop_token_ids=getattr(request, "stop_token_ids", None) or None,
                include_stop_str_in_output=bool(getattr(request, "include_stop_str_in_output", False)),
            )
        self.parser = StreamParser(self.spec, **options)
        return self.parser

    def feed(self, text: str | None, token_ids: Sequence[int] | None) -> list[Event]:
        """One engine step. Token mode (a tokenizer, and ids in the first step that has any
        input) reads the ids only: vLLM's text for them would say the same, and a delimiter
        counts only as its own id. Text mode reads the text."""
        if self.finished or not (text or token_ids):
            return []
        parser = self.parser or self._start(self.tokenizer is not None and bool(token_ids))
        try:
            if parser.tokenizer is not None:
                events = parser.feed(token_ids=list(token_ids)) if token_ids else []
            else:
                events = parser.feed(text or "")
        except Exception:  # chatsieve never raises on model output; a bug must not end the stream
            log.exception("chatsieve: parser failed on a delta; its text is kept as content")
            events = [ContentDelta(text)] if text else []
        return self._kept(events)

    def finish(self) -> list[Event]:
        if self.finished:
            return []
        self.finished = True
        events = self._kept((self.parser or self._start(False)).finish())
        self.filter.finish()
        for d in self.filter.dropped:
            log.info("chatsieve: dropped call %s: %s", d.raw[:200], d.why)
        return events

    def _kept(self, events: list[Event]) -> list[Event]:
        if not events:
            return events
        events = self.filter.apply(events)
        for e in events:
            self.builder.apply(e)
            if isinstance(e, Dropped):
                log.debug("chatsieve: dropped %r: %s", e.raw[:200], e.why)
            elif isinstance(e, ToolCallEnd) and e.incomplete:
                log.info("chatsieve: call %d ended incomplete (output cut short)", e.index)
        return events

    # ---- output ----------------------------------------------------------------------
    def delta(self, events: list[Event]) -> DeltaMessage | None:
        """The events of one step as one DeltaMessage: a call's name (with its id) comes
        first, then its argument fragments; None when there is nothing to say."""
        if not events:
            return None
        reasoning: list[str] = []
        content: list[str] = []
        calls: list[DeltaToolCall] = []
        for e in events:
            if isinstance(e, ReasoningDelta):
                reasoning.append(e.text)
            elif isinstance(e, ContentDelta):
                content.append(e.text)
            elif isinstance(e, ToolCallStart):
                calls.append(
                    DeltaToolCall(
                        index=e.index,
                        id=e.id,
                        type="function",
                        function=DeltaFunctionCall(name=e.name, arguments=""),
                    )
                )
            elif isinstance(e, ToolCallArgsDelta) and e.json_text:
                last = calls[-1] if calls else None
                if last is not None and last.index == e.index and last.function.name is None:
                    last.function.arguments += e.json_text
                else:
                    calls.append(
                        DeltaToolCall(index=e.index, function=DeltaFunctionCall(arguments=e.json_text))
                    )
        fields: dict[str, Any] = {}
        if reasoning and self.include_reasoning:
            fields["reasoning"] = "".join(reasoning)
        if content:
            fields["content"] = "".join(content)
        if calls:
            fields["tool_calls"] = calls
        return DeltaMessage(**fields) if fields else None

    def result(self) -> tuple[str | None, str | None, list[FunctionCall]]:
        """The whole message; a call cut short (only with argument streaming) is not returned."""
        msg = self.builder.message
        calls = [
            FunctionCall(id=c.id, name=c.name, arguments=c.arguments)
            for c in msg.tool_calls
            if not c.incomplete
        ]
        return msg.reasoning, msg.content, calls


# ---------------------------------------------------------------- reasoning by token id


class ReasoningMarkers:
    """A format's reasoning delimiters as token ids, for questions asked of token ids alone
    (vLLM's structured-output gate, reasoning token counts)."""

    def __init__(self, format: str, tokenizer: Any, thinking: bool | None) -> None:
        spec = formats.get(resolve(format, tokenizer))
        self.spec = spec
        self.thinking = spec.default_thinking if thinking is None else thinking
        self.open_ids: frozenset[int] = frozenset()
        self.close_ids: frozenset[int] = frozenset()
        if tokenizer is not None:
            gates = resolve_delimiters(spec, tokenizer)
            self.open_ids = frozenset(gates[m] for m in spec.reasoning_open if gates.get(m) is not None)
            self.close_ids = frozenset(gates[m] for m in spec.reasoning_close if gates.get(m) is not None)

    def ended(self, ids: Sequence[int]) -> bool:
        """Is reasoning over at the end of `ids` (a prompt, or prompt + output)?"""
        for tid in reversed(ids):
            if tid in self.close_ids:
                return True
            if tid in self.open_ids:
                return False
        return not self.spec.reasoning_close or not self.close_ids or not self.thinking

    def ends_in(self, delta_ids: Iterable[int]) -> bool:
        last = None
        for tid in delta_ids:
            if tid in self.close_ids:
                last = True
            elif tid in self.open_ids:
                last = False
        return bool(last)

    def content_ids(self, ids: Sequence[int]) -> list[int]:
        for i in range(len(ids) - 1, -1, -1):
            if ids[i] in self.close_ids:
                return list(ids[i + 1 :])
        return list(ids)

    def count(self, ids: Sequence[int], starts_inside: bool) -> int:
        """Tokens strictly between a reasoning opener (or the start, when the output starts
        inside a block) and its closer."""
        inside, n = starts_inside, 0
        for tid in ids:
            if tid in self.open_ids:
                inside = True
            elif tid in self.close_ids:
                inside = False
            elif inside:
                n += 1
        return n


# ---------------------------------------------------------------- the parsers vLLM sees


class ChatsieveParser(Parser):
    """vLLM's per-request `Parser`, backed by one chatsieve parser per output.

    Composed by vLLM's ParserManager (see `_compose`) when the server names chatsieve
    parsers; `format_name` is the chatsieve format.
    """

    format_name: str = ""
    enable_auto_tools: bool = False
    stream_arguments: bool | None = None  # None: CHATSIEVE_STREAM_ARGUMENTS

    def __init__(
        self, tokenizer: Any, tools: list | None = None, *args: Any, model_config=None, **kwargs: Any
    ):
        super().__init__(tokenizer, tools, *args, model_config=model_config, **kwargs)
        self._chatsieve_tokenizer = chatsieve_tokenizer(tokenizer)
        self._chat_template_kwargs = kwargs.get("chat_template_kwargs")
        self._prompt_token_ids: list[int] | None = None
        self._session: RequestSession | None = None
        self._markers: ReasoningMarkers | None = None

    # ---- setup -----------------------------------------------------------------------
    def _calls_enabled(self, request: Any) -> bool:
        forced = getattr(request, "tool_choice", None) == "required" or _named_choice(request) is not None
        return forced or (self.tool_parser_cls is not None and self.enable_auto_tools)

    def _new_session(self, request: Any) -> RequestSession:
        stream = self.stream_arguments if self.stream_arguments is not None else stream_arguments_from_env()
        return RequestSession(
            self.format_name,
            tokenizer=self._chatsieve_tokenizer,
            vllm_tokenizer=self.model_tokenizer,
            request=request,
            thinking=_thinking(self._chat_template_kwargs, request),
            prompt_token_ids=self._prompt_token_ids,
            calls_enabled=self._calls_enabled(request),
            stream_arguments=stream,
        )

    def _reasoning_markers(self) -> ReasoningMarkers:
        if self._markers is None:
            thinking = _thinking(self._chat_template_kwargs, None)
            self._markers = ReasoningMarkers(self.format_name, self._chatsieve_tokenizer, thinking)
        return self._markers

    def adjust_request(self, request):
        # vLLM's own text must keep control tokens (text mode, or a delta without ids)
        if getattr(request, "skip_special_tokens", None) is not False and hasattr(
            request, "skip_special_tokens"
        ):
            request.skip_special_tokens = False
        return request

    def set_prompt_token_ids(self, prompt_token_ids: Sequence[int]) -> None:
        self._prompt_token_ids = list(prompt_token_ids)

    # ---- vLLM's questions ------------------------------------------------------------
    def is_reasoning_end(self, input_ids: list[int]) -> bool:
        return self._reasoning_markers().ended(input_ids)

    def count_reasoning_tokens(self, token_ids: Sequence[int]) -> int:
        markers = self._reasoning_markers()
        return markers.count(token_ids, starts_inside=not markers.ended(self._prompt_token_ids or []))

    # ---- batch -----------------------------------------------------------------------
    def parse(self, model_output, request, enable_auto_tools=False, model_output_token_ids=()):
        session = self._new_session(request)
        session.feed(model_output, list(model_output_token_ids or ()))
        session.finish()
        reasoning, content, calls = session.result()
        if not session.include_reasoning:
            reasoning = None
        return reasoning, content, calls

    def extract_tool_calls(self, model_output: str, request: Any) -> ExtractedToolCallInformation:
        """The batch result in vLLM's tool-parser shape (reasoning is left out)."""
        _, content, calls = self.parse(model_output, request)
        return _extracted(content, calls)

    # ---- streaming -------------------------------------------------------------------
    def parse_delta(self, delta_text, delta_token_ids, request, prompt_token_ids=None, *, finished):
        if self._session is None:
            if prompt_token_ids is not None:
                self._prompt_token_ids = list(prompt_token_ids)
            self._session = self._new_session(request)
        session = self._session
        events = session.feed(delta_text, delta_token_ids)
        if finished:
            events += session.finish()
        return session.delta(events)


def _extracted(content: str | None, calls: list[FunctionCall]) -> ExtractedToolCallInformation:
    return ExtractedToolCallInformation(
        tools_called=bool(calls),
        tool_calls=[
            ToolCall(id=c.id, function=FunctionCall(name=c.name, arguments=c.arguments)) for c in calls
        ],
        content=content,
    )


def _together_error(format_name: str) -> TypeError:
    return TypeError(
        f"chatsieve_{format_name} decides reasoning and tool calls together: name it for both "
        f"--reasoning-parser and --tool-call-parser (or for one of them alone), and load "
        "--tool-parser-plugin chatsieve.integrations.vllm"
    )


class ChatsieveReasoningParser(ReasoningParser):
    """The `--reasoning-parser chatsieve_F` registration. In the API server the work is done
    by ChatsieveParser; vLLM's engine core uses this class alone, for token-id questions."""

    format_name: str = ""

    def __init__(self, tokenizer: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(tokenizer, *args, **kwargs)
        thinking = _thinking(kwargs.get("chat_template_kwargs"), None)
        self._markers = ReasoningMarkers(self.format_name, chatsieve_tokenizer(tokenizer), thinking)

    @property
    def reasoning_start_str(self) -> str | None:
        return self._markers.spec.reasoning_open[0] if self._markers.spec.reasoning_open else None

    @property
    def reasoning_end_str(self) -> str | None:
        return self._markers.spec.reasoning_close[0] if self._markers.spec.reasoning_close else None

    def is_reasoning_end(self, input_ids: Sequence[int]) -> bool:
        return self._markers.ended(input_ids)

    def is_reasoning_end_streaming(self, input_ids: Sequence[int], delta_ids: Iterable[int]) -> bool:
        return self._markers.ends_in(delta_ids)

    def extract_content_ids(self, input_ids: list[int]) -> list[int]:
        return self._markers.content_ids(input_ids)

    def count_reasoning_tokens(self, token_ids: Sequence[int]) -> int:
        return self._markers.count(token_ids, starts_inside=False)

    def extract_reasoning(self, model_output, request):
        raise _together_error(self.format_name)

    def extract_reasoning_streaming(self, *args: Any, **kwargs: Any):
        raise _together_error(self.format_name)


class ChatsieveToolParser(ToolParser):
    """The `--tool-call-parser chatsieve_F` registration; ChatsieveParser does the work.
    Used on its own, `extract_tool_calls` parses a whole output (text mode)."""

    format_name: str = ""
    # required / named tool choice: parse the model's native call syntax, never force JSON
    supports_required_and_named = False

    def adjust_request(self, request):
        if hasattr(request, "skip_special_tokens"):
            request.skip_special_tokens = False
        return request

    def extract_tool_calls(self, model_output: str, request: Any) -> ExtractedToolCallInformation:
        session = RequestSession(
            self.format_name,
            tokenizer=None,
            vllm_tokenizer=self.model_tokenizer,
            request=request,
            thinking=False,  # vLLM hands a tool parser the text after reasoning
            prompt_token_ids=None,
            calls_enabled=True,
            stream_arguments=False,
        )
        session.feed(model_output, None)
        session.finish()
        _, content, calls = session.result()
        return _extracted(content, calls)

    def extract_tool_calls_streaming(self, *args: Any, **kwargs: Any):
        raise _together_error(self.format_name)


# ---------------------------------------------------------------- registration


def _format_of(registry: dict, name: str | None, base: type) -> str | None:
    cls = registry.get(name) if name else None
    return cls.format_name if isinstance(cls, type) and issubclass(cls, base) else None


def _compose(cls, **kwargs: Any):
    """ParserManager._compose_parser, with chatsieve parsers composed into ChatsieveParser."""
    reasoning_name = kwargs.get("reasoning_parser_name")
    tool_name = kwargs.get("tool_parser_name")
    enable_auto_tools = bool(kwargs.get("enable_auto_tools"))
    r_fmt = _format_of(ReasoningParserManager.reasoning_parsers, reasoning_name, ChatsieveReasoningParser)
    t_fmt = (
        _format_of(ToolParserManager.tool_parsers, tool_name, ChatsieveToolParser)
        if enable_auto_tools
        else None
    )
    if r_fmt is None and t_fmt is None:
        return _original_compose.__func__(cls, **kwargs)
    if reasoning_name and r_fmt is None:
        raise _together_error(t_fmt)
    if enable_auto_tools and tool_name and t_fmt is None:
        raise _together_error(r_fmt)
    if r_fmt is not None and t_fmt is not None and r_fmt != t_fmt:
        raise TypeError(
            f"--reasoning-parser chatsieve_{r_fmt} and --tool-call-parser chatsieve_{t_fmt} name "
            "different chatsieve formats; name the same one for both"
        )
    fmt = r_fmt or t_fmt
    strict = kwargs.get("tool_strict_level")
    if strict is not None:
        from vllm.tool_parsers.tool_strict_level import ToolStrictLevel

        strict = ToolStrictLevel.from_name(strict)
    return type(
        f"ChatsieveParser_{fmt}",
        (ChatsieveParser,),
        {
            "format_name": fmt,
            "reasoning_parser_cls": ReasoningParserManager.reasoning_parsers[reasoning_name]
            if r_fmt
            else None,
            "tool_parser_cls": ToolParserManager.tool_parsers[tool_name] if t_fmt else None,
            "tool_strict_level": strict,
            "enable_auto_tools": enable_auto_tools,
            "__module__": __name__,
        },
    )


_compose._chatsieve = True
_compose._chatsieve_original = _original_compose


def parser_names() -> list[str]:
    """The names registered with vLLM: `chatsieve_<format>` for every chatsieve format."""
    return [PARSER_PREFIX + name for name in (*formats.names(), AUTO)]


def register() -> None:
    """Register every chatsieve format with vLLM's tool and reasoning parser managers, and
    compose chatsieve's parsers into ChatsieveParser. Runs at import; repeating it is harmless."""
    for fmt in (*formats.names(), AUTO):  # chatsieve_auto: the format the model's chat template writes
        name = PARSER_PREFIX + fmt
        attrs = {"format_name": fmt, "__module__": __name__}
        ReasoningParserManager.register_module(
            name, module=type(f"ChatsieveReasoningParser_{fmt}", (ChatsieveReasoningParser,), attrs)
        )
        ToolParserManager.register_module(
            name, module=type(f"ChatsieveToolParser_{fmt}", (ChatsieveToolParser,), attrs)
        )
    ParserManager._compose_parser = classmethod(_compose)


register()
