"""What every client protocol shares: the one internal request (`ChatRequest`), its limits and
errors, the tool-call policy, finish reasons, token counts, and the `Protocol` interface.

Each protocol module (openai_chat, anthropic, ...) parses its own request shape into a
`ChatRequest`; the server prepares and runs it the same way whatever the protocol, and hands the
parser's events to the protocol's stream encoder (SSE bytes) or collector (one body).

Tool-choice policy (what chatsieve does where a hosted API would constrain decoding), in OpenAI's
names; each protocol maps its own choices onto these:


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
  ``max_tool_calls: N`` (Responses) likewise keeps the first N calls.
- ``strict`` tools (chat: ``strict: true``; Responses: unless ``strict: false``; Messages:
  ``strict: true``): on ``auto`` the engine holds a call's arguments to its schema once the model
  opens a call (chatsieve.strict_tools), and every call to a strict tool is checked when it ends: one
  whose arguments do not match is not returned, and the turn ends with a note saying why.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from chatsieve import shared
from chatsieve._json import dumps
from chatsieve.events import (
    ContentDelta,
    Dropped,
    Event,
    ReasoningDelta,
    TokenLogprob,
    ToolCallArgsDelta,
    ToolCallEnd,
    ToolCallStart,
)

MAX_TOKENS_CEILING = 2**31 - 1  # no engine takes more; anything above is a client's mistake


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
    fit_max_tokens: bool = False  # chat completions too: lower max_tokens to the room left (--fit-max-tokens)


# ---------------------------------------------------------------- errors


class RequestError(ValueError):
    """A request the server refuses: the HTTP status and the error's fields in OpenAI's terms
    (`type` invalid_request_error | server_error, `param`, `code`); each protocol's
    `error_body` gives it that protocol's shape."""

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        status: int = 400,
        type: str = "invalid_request_error",
        details: dict | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code
        self.status = status
        self.type = type
        self.details = details  # what a protocol's error body adds for its SDK (Anthropic's `details`)


# ---------------------------------------------------------------- requests


@dataclass(frozen=True, slots=True)
class ToolChoice:
    mode: str  # "auto" | "none" | "required" | "function"
    name: str | None = None


@dataclass(frozen=True)
class ChatRequest:
    """The one internal request every protocol is parsed into (unknown fields dropped): messages
    in the normalised OpenAI form (chatsieve.messages), tools in OpenAI's function shape."""

    messages: list[dict]
    model: str | None = None
    tools: list[dict] | None = None
    tool_choice: ToolChoice = ToolChoice("auto")
    parallel_tool_calls: bool = True
    max_tool_calls: int | None = None  # calls returned at most (Responses); later ones are dropped
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
    reasoning_budget: int | None = None  # reasoning tokens before the reasoning is cut (enforced locally)
    # the effort the client asked for (chat's reasoning_effort, Responses' reasoning.effort, Messages'
    # output_config.effort), before the family's switch maps it: what picks a budget (`effort_budget`)
    # when the request gives none
    effort: str | None = None
    # a max_tokens above the room the prompt leaves in the context is lowered to it (the response
    # says so in MAX_TOKENS_HEADER), instead of a 400: /v1/messages, /v1/responses, --fit-max-tokens
    fit_max_tokens: bool = False
    # agent routes: a call that cannot be used (malformed, or naming a tool that was not offered)
    # leaves a visible note in the turn's text (`ToolCallFilter.notes`), never an empty turn
    note_unusable_calls: bool = False
    # the tools whose calls must match their schema (chat: `strict: true`; Responses: unless
    # `strict: false`; Messages: `strict: true`): engine-enforced on `auto` where it can be
    # (strict_tools.py), and checked after the fact
    strict_tools: tuple[str, ...] = ()
    # other names a call may use for an offered tool: (called name, offered name), e.g. a
    # namespaced MCP name `mcp__srv__fetch_page` for the `fetch_page` of namespace `mcp__srv`
    tool_aliases: tuple[tuple[str, str], ...] = ()

    @property
    def prompt_tools(self) -> list[dict] | None:
        """The tools rendered into the prompt and given to the parser (see the module docstring)."""
        if not self.tools or self.tool_choice.mode == "none":
            return None
        if self.tool_choice.mode == "function":
            return [t for t in self.tools if tool_name(t) == self.tool_choice.name]
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
        allowed = shared.once(self.prompt_tools, "tool names", _tool_names) if self.prompt_tools else frozenset()
        aliases = {called: name for called, name in self.tool_aliases if name in allowed}
        limits = [n for n in (None if self.parallel_tool_calls else 1, self.max_tool_calls) if n is not None]
        strict = None
        if self.strict_tools and self.prompt_tools:
            from chatsieve.strict_tools import StrictCheck

            strict = StrictCheck(self.prompt_tools, self.strict_tools) or None
        return ToolCallFilter(
            allowed=allowed,
            max_calls=min(limits) if limits else None,
            aliases=aliases,
            notes=self.note_unusable_calls,
            strict=strict,
        )

# ---------------------------------------------------------------- thinking and effort

# The templates' thinking switches (Qwen3, GLM, Gemma 4: enable_thinking; DeepSeek V3.1/V3.2: thinking)
THINKING_SWITCHES = ("enable_thinking", "thinking")
# Effort words the agents send (Codex's reasoning.effort, Claude Code's output_config.effort), in order
EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh", "max")
# gpt-oss always reasons; its template takes `Reasoning: low | medium | high` instead of a switch
_HARMONY_EFFORT = {"none": "low", "minimal": "low", "low": "low", "medium": "medium", "high": "high",
                   "xhigh": "high", "max": "high"}


def effort_only(format: str | None) -> bool:
    """Whether the family cannot switch thinking off and takes an effort instead (gpt-oss)."""
    if format is None:
        return False
    from chatsieve import formats

    try:
        return formats.get(format).name == "gpt_oss"
    except (KeyError, ValueError):
        return False


def reasoning_switches(format: str | None, *, thinking: bool | None, effort: str | None) -> tuple[dict, str | None]:
    """What a request's thinking switch (`thinking`: on, off, or None for the family's default) and
    effort become for the served family: (template variables, the template's `reasoning_effort`).

    One table for every route (docs/agents.md): a family with a thinking switch gets it set
    (`enable_thinking` and `thinking`; templates without one ignore them) and the effort passed on
    as `reasoning_effort` (only templates that read it use it); gpt-oss, which always reasons,
    gets `Reasoning: low` for thinking off, else the effort (xhigh and max: high; none: the
    template's default, medium)."""
    if effort_only(format):
        if thinking is False:
            return {}, "low"
        return {}, None if effort is None else _HARMONY_EFFORT[effort]
    kwargs = {} if thinking is None else dict.fromkeys(THINKING_SWITCHES, thinking)
    return kwargs, effort


# Reasoning tokens per effort, for a request that asks an effort and gives no budget of its own
# (docs/serving.md, "Reasoning budgets"): the values of vLLM's proposed --reasoning-effort-budgets
# (vllm-project/vllm#55382); `serve --reasoning-effort-budgets` replaces them. `max` has none. `none`
# turns thinking off where the family can; a family that cannot (gpt-oss) gets minimal's.
EFFORT_BUDGETS: dict[str, int] = {"minimal": 1024, "low": 4096, "medium": 16384, "high": 32768, "xhigh": 65536}


def effort_budget(effort: str | None, format: str | None, table: Mapping[str, int] | None = None) -> int | None:
    """The reasoning budget an effort asks for the served family (None: no budget)."""
    table = EFFORT_BUDGETS if table is None else table
    if effort == "none" and effort_only(format):
        effort = "minimal"
    return table.get(effort) if isinstance(effort, str) else None


def check_effort_budgets(table: Any) -> dict[str, int]:
    """A `--reasoning-effort-budgets` table checked: effort words to non-negative token counts."""
    if not isinstance(table, Mapping):
        raise ValueError("the reasoning effort budgets must be a JSON object, e.g. '{\"low\": 4096, \"high\": 32768}'")
    known = [e for e in EFFORTS if e != "none"]
    out = {}
    for effort, budget in table.items():
        if effort not in known:
            raise ValueError(f"unknown effort {effort!r} in the reasoning effort budgets; known: {', '.join(known)}")
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < 0:
            raise ValueError(f"the budget for effort {effort!r} must be a non-negative integer, got {budget!r}")
        out[effort] = budget
    return out


_JSON_LEAVES = frozenset({str, int, float, bool, type(None)})  # (most values: no isinstance call for them)
_JSON_CONTAINERS = frozenset({dict, list})  # (what a JSON decoder makes: no isinstance call for them either)


def _tool_names(tools: list) -> frozenset[str]:
    return frozenset(n for n in map(tool_name, tools) if n)


def check_json_depth(value: Any, limit: int) -> None:
    """RequestError when objects and arrays nest deeper than `limit` (checked without recursion,
    one level at a time: the containers of each level are gathered by one comprehension). A body's
    `tools` that is a shared value (chatsieve/shared.py) is not walked: its depth is known."""
    known = shared.depth(tools := value.get("tools")) if type(value) is dict else None
    if known is not None:
        if 1 + known > limit:
            raise RequestError(json_depth_message(limit), code="too_deeply_nested")
        _check_levels([c for c in _next_level([value]) if c is not tools], 1, limit)
    else:
        _check_levels([value] if isinstance(value, dict | list) else [], 0, limit)


def json_depth(value: Any) -> int:
    """How deep objects and arrays nest in `value` (0 for a scalar, 1 for an array of scalars)."""
    level = [value] if isinstance(value, dict | list) else []
    depth = 0
    while level:
        depth += 1
        level = _next_level(level)
    return depth


def _check_levels(level: list, depth: int, limit: int) -> None:
    """RequestError where the containers `level`, at `depth`, hold any nesting past `limit`."""
    while level:
        depth += 1
        if depth > limit:
            raise RequestError(json_depth_message(limit), code="too_deeply_nested")
        level = _next_level(level)


def _next_level(level: list) -> list:
    """The containers held by the containers `level`."""
    return [c for v in level for c in (v.values() if type(v) is dict or isinstance(v, dict) else v)
            if type(c) in _JSON_CONTAINERS or (type(c) not in _JSON_LEAVES and isinstance(c, dict | list))]


def json_depth_message(limit: int) -> str:
    return f"the request body nests objects and arrays deeper than {limit} levels"


def response_format(value: Any) -> dict | None:
    """A checked OpenAI ``response_format`` (``text`` gives None)."""
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


class Fields:
    """Typed reads of optional top-level fields; null counts as absent, as in OpenAI's API."""

    def __init__(self, body: dict) -> None:
        self.body = body

    @classmethod
    def of(cls, body: Any, limits: RequestLimits) -> Fields:
        """The fields of a request body: RequestError unless it is a JSON object nesting no deeper
        than `limits` allow (every route's first check)."""
        if not isinstance(body, dict):
            raise RequestError("the request body must be a JSON object")
        check_json_depth(body, limits.max_json_depth)
        return cls(body)

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



def tool_name(tool: dict) -> str | None:
    """The name of a tool in OpenAI's function shape (or a bare ``{"name": ...}``)."""
    fn = tool.get("function") if isinstance(tool.get("function"), dict) else tool
    name = fn.get("name")
    return name if isinstance(name, str) else None


def max_tokens_ceiling(limits: RequestLimits, *, fit: bool = False) -> int:
    """The largest max_tokens a request may ask for: the model's context when known, unless an
    oversized one is to be fitted to the room the prompt leaves (`fit`)."""
    if fit:
        return MAX_TOKENS_CEILING
    return min(MAX_TOKENS_CEILING, limits.max_model_len or MAX_TOKENS_CEILING)


def stop_strings(value: Any, limits: RequestLimits, param: str) -> tuple[str, ...]:
    """A request's stop strings (a string or an array of strings; empty ones dropped), bounded
    by `limits`; RequestError naming `param` otherwise."""
    if value is None:
        stops: tuple[str, ...] = ()
    elif isinstance(value, str):
        stops = (value,) if value else ()
    elif isinstance(value, list) and all(isinstance(s, str) for s in value):
        stops = tuple(s for s in value if s)
    else:
        raise RequestError(f"'{param}' must be a string or an array of strings", param=param)
    if len(stops) > limits.max_stop_strings:
        raise RequestError(
            f"'{param}' may hold at most {limits.max_stop_strings} strings, got {len(stops)}", param=param
        )
    if any(len(s) > limits.max_stop_length for s in stops):
        raise RequestError(
            f"each stop string may be at most {limits.max_stop_length} characters long", param=param
        )
    return stops


# ---------------------------------------------------------------- tool-call policy


class ToolCallFilter:
    """Applies tool_choice / parallel_tool_calls to parser events.

    Calls that are not allowed disappear with all their events and are reported as Dropped;
    kept calls are renumbered 0, 1, ... so the client sees contiguous indexes. A call naming one
    of `aliases` (another name for an offered tool) is kept under the offered name. With `notes`,
    each call that could not be used -- one naming a tool that was not offered, or one the parser
    could not read (its `Dropped` says "tool call not executed") -- leaves a reason in `unusable`,
    which `note()` turns into the text the turn ends with.

    With `strict` (chatsieve.strict_tools.StrictCheck), a call to a strict tool is held until it
    ends (the events after it with it, in order) and returned only if its arguments match the
    tool's schema; one that does not is dropped and leaves its reason in `unusable` on every route
    (a strict tool's call never reaches the client unchecked, and never silently disappears).
    """

    # what the compiled lane (chatsieve/_lane.c) reads and writes per token: slots, which it reaches
    # by their offsets; any other attribute is in the instance's __dict__
    __slots__ = ("_held", "notes", "strict", "wrote_text", "__dict__", "__weakref__")

    def __init__(
        self,
        *,
        allowed: frozenset[str] | None = None,
        max_calls: int | None = None,
        aliases: Mapping[str, str] | None = None,
        notes: bool = False,
        strict: Any = None,
    ) -> None:
        self.allowed = allowed
        self.max_calls = max_calls
        self.aliases = dict(aliases or {})
        self.notes = notes
        self.strict = strict
        self._map: dict[int, int | None] = {}  # parser index -> output index, None = dropped
        self._dropped_args: dict[int, list[str]] = {}
        self._held: list[Event] | None = None  # a strict call's events (and those after it) until it ends
        self._held_call: tuple[int, str] = (-1, "")  # its parser index and (offered) name
        self.kept = 0
        self.dropped: list[Dropped] = []
        self.unusable: list[str] = []  # why each unusable call was not run (with `notes`, or strict)
        self.wrote_text = False  # content came before the note (with `notes`)

    def apply(self, events: Iterable[Event]) -> list[Event]:
        if self.strict is None:
            if type(events) is list and len(events) == 1:  # a paced stream's usual event: one text delta
                t = type(events[0])
                if t is ReasoningDelta or t is ContentDelta and not self.notes:
                    return events  # (passed as it is, as `_apply` would pass it)
            return self._apply(events)
        out: list[Event] = []
        for e in events:
            if self._held is not None:
                self._held.append(e)
                if type(e) is ToolCallEnd and e.index == self._held_call[0]:
                    out += self._release()
                continue
            if type(e) is ToolCallStart:
                name = self._offered_name(e.name)
                if self.strict.covers(name) and self._refusal(name) is None:
                    self._held, self._held_call = [e], (e.index, name)
                    continue
            out += self._apply((e,))
        return out

    def passes_text(self, kind: str) -> bool:
        """Whether `apply` passes one text delta of `kind` ("reasoning" or "content") on as it is
        (no strict call is held); when it does, what `apply` records of it is recorded."""
        if self._held is not None:
            return False
        if kind == "content" and (self.notes or self.strict is not None):
            self.wrote_text = True
        return True

    def _offered_name(self, name: str) -> str:
        if self.allowed is not None and name not in self.allowed and name in self.aliases:
            return self.aliases[name]
        return name

    def _release(self) -> list[Event]:
        """The held strict call, checked: its events (and those held after it) go on as usual when
        its arguments match its schema; else it is dropped, with the reason."""
        held, (index, name) = self._held or [], self._held_call
        self._held = None
        own = [e for e in held if type(e) in _CALL_EVENTS and e.index == index]
        others = [e for e in held if not (type(e) in _CALL_EVENTS and e.index == index)]  # (none, in practice)
        args = "".join(e.json_text for e in own if type(e) is ToolCallArgsDelta)
        problem = None if own[-1].incomplete else self.strict.problem(name, args)
        if problem is None:
            return self._apply(own) + self.apply(others)
        self._map[index] = None
        self.dropped.append(Dropped(f"{own[0].name}({args})", f"strict tool: {problem}"))
        shown = f"`{name}`" if _SAFE_NAME.fullmatch(name) else "a strict tool"
        detail = problem if len(problem) <= 240 else problem[:240] + "..."
        self.unusable.append(f"{shown} was called with arguments that do not match its schema ({detail})")
        return self.apply(others)

    def _apply(self, events: Iterable[Event]) -> list[Event]:
        out: list[Event] = []
        for e in events:
            if isinstance(e, ToolCallStart):
                name = self._offered_name(e.name)
                why = self._refusal(name)
                if why is None:
                    self._map[e.index] = self.kept
                    out.append(ToolCallStart(self.kept, e.id, name))
                    self.kept += 1
                else:
                    self._map[e.index] = None
                    self._dropped_args[e.index] = [why, e.name]
                    if self.notes and self.allowed is not None and name not in self.allowed:
                        self.unusable.append(_not_offered(e.name, bool(self.allowed)))
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
                if self.notes and isinstance(e, Dropped) and e.why.startswith(UNREAD_CALL):
                    self.unusable.append(f"it could not be read ({e.why[len(UNREAD_CALL):].strip()})")
                elif isinstance(e, ContentDelta) and e.text and (self.notes or self.strict is not None):
                    self.wrote_text = True
                out.append(e)
        return out

    def finish(self) -> None:
        """Report dropped calls that never saw their end event (a held strict call among them)."""
        if self._held is not None:
            (index, name), start = self._held_call, self._held[0]
            self._held = None
            self.dropped.append(Dropped(f"{start.name}(...)", "strict tool: the call never ended"))
            self.unusable.append(f"`{name}` was called, but the call never ended" if _SAFE_NAME.fullmatch(name)
                                 else "a call to a strict tool never ended")  # fmt: skip
        for index in list(self._dropped_args):
            self._drop(index)

    def note(self, scrub: Sequence[str] = ()) -> str:
        """The text that tells the agent and its user why calls of this turn were not run ("" if
        none were unusable): one bracketed line per call, with every string of `scrub` (the
        family's delimiters) and anything tag-shaped taken out, so no markup becomes text."""
        lines = []
        for why in self.unusable:
            for d in scrub:
                why = why.replace(d, "")
            why = _TAG.sub("", why)
            lines.append(f"[chatsieve: a tool call the model wrote was not run: {why}.]")
        if not lines:
            return ""
        return ("\n\n" if self.wrote_text else "") + "\n".join(lines)

    def _drop(self, index: int) -> None:
        why, name, *args = self._dropped_args.pop(index)
        self.dropped.append(Dropped(f"{name}({''.join(args)})", why))

    def _refusal(self, name: str) -> str | None:
        if self.allowed is not None and name not in self.allowed:
            if not self.allowed:
                return "no tools were offered (no tools, or tool_choice 'none')"
            return "the function was not offered (not in tools, or not the tool_choice function)"
        if self.max_calls is not None and self.kept >= self.max_calls:
            if self.max_calls == 1:
                return "only the first call is kept (parallel_tool_calls false, or max_tool_calls 1)"
            return f"only the first {self.max_calls} calls are kept (max_tool_calls)"
        return None


_CALL_EVENTS = (ToolCallStart, ToolCallArgsDelta, ToolCallEnd)
# what the parser's Dropped says of a call it could not read (engine.py, formats/gpt_oss.py)
UNREAD_CALL = "tool call not executed:"
_TAG = re.compile(r"<[^<>\n]{0,64}>")
_SAFE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:\-]{0,127}")


def _not_offered(name: str, offered: bool) -> str:
    shown = f"`{name}`" if _SAFE_NAME.fullmatch(name) else "its name"
    if not offered:
        return f"it calls {shown}, but no tools were offered in this request"
    return f"{shown} is not a tool offered in this request"


def finish_reason(parser_reason: str | None, calls: int) -> str:
    """The OpenAI finish_reason: tool_calls when calls were returned, else length or stop."""
    if calls:
        return "tool_calls"
    if parser_reason == "length":
        return "length"
    return "stop"



def runs(events: Iterable[Event]) -> Iterable[tuple[Any, Any, list[TokenLogprob]]]:
    """Adjacent deltas of one kind joined: ("content" | "reasoning", text, logprobs),
    (call index, arguments text, []), or ("start", ToolCallStart, []). Empty text is skipped;
    ToolCallEnd and Dropped have no wire form."""
    if type(events) is list and len(events) == 1:  # one text delta, a paced stream's usual event
        e = events[0]
        t = type(e)
        if (t is ContentDelta or t is ReasoningDelta) and e.text:
            return (("content" if t is ContentDelta else "reasoning", e.text, list(e.logprobs or ())),)
    return _runs(events)


def _runs(events: Iterable[Event]) -> Iterator[tuple[Any, Any, list[TokenLogprob]]]:
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


# ---------------------------------------------------------------- the protocol interface


# names what a request carried that the prompt leaves out: hosted tools the open model cannot run,
# and images or documents inside tool results (a text-only model reads a placeholder instead)
LEFT_OUT_HEADER = "x-chatsieve-tools-left-out"
# printable ASCII kept as it is in a header value; the rest (space, '"', '%', ',', '\\', control
# and non-ASCII characters) percent-encoded as UTF-8
_HEADER_SAFE = "!#$&'()*+-./:;<=>?@[]^_`{|}~"


def header_value(names: Sequence[str]) -> str:
    """Request-controlled names as one HTTP header value: each percent-encoded (RFC 3986, UTF-8;
    `urllib.parse.unquote` reads it back), joined by ", "."""
    from urllib.parse import quote

    return ", ".join(quote(n, safe=_HEADER_SAFE) for n in names)
# where a block or part may carry words for what it shows (MCP alt text, a document's title)
_CAPTION_KEYS = ("alt", "alt_text", "caption", "title", "description", "context")


def media_placeholder(kind: str, block: Mapping[str, Any], media_type: str | None = None) -> str:
    """The short text an image or document inside a tool result becomes for a text-only model: what
    it was, and any caption the block carries (the words are kept; the pixels cannot be read)."""
    what = f"{kind} ({media_type})" if isinstance(media_type, str) and media_type else kind
    captions = [block[k].strip() for k in _CAPTION_KEYS if isinstance(block.get(k), str) and block[k].strip()]
    text = f"[{what} left out: the served model reads text only"
    if captions:
        text += "; caption: " + " / ".join(captions)
    return text + "]"


def sse_event(kind: str, data: Any) -> bytes:
    """One server-sent event with its kind named: ``event: KIND`` and its JSON (Anthropic's and the
    Responses API's streams)."""
    return b"event: " + kind.encode() + b"\ndata: " + dumps(data) + b"\n\n"


def left_out_headers(names: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """The response header naming the tools left out of the prompt (percent-encoded), or none."""
    return ((LEFT_OUT_HEADER, header_value(names)),) if names else ()


@dataclass(frozen=True)
class ParsedRequest:
    """A protocol's parsed request: the shared `ChatRequest` and what the response adds to its
    HTTP headers (e.g. which tools were left out). Protocols subclass it for their extras."""

    chat: ChatRequest
    headers: tuple[tuple[str, str], ...] = ()
    # called once the prompt is prepared, or the request refused (what only parsing needed goes)
    after_prepare: Callable[[], None] | None = None


@dataclass(frozen=True)
class ResponseInfo:
    """What an encoder or collector knows before the first event: the model name to report, the
    prompt's token count, and each token id's raw bytes (for logprobs)."""

    model: str
    prompt_tokens: int = 0
    token_bytes: Callable[[int], bytes] | None = None


@dataclass(frozen=True)
class Outcome:
    """How a generation ended: the shared finish reason (``stop`` | ``length`` | ``tool_calls``,
    see `finish_reason`), the stop string that ended it if one did, and the token counts."""

    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    stop_sequence: str | None = None
    reasoning_tokens: int = 0
    cached_tokens: int = 0  # of prompt_tokens, served from the engine's prefix cache (0: none, or not said)


class StreamEncoder(Protocol):
    """Parser events (filtered) to a protocol's SSE bytes, for one streamed response."""

    def start(self) -> bytes:
        """What is sent before the first event (OpenAI's role chunk, Anthropic's message_start)."""
        ...

    def encode(self, events: Iterable[Event]) -> bytes:
        """The bytes of these events. An encoder may offer `encode_text(kind, text)` too: the
        bytes of `encode([ReasoningDelta(text)])` (kind "reasoning") or of `ContentDelta(text)`
        ("content"), the same state changed, or None (nothing changed) where it does not make
        them without the event; the runner then writes an in-lane token's text without its
        event object. One whose `encode_text` chunks are constant frames around the text's JSON
        may offer `text_frames()` too (see `ChunkStream.text_frames`): the compiled text lane
        then writes them."""
        ...

    def finish(self, outcome: Outcome) -> bytes:
        """Everything after the last event, up to the end of the stream. An encoder may offer
        `finish_parts(outcome)` too, an iterator of the same bytes in parts: the runner then asks
        for each part in a worker thread (making it may block: Responses stores the response) and
        writes it before asking for the next."""
        ...

    def error(self, e: RequestError) -> bytes:
        """A failure once the stream has started, in the protocol's shape, ending the stream."""
        ...

    def ping(self) -> bytes | None:
        """A keep-alive sent while the engine is silent (None: the protocol has none)."""
        ...


class Collector(Protocol):
    """Parser events (filtered) folded into a protocol's one response body."""

    def apply(self, events: Iterable[Event]) -> None: ...

    def body(self, outcome: Outcome) -> Mapping[str, Any] | bytes:
        """The body: a JSON value, or its encoding. A collector whose `blocking` attribute is
        true is asked for it in a worker thread."""
        ...


class ClientProtocol(Protocol):
    """One client API, sans-I/O: its request body in, `ParsedRequest` out; an encoder or a
    collector for the response; its error shape. The server's one route runner drives it."""

    name: str
    ping_interval: float | None  # seconds of engine silence before `StreamEncoder.ping`

    def parse(self, body: Any, limits: RequestLimits) -> ParsedRequest: ...

    def encoder(self, request: ParsedRequest, info: ResponseInfo) -> StreamEncoder: ...

    def collector(self, request: ParsedRequest, info: ResponseInfo) -> Collector: ...

    def error_body(self, e: RequestError) -> dict:
        """The protocol's error body for `e` (sent with status `e.status`)."""
        ...
