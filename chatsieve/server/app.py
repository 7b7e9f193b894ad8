"""The ASGI app: OpenAI chat completions and Anthropic Messages in front of an engine that speaks
token ids; one route runner drives every protocol (chatsieve.protocols).

request -> protocol.parse -> ChatRequest -> render_prompt (isolation on) -> prompt ids -> backend
-> generated ids (+ logprobs) -> gated StreamParser -> tool_choice filter -> the protocol's
encoder (SSE bytes) or collector (one body).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import gc
import json
import logging
import os
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from chatsieve import StreamParser, formats, load_tokenizer, prefix_cache, render_prompt
from chatsieve._json import orjson as _orjson
from chatsieve.call_list import CallListParser
from chatsieve.detect import FormatNotFound
from chatsieve.events import ContentDelta, Event, ToolCallStart
from chatsieve.grammar import reasoning_close
from chatsieve.preparation import (
    MAX_TOKENS_HEADER,
    check_vocabulary_bounds,
    effective_thinking,
    fitted_max_tokens,
    model_context_length,
    parser_prompt,
    plan_request_constraint,
    reasoning_budget,
    render_request_prompt,
)
from chatsieve.prompt import load_chat_template
from chatsieve.protocols.anthropic import ANTHROPIC, model_entry, models_page
from chatsieve.protocols.common import (
    EFFORT_BUDGETS,
    LEFT_OUT_HEADER,
    ChatRequest,
    ClientProtocol,
    Collector,
    Outcome,
    ParsedRequest,
    RequestError,
    RequestLimits,
    ResponseInfo,
    StreamEncoder,
    ToolCallFilter,
    check_effort_budgets,
    finish_reason,
    json_depth_message,
)
from chatsieve.protocols.openai_chat import OPENAI_CHAT
from chatsieve.server.backends import Backend, BackendError, GenerationRequest, Push, TokenBatch
from chatsieve.server.chunked_body import EXTENSION as CHUNKED_BODY
from chatsieve.server.chunked_body import ChunkedBody
from chatsieve.server.client import EngineHTTP
from chatsieve.server.metrics import Metrics, MetricsMiddleware, observe_refusal
from chatsieve.server.model_check import check_engine_kind, check_model, engine_model_path
from chatsieve.server.pool import ReplicaPool
from chatsieve.server.security import (
    REQUEST_ID_KEY,
    SecurityMiddleware,
    SecurityPolicy,
    caller_of,
    log_safe,
)

log = logging.getLogger("chatsieve.server")

@dataclass(frozen=True)
class ServerConfig:
    model_dir: Path
    format: str
    backend_url: str
    backend_kind: str = "vllm"
    served_model_name: str | None = None
    backend_model: str | None = None  # the engine's model name, if it insists on one
    timeout: float = 600.0  # seconds without a byte from the engine before giving up
    max_connections: int = 1024
    warm_up: bool = True  # render one prompt at start-up so the first request does not pay for setup
    max_model_len: int | None = None  # the context in tokens; None: from the model directory
    limits: RequestLimits = RequestLimits()  # stop strings, JSON depth (max_model_len is filled in)
    security: SecurityPolicy = SecurityPolicy()  # API keys, Host allow-list, body size and time
    cors_origins: tuple[str, ...] = ()  # browser origins allowed to call the API (none by default)
    gguf: Path | None = None  # the engine's model file, checked against the tokenizer at start-up
    check_engine_model: bool = True  # llamacpp: also check the GGUF the engine reports in /props
    extra_backend_urls: tuple[str, ...] = ()  # more replicas of the engine at backend_url
    model_aliases: tuple[str, ...] = ()  # more model names clients may ask for (--model-alias)
    # the Responses API's stored responses (server/response_store.py); the CLI's default is a file
    response_store: str = ":memory:"
    response_store_max: int = 10_000  # responses kept, the oldest evicted first
    response_store_max_age: float = 30 * 24 * 3600.0  # seconds a stored response is kept
    response_store_max_bytes: int = 1 << 30  # the stored rows' JSON, the oldest evicted first
    # what a continuation (previous_response_id) may load: items, and bytes (None: max_body_bytes,
    # what one request could send instead)
    response_chain_max_items: int = 10_000
    response_chain_max_bytes: int | None = None
    max_concurrent_prompts: int = 8  # prompts prepared at once (render, isolate, tokenize, grammar)
    prompt_queue_timeout: float = 5.0  # seconds a request waits for a free slot before its 503
    chat_template: Path | None = None  # --chat-template: replaces the model directory's template
    format_file: Path | None = None  # --format-file: the family `format` names comes from this file
    # --reasoning-effort-budgets: reasoning tokens per effort, over protocols.common.EFFORT_BUDGETS
    effort_budgets: tuple[tuple[str, int], ...] = ()

    @property
    def model_name(self) -> str:
        return self.served_model_name or Path(self.model_dir).resolve().name

    @property
    def backend_urls(self) -> tuple[str, ...]:
        return (self.backend_url, *self.extra_backend_urls)

    def to_json(self) -> str:
        """The configuration as JSON, for `--workers` processes (which cannot be handed objects)."""
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        d["model_dir"] = str(self.model_dir)
        d["gguf"] = None if self.gguf is None else str(self.gguf)
        d["chat_template"] = None if self.chat_template is None else str(self.chat_template)
        d["format_file"] = None if self.format_file is None else str(self.format_file)
        d["limits"] = dataclasses.asdict(self.limits)
        d["security"] = {**dataclasses.asdict(self.security), "open_paths": sorted(self.security.open_paths)}
        return json.dumps(d)

    @classmethod
    def from_json(cls, text: str) -> ServerConfig:
        d = json.loads(text)
        sec = d["security"]
        return cls(
            **{
                **d,
                "model_dir": Path(d["model_dir"]),
                "gguf": None if d.get("gguf") is None else Path(d["gguf"]),
                "chat_template": None if d.get("chat_template") is None else Path(d["chat_template"]),
                "format_file": None if d.get("format_file") is None else Path(d["format_file"]),
                "extra_backend_urls": tuple(d.get("extra_backend_urls", ())),
                "model_aliases": tuple(d.get("model_aliases", ())),
                "effort_budgets": tuple((e, b) for e, b in d.get("effort_budgets", ())),
                "cors_origins": tuple(d.get("cors_origins", ())),
                "limits": RequestLimits(**d["limits"]),
                "security": SecurityPolicy(
                    **{
                        **sec,
                        "api_keys": tuple(sec["api_keys"]),
                        "allowed_hosts": None if sec["allowed_hosts"] is None else tuple(sec["allowed_hosts"]),
                        "open_paths": frozenset(sec["open_paths"]),
                    }
                ),
            }
        )


# Where model directories state their context length (config.json; text_config for multimodal).
# A body this large is decoded and parsed in a worker thread, not on the event loop.
OFF_LOOP_BYTES = 32 * 1024
# Bodies this large are parsed and prepared at most BIG_BODIES_AT_ONCE at a time (the others wait
# their turn, holding no thread): every busy worker thread takes the GIL from the event loop, and
# /health waited 0.4-0.65 s with five 4 MB bodies of small parts at once, 0.2-0.4 s with two.
BIG_BODY_BYTES = 1 << 20
BIG_BODIES_AT_ONCE = 2
# Threads that prepare prompts (render, isolate, tokenize): the work holds the GIL but for the
# tokenizer's part, so more threads than cores only take turns with the event loop, and each
# preparation of a burst then ends later (all of them about when the last one does, instead of one
# after another). Requests beyond these wait in order, holding a `max_concurrent_prompts` slot.
PREPARATION_THREADS = 2
# A preparation this long (in prompt tokens) returns the freed heap to the system afterwards:
# the renderings, encodings and copies it used are many times the request's size.
TRIM_AFTER_TOKENS = 50_000


@functools.cache
def _libc() -> Any:
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc if hasattr(libc, "malloc_trim") else None
    except OSError:
        return None


_gc_lock = threading.Lock()
_gc_holds = 0  # large requests being parsed and prepared now
_gc_was_enabled = False
_gc_off_since = 0.0
MAX_GC_OFF = 60.0  # seconds: under steady large traffic, cyclic collection runs again past this


@contextlib.contextmanager
def _no_cycle_collection() -> Iterator[None]:
    """No cyclic garbage collection while a large request is parsed and prepared (for at most
    MAX_GC_OFF seconds at a time, however many overlap). Its body becomes hundreds of thousands of
    short-lived dicts and lists, which reference counting frees; every full collection meanwhile
    walks all of them with the GIL held (0.1-0.85 s each, measured with 4 MB bodies on two busy
    cores), and /health waited that long."""
    global _gc_holds, _gc_was_enabled, _gc_off_since
    with _gc_lock:
        _gc_holds += 1
        if _gc_holds == 1:
            _gc_was_enabled, _gc_off_since = gc.isenabled(), time.monotonic()
            gc.disable()
        elif _gc_was_enabled and time.monotonic() - _gc_off_since > MAX_GC_OFF:
            gc.enable()
    try:
        yield
    finally:
        with _gc_lock:
            _gc_holds -= 1
            if _gc_holds == 0 and _gc_was_enabled:
                gc.enable()


async def _refusable(work: Callable[..., Any], *args: Any, executor: Executor | None = None) -> Any:
    """`work(*args)` in a worker thread (of `executor` when given); a RequestError it raises is
    raised here without the worker's frames. Raised across the thread, it would be held in a
    reference cycle (its traceback holds the awaiting frame, which holds the future, which holds
    it) with every frame it passed and their locals (a request's whole body, its messages) until
    the cyclic collector found it, which walks all of that with the GIL held."""

    def call() -> tuple[Any, RequestError | None]:
        try:
            return work(*args), None
        except RequestError as e:
            e.__traceback__ = e.__context__ = e.__cause__ = None
            return None, e

    if executor is None:
        result, error = await run_in_threadpool(call)
    else:
        result, error = await _in_executor(executor, call)
    if error is not None:
        try:
            raise error
        finally:
            error = None  # this frame, in the traceback, must not hold it too
    return result


async def _in_executor(executor: Executor, work: Callable[[], Any]) -> Any:
    """`work()` in one of `executor`'s threads, handed over at once: no checkpoint before it (anyio's
    worker threads are reached through a capacity limiter, whose checkpoint sends the task to the
    back of the event loop's queue, behind every request that arrived meanwhile). A cancelled
    caller still waits for the work, as anyio's `run_sync` does, so it never outlives its slot."""
    future = asyncio.get_running_loop().run_in_executor(executor, work)
    with anyio.CancelScope(shield=True):
        return await future


def _in_partition(partition: str, work: Callable[..., Any], *args: Any) -> Any:
    with prefix_cache.partition(partition):
        return work(*args)


def _trim_heap() -> None:
    """glibc's malloc_trim: free heap pages back to the system (a no-op elsewhere)."""
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)


# How often a thread holding the GIL is asked to let another run (Python's default is 5 ms). The
# event loop shares the GIL with the worker threads that parse and prepare requests; it needs it
# back after every system call, and with several workers busy each time could cost it 5 ms or
# more: /health took 0.5-0.9 s while five 4 MB bodies were prepared on two busy cores, 0.16-0.44 s
# with 1 ms.
SWITCH_INTERVAL = 0.001
M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter
MMAP_THRESHOLD = 128 * 1024  # glibc's default, kept fixed


def _fix_mmap_threshold() -> None:
    """Blocks of 128 KiB and more (a request's long strings, a loaded conversation) are mapped
    and unmapped on their own, so freeing one gives its memory back at once. glibc otherwise
    raises the threshold to the largest block freed, after which such blocks stay in the worker
    threads' arenas: eight continuations of a 4 MB conversation left about 100 MB resident."""
    libc = _libc()
    if libc is not None and hasattr(libc, "mallopt"):
        libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)


@dataclass(frozen=True)
class FormatChoice:
    """How the served format was chosen: `source` is "--format", "--format-file" or "auto" (then
    `evidence` says why, from chatsieve.formats.detect)."""

    name: str
    source: str
    evidence: tuple[str, ...] = ()

    def log_line(self) -> str:
        why = f" ({'; '.join(self.evidence)})" if self.evidence else ""
        return f"format: {self.name} [{self.source}]{why}"

    def to_dict(self) -> dict:
        return {"format": self.name, "source": self.source, "evidence": list(self.evidence)}


def choose_format(config: ServerConfig, tokenizer: Any, template: str | None) -> FormatChoice:
    """The format a server runs: --format-file's family, --format's, or (auto) the one the chat
    template writes; FormatNotFound when auto cannot place the template."""
    if config.format_file is not None:
        from chatsieve.format_file import register_file

        name = register_file(config.format_file).name
        return FormatChoice(name, "--format-file", (str(config.format_file),))
    if config.format != "auto":
        return FormatChoice(formats.get(config.format).name, "--format")
    source = template if template is not None else tokenizer.chat_template
    if not source:
        raise FormatNotFound(
            "--format auto needs the model's chat template, and there is none (give --format NAME, or "
            "--chat-template FILE)")
    found = formats.analyze(source, tokenizer)
    if found.match is None:
        near = ", ".join(found.nearest()) or "none"
        raise FormatNotFound(
            f"--format auto: no registered format writes this chat template's markup ({found.problem}); "
            f"nearest: {near}. Give --format NAME, or describe the family with --format-file FILE")
    return FormatChoice(found.match.name, "auto", found.match.evidence)


class ChatService:
    """Everything one request needs: tokenizer, format, backend; owns the pooled HTTP client."""

    def __init__(self, config: ServerConfig, tokenizer: Any = None) -> None:
        if config.format != "auto" and config.format_file is None:
            formats.get(config.format)  # fail at start, naming the known formats
        self.tokenizer = tokenizer if tokenizer is not None else load_tokenizer(config.model_dir)
        template = None if config.chat_template is None else load_chat_template(config.chat_template)
        self.format_choice = choose_format(config, self.tokenizer, template)
        config = dataclasses.replace(config, format=self.format_choice.name)
        self.config = config
        self.model = config.model_name
        self.stop_token_ids = tuple(sorted(self.tokenizer.stop_token_ids))
        self.token_bytes = self.tokenizer.token_bytes
        self.created = int(time.time())
        self.client: EngineHTTP | None = None  # generation traffic: the keep-alive pool
        self.probe: httpx.AsyncClient | None = None  # health and /props checks
        self.backend: ReplicaPool | None = None
        self.max_model_len = config.max_model_len or model_context_length(config.model_dir, self.tokenizer)
        self.effort_budgets = {**EFFORT_BUDGETS, **check_effort_budgets(dict(config.effort_budgets))}
        if self.max_model_len is None:
            log.warning("the model's context length is unknown: pass --max-model-len to check prompt lengths")
        self.limits = dataclasses.replace(config.limits, max_model_len=self.max_model_len)
        self.vocab_size = self.tokenizer.hf.get_vocab_size(with_added_tokens=True)
        # --chat-template: read and checked once here (a bad file fails the start, not a request)
        self.chat_template = None if config.chat_template is None else load_chat_template(
            config.chat_template, config.format)
        log.info("%s", self.format_choice.log_line())
        self._engine_state: tuple[float, bool] = (-1e9, False)  # (checked at, reachable)
        self._probe_lock = anyio.Lock()
        self._preparing: anyio.Semaphore | None = None
        self._preparers: ThreadPoolExecutor | None = None  # the threads that prepare prompts
        self.big_bodies: anyio.CapacityLimiter | None = None  # bodies over BIG_BODY_BYTES in preparation
        self.metrics = Metrics()
        self._engine_checked = False  # the start-up checks of the engine passed (check_engine)


    async def start(self) -> None:
        _fix_mmap_threshold()
        sys.setswitchinterval(SWITCH_INTERVAL)
        self._preparing = anyio.Semaphore(self.config.max_concurrent_prompts)
        self._preparers = ThreadPoolExecutor(
            max_workers=min(self.config.max_concurrent_prompts, PREPARATION_THREADS),
            thread_name_prefix="chatsieve-prepare",
        )
        self.big_bodies = anyio.CapacityLimiter(BIG_BODIES_AT_ONCE)
        self.client = EngineHTTP(
            max_connections=self.config.max_connections, read_timeout=self.config.timeout
        )
        backends = [
            Backend(
                self.config.backend_kind, url, self.client, self._token_text, model=self.config.backend_model
            )
            for url in self.config.backend_urls
        ]
        self.backend = ReplicaPool(backends, self.client)
        self.backend.start()
        self.probe = httpx.AsyncClient(timeout=httpx.Timeout(5.0), limits=httpx.Limits(max_connections=4))
        await self._check_model()
        if self.config.warm_up:
            await run_in_threadpool(self._warm_up)

    async def _check_model(self) -> None:
        """Refuse to serve (a StartupRefusal) when an engine names itself as another kind than
        the configured one, or the engine's model has another vocabulary."""
        if self._engine_checked:
            return
        assert self.probe is not None
        for url in self.config.backend_urls:
            await check_engine_kind(self.probe, url, self.config.backend_kind)
        path = self.config.gguf
        if path is None and self.config.check_engine_model and self.config.backend_kind == "llamacpp":
            path = await engine_model_path(self.probe, self.config.backend_url)
        if path is not None:
            await run_in_threadpool(check_model, Path(path), self.tokenizer)
        self._engine_checked = True

    async def check_engine(self) -> None:
        """The start-up checks of the engine, before the server starts (`chatsieve serve` runs
        them first, so a refusal is one line rather than a failed lifespan's traceback)."""
        self.probe = httpx.AsyncClient(timeout=httpx.Timeout(5.0), limits=httpx.Limits(max_connections=4))
        try:
            await self._check_model()
        finally:
            await self.probe.aclose()
            self.probe = None

    async def stop(self) -> None:
        if self._preparers is not None:
            self._preparers.shutdown(wait=False)
        if self.backend is not None:
            await self.backend.stop()
        if self.client is not None:
            await self.client.aclose()
        if self.probe is not None:
            await self.probe.aclose()

    async def engine_reachable(self) -> bool:
        """Whether the engine answers its /health with 200 (checked at most once a second)."""
        async with self._probe_lock:  # concurrent health checks share one probe
            checked, up = self._engine_state
            if time.monotonic() - checked < 1.0:
                return up
            up = False
            if self.probe is not None:
                url = self.config.backend_url.rstrip("/") + "/health"
                try:
                    up = (await self.probe.get(url, timeout=2.0)).status_code == 200
                except httpx.HTTPError as e:
                    log.info("engine health check failed: %s", e or type(e).__name__)
            self._engine_state = (time.monotonic(), up)
            return up

    def _warm_up(self) -> None:
        """Render a prompt whose content holds a delimiter: isolation builds (and caches) its
        tokenizer copy, which takes a second or two for a large vocabulary."""
        delimiters = formats.get(self.config.format).delimiters
        content = f"warm-up {delimiters[0]}" if delimiters else "warm-up"
        try:
            render_prompt(
                [{"role": "user", "content": content}], tokenizer=self.tokenizer, format=self.config.format,
                template=self.chat_template,
            )
        except Exception as e:  # the request path reports the real error, with its reason
            log.warning("prompt warm-up failed: %s", e)

    def _token_text(self, token_id: int) -> str:
        """A token's text for logprobs; an id outside the vocabulary is the engine's fault (502)."""
        if not 0 <= token_id < self.vocab_size:
            raise BackendError(
                f"the engine sent token id {token_id} (with logprobs), outside the tokenizer's vocabulary "
                f"(0..{self.vocab_size - 1}): does --model-dir hold the engine's tokenizer?"
            )
        return self.tokenizer.decode([token_id])

    def check_model(self, name: str | None) -> None:
        """RequestError (404) unless `name` is absent, the served model or one of its aliases."""
        if name is not None and name != self.model and name not in self.config.model_aliases:
            also = f" (or {', '.join(map(repr, self.config.model_aliases))})" if self.config.model_aliases else ""
            raise RequestError(
                f"the model {name!r} does not exist; this server serves {self.model!r}{also}",
                param="model",
                code="model_not_found",
                status=404,
            )

    # ------------------------------------------------------------ one request

    async def prepare(self, req: ChatRequest, partition: str = "") -> Generation:
        """Render the prompt and set up parser and backend request; RequestError on bad input.
        `partition` (the caller's id) is the prompt cache's: a prompt reuses only prefixes that
        prompts of the same partition left (`prefix_cache.partition`).

        Every route's request goes through here. The work (rendering, isolation, tokenizing, the
        grammar) runs in a worker thread, so no request holds up the event loop, and at most
        `max_concurrent_prompts` are prepared at once: a request that finds no free slot within
        `prompt_queue_timeout` seconds is a 503 (each preparation holds several copies of its
        prompt in memory).
        """
        assert self._preparing is not None, "ChatService.start() was not awaited"
        acquired = False
        try:  # a free slot is taken at once: a checkpoint here would put the request behind all that came after it
            self._preparing.acquire_nowait()
            acquired = True
        except anyio.WouldBlock:
            with anyio.move_on_after(self.config.prompt_queue_timeout):
                await self._preparing.acquire()
                acquired = True
        if not acquired:
            observe_refusal(self.metrics, "server_busy")
            raise RequestError(
                f"the server is preparing {self.config.max_concurrent_prompts} prompts already: retry shortly",
                code="server_busy", status=503, type="server_error",
            )
        try:
            try:
                gen = await _refusable(_in_partition, partition, self._prepare, req, executor=self._preparers)
            except RequestError as e:
                observe_refusal(self.metrics, e.code)
                raise
            if gen.prompt_tokens >= TRIM_AFTER_TOKENS:
                await run_in_threadpool(_trim_heap)  # the copies a long prompt needed go back
            return gen
        finally:
            self._preparing.release()

    def _prepare(self, req: ChatRequest) -> Generation:
        check_vocabulary_bounds(req, self.vocab_size)
        req = effective_thinking(req, format=self.config.format, tokenizer=self.tokenizer, template=self.chat_template)
        tools = req.prompt_tools
        context = self.max_model_len
        prompt = render_request_prompt(  # the request came from a JSON body (or the store's JSON)
            req, tokenizer=self.tokenizer, format=self.config.format, context=context, template=self.chat_template,
            decoded_json=True,
        )
        constraint = plan_request_constraint(
            req, format=self.config.format, engine=self.config.backend_kind, tokenizer=self.tokenizer
        )
        parser = StreamParser(
            self.config.format,
            tools=tools,
            thinking=req.thinking,
            prompt=parser_prompt(prompt, format=self.config.format, tokenizer=self.tokenizer),
            tokenizer=self.tokenizer,
            stop=list(req.stop) or None,
            stop_token_ids=list(self.stop_token_ids),
            keep_logprobs=not req.stream,  # a stream sends them on as they come and keeps none
        )
        max_tokens = fitted_max_tokens(req, len(prompt.token_ids), context)
        gen_req = GenerationRequest(
            prompt_token_ids=list(prompt.token_ids),
            max_tokens=max_tokens,
            temperature=req.temperature,
            top_p=req.top_p,
            seed=req.seed,
            stop_token_ids=self.stop_token_ids,
            top_logprobs=req.top_logprobs if req.logprobs else None,
            top_k=req.top_k,
            min_p=req.min_p,
            presence_penalty=req.presence_penalty,
            frequency_penalty=req.frequency_penalty,
            repetition_penalty=req.repetition_penalty,
            logit_bias=req.logit_bias,
            constraint=constraint,
        )
        if constraint is not None and constraint.calls:  # a forced JSON call list: its content is the calls
            parser = CallListParser(parser, tools)
        reasoning_end_id = None
        if constraint is not None and constraint.reasoning_end is not None:
            reasoning_end_id = self.tokenizer.single_token_id(constraint.reasoning_end)
            if reasoning_end_id is None:
                raise RequestError(
                    f"{constraint.reasoning_end!r} is not one token of this tokenizer, so the reasoning cannot "
                    "come before the constrained answer: turn thinking off (chat_template_kwargs.enable_thinking: "
                    "false)", param="response_format", code="unsupported_constraint")
        assert self.backend is not None, "ChatService.start() was not awaited"
        gen = Generation(self.backend, gen_req, parser, req.tool_call_filter(), len(prompt.token_ids))
        gen.reasoning_end_id = reasoning_end_id
        if reasoning_end_id is not None and constraint.answer_prefix:
            gen.answer_prefix_ids = self.tokenizer.encode(constraint.answer_prefix)
        # enforced here too, in case the engine ignores it: max_tokens, or what the context leaves
        gen.max_tokens = max_tokens or (context - len(prompt.token_ids) if context else None)
        if max_tokens != req.max_tokens:
            gen.headers[MAX_TOKENS_HEADER] = f"{req.max_tokens} -> {max_tokens}"
            log.info("max_tokens %d lowered to %d: the room a %d-token prompt leaves in the %d-token context",
                     req.max_tokens, max_tokens, len(prompt.token_ids), context)
        gen.note_scrub = formats.get(self.config.format).delimiters
        gen.vocab_size = self.vocab_size
        gen.metrics = self.metrics
        budget = reasoning_budget(req, format=self.config.format, efforts=self.effort_budgets)
        close = reasoning_close(self.config.format, req.thinking) if budget is not None else None
        if close is not None:  # a family without a closing marker cannot be cut: the budget is not enforced
            gen.reasoning_budget = budget
            gen.budget_close_ids = self.tokenizer.encode(close)
        return gen


class Generation:
    """One backend generation pushed through the parser and the tool-call filter."""

    def __init__(
        self,
        backend: Backend | ReplicaPool,
        request: GenerationRequest,
        parser: Any,
        calls: ToolCallFilter,
        prompt_tokens: int,
    ) -> None:
        self.backend = backend
        self.request = request
        self.parser = parser
        self.calls = calls
        self.prompt_tokens = prompt_tokens
        self.completion_tokens = 0
        self.max_tokens: int | None = None  # cut locally at this many tokens (finish "length")
        self.vocab_size: int | None = None  # ids at or above it are an engine fault
        self.reasoning_end_id: int | None = None  # two phases: reasoning, then the constrained answer
        self.answer_prefix_ids: list[int] = []  # written between the two (gpt-oss: the final channel)
        self.reasoning_budget: int | None = None  # reasoning tokens before the reasoning is closed here
        self.budget_close_ids: list[int] = []  # what closes it (the family's marker)
        # tokens fed before the first content or call: what the budget counts (content the parser
        # still holds counts too, so this is no exact reasoning count for usage)
        self.reasoning_tokens = 0
        self._past_reasoning = False  # content or a call came
        self._budget_hit = False
        self._engine_finish: str | None = None
        # prompt tokens the engine's prefix cache served: the first engine request's count where the
        # engine reported one, else a later request's (its prompt holds this one), at most the prompt
        self.cached_tokens: int | None = None
        self._started = self._last = 0.0  # when the engine request began, and its last batch came
        self.request_id = ""
        self.metrics: Metrics | None = None
        self.note_scrub: tuple[str, ...] = ()  # taken out of the unusable-call note (the family's delimiters)
        self.headers: dict[str, str] = {}  # response headers preparing the request added

    async def events(self, sink: Callable[[list[Event]], None] | None = None) -> AsyncIterator[list[Event]]:
        """Filtered event lists as the engine produces ids; BackendError if the engine fails.
        Counted in `metrics` (when set): generations in flight, prompt and completion tokens.

        With `sink`, the event lists of ordinary engine events (ids that cannot end the output,
        in no batch the limits cut) go to `sink` instead, straight from the engine connection's
        callback (`Backend.generate`'s push); the rest, and the end, are yielded.

        With `reasoning_end_id` (a constraint the engine cannot combine with reasoning), two
        engine requests make one answer: unconstrained up to the reasoning's end token, then
        constrained from the prompt plus that reasoning; usage counts both. A `reasoning_budget`
        that runs out before the reasoning ends does the same: the first request is cancelled
        there, the family's closing marker written, and a second request goes on from it."""
        m = self.metrics
        if m is not None:
            m.in_flight.inc()
            m.prompt_tokens.inc(self.prompt_tokens)
        try:  # (one generator, not two: this runs once per engine event)
            produced: list[int] = []
            first = self.request
            end_id = self.reasoning_end_id
            if end_id is not None:
                first = dataclasses.replace(self.request, constraint=None,
                                            stop_token_ids=(*self.request.stop_token_ids, end_id))
            async for events in self._run(first, produced, sink):
                yield events
            if self._budget_hit and end_id is None:  # the reasoning budget ran out: close it, then go on
                produced.extend(self.budget_close_ids)
                events = self.parser.feed(token_ids=list(self.budget_close_ids))
                if events:
                    yield self.calls.apply(events)
            if self._budget_hit or end_id is not None and self._engine_finish == "stop" and not self.parser.stopped:
                if end_id is not None and (not produced or produced[-1] != end_id):  # trimmed, or cut by the budget
                    produced.append(end_id)
                    events = self.parser.feed(token_ids=[end_id])
                    if events:
                        yield self.calls.apply(events)
                if self.answer_prefix_ids:  # what opens the answer, as the model would write it
                    produced.extend(self.answer_prefix_ids)
                    events = self.parser.feed(token_ids=list(self.answer_prefix_ids))
                    if events:
                        yield self.calls.apply(events)
                left = None if self.max_tokens is None else self.max_tokens - self.completion_tokens
                if left is None or left > 0:
                    second = dataclasses.replace(
                        self.request, prompt_token_ids=[*self.request.prompt_token_ids, *produced],
                        max_tokens=left if self.request.max_tokens is not None else self.request.max_tokens)
                    async for events in self._run(second, produced, sink):
                        yield events
            events = self.calls.apply(self.parser.finish("stop" if self.parser.stopped else self._engine_finish))
            self.calls.finish()
            if self.calls.unusable and self.parser.finish_reason != "length":
                # an agent's turn never ends empty: a call that could not be used says so in the text
                events.append(ContentDelta(self.calls.note(self.note_scrub)))
                log.info("%s %d unusable tool call(s): %s", self.request_id, len(self.calls.unusable),
                         "; ".join(self.calls.unusable))
            yield events
            if self.calls.dropped:
                log.info("dropped %d tool call(s) by tool_choice policy", len(self.calls.dropped))
        finally:
            if m is not None:
                m.in_flight.dec()
                m.completion_tokens.inc(self.completion_tokens)

    async def _run(
        self, request: GenerationRequest, produced: list[int], sink: Callable[[list[Event]], None] | None
    ) -> AsyncIterator[list[Event]]:
        """One engine request fed through the parser; its finish reason in `_engine_finish`."""
        self._engine_finish = None
        self._last = self._started = time.monotonic()
        accept, calls = self._accept, self.calls
        push = None if sink is None else self._pusher(sink, produced)
        stream = self.backend.generate(request, push)
        waited = False
        try:
            async for batch in stream:
                if waited and batch.token_ids and not batch.finish_reason:
                    break  # the engine went on past the stop token
                events, cut = accept(batch, produced)
                if events:
                    yield calls.apply(events)
                if cut:
                    break  # closing the stream cancels the engine request
                if self.parser.stopped and self._engine_finish is None:  # a local stop
                    # a stop token ends the engine's generation too, and its last event (with the
                    # cached-token count) comes next: it is read; a stop string, or tokens after the
                    # stop token, cancel the engine request
                    if waited or self.parser.stop_sequence is not None:
                        break
                    waited = True
        except BackendError:
            if self.metrics is not None:
                self.metrics.engine_errors.inc()
            raise
        finally:
            await stream.aclose()

    def _accept(self, batch: TokenBatch, produced: list[int]) -> tuple[list[Event], bool]:
        """The events of one engine batch, and whether the budget or max_tokens cut it (reading
        the engine stops there). This runs once per engine event (one token each, when the
        engine is paced)."""
        ids, lps, over = batch.token_ids, batch.logprobs, False
        n = len(ids)
        events: list[Event] = []
        if n:
            if self.metrics is not None:
                now = time.monotonic()
                if not self.completion_tokens:
                    self.metrics.ttft.observe(now - self._started)
                else:
                    self.metrics.inter_token.observe((now - self._last) / n)
                self._last = now
            max_tokens = self.max_tokens
            if max_tokens is not None and self.completion_tokens + n > max_tokens:
                keep = max(max_tokens - self.completion_tokens, 0)
                ids, lps, over = ids[:keep], lps[:keep] if lps is not None else None, True
                n = len(ids)
        vocab_size = self.vocab_size
        if n and vocab_size is not None and not (
            0 <= ids[0] < vocab_size if n == 1 else min(ids) >= 0 and max(ids) < vocab_size
        ):
            bad = next(i for i in ids if not 0 <= i < vocab_size)
            raise BackendError(
                f"the engine sent token id {bad}, outside the tokenizer's vocabulary "
                f"(0..{vocab_size - 1}): does --model-dir hold the engine's tokenizer?"
            )
        budget = self.reasoning_budget
        if n and budget is not None and not (self._past_reasoning or self._budget_hit):
            room = budget - self.reasoning_tokens
            if n > room:  # the budget ends in this batch: feed up to it, then see
                events = self._feed(ids[:room], lps[:room] if lps is not None else None)
                produced.extend(ids[:room])
                if not self._past_reasoning:
                    self._budget_hit = True
                    return events, True
                ids, lps = ids[room:], lps[room:] if lps is not None else None
                n = len(ids)
        if n:
            produced.extend(ids)
            events += self._feed(ids, lps)
        if batch.finish_reason:
            self._engine_finish = batch.finish_reason
        if batch.cached_tokens is not None and self.cached_tokens is None:
            self.cached_tokens = batch.cached_tokens
        if over:
            self._engine_finish = "length"  # the engine went past max_tokens: cut here
        return events, over

    def _pusher(self, sink: Callable[[list[Event]], None], produced: list[int]) -> Push:
        """`Backend.generate`'s push: takes the batches `_accept` cannot stop on (ids that are
        no stop token, no stop strings, within max_tokens and the reasoning budget; the engine's
        last batch is never pushed) and sends their filtered events to `sink`; declines the
        others, which `_run` reads."""
        parser, calls, accept = self.parser, self.calls, self._accept
        stop_ids = parser.stop_ids
        if parser.stop_strings:
            return lambda batch: False

        def push(batch: TokenBatch) -> bool:
            ids = batch.token_ids
            n = len(ids)
            if (
                not n
                or self.max_tokens is not None and self.completion_tokens + n > self.max_tokens
                or self.reasoning_budget is not None
                and not (self._past_reasoning or self._budget_hit)
                and n > self.reasoning_budget - self.reasoning_tokens
                or not stop_ids.isdisjoint(ids)
            ):
                return False
            events, _ = accept(batch, produced)
            if events:
                sink(calls.apply(events))
            return True

        return push

    def _feed(self, ids: list[int], lps: list | None) -> list[Event]:
        """Feed a batch of ids and count them; with stop strings, one by one, so that the tokens
        the engine sent past the stop (however it batched them) are not counted."""
        if len(ids) == 1 or not self.parser.stopped and not self.parser.stop_strings:
            self.completion_tokens += len(ids)
            events = self.parser.feed(token_ids=ids, logprobs=list(lps) if lps is not None else None)
        else:
            events = []
            for k, token in enumerate(ids):
                if self.parser.stopped:
                    break
                self.completion_tokens += 1
                events += self.parser.feed(token_ids=[token], logprobs=[lps[k]] if lps is not None else None)
        if not self._past_reasoning:
            self.reasoning_tokens += len(ids)
            for e in events:
                t = type(e)
                if t is ContentDelta or t is ToolCallStart:
                    self._past_reasoning = True
                    break
        return events

    @property
    def finish_reason(self) -> str:
        return finish_reason(self.parser.finish_reason, self.calls.kept)

    @property
    def outcome(self) -> Outcome:
        """How the generation ended, once `events()` is exhausted."""
        return Outcome(
            finish_reason=self.finish_reason,
            prompt_tokens=self.prompt_tokens,
            completion_tokens=self.completion_tokens,
            stop_sequence=self.parser.stop_sequence,
            cached_tokens=min(self.cached_tokens or 0, self.prompt_tokens),
        )


# ---------------------------------------------------------------- HTTP layer


# Each client API's routes and the protocol that speaks it (errors on unknown sub-paths too).
PROTOCOL_PREFIXES: tuple[tuple[str, ClientProtocol], ...] = (("/v1/messages", ANTHROPIC),)


# A run of 19 digits may be an integer beyond 64 bits, which orjson reads as a float where the
# standard library keeps an int (in a string, it only sends the body the slow way). Found by
# making every digit a 0 and looking for 19 of them: a regex takes ten times as long.
_DIGITS_AS_ZERO = bytes.maketrans(b"0123456789", b"0" * 10)
_LONG_NUMBER = b"0" * 19


def decode_body(raw: bytes) -> Any:
    """`json.loads(raw)`, the same value for every body: orjson where it reads the body exactly
    as the standard library does (no integer beyond 64 bits; anything orjson refuses, such as
    NaN, a lone surrogate, a BOM or UTF-16, and every error, goes to json.loads)."""
    if _orjson is not None and raw.translate(_DIGITS_AS_ZERO).find(_LONG_NUMBER) < 0:
        try:
            return _orjson.loads(raw)
        except ValueError:
            pass
    return json.loads(raw)


def parse_body(raw: bytes, parse: Callable[[Any, RequestLimits], ParsedRequest],
               limits: RequestLimits) -> ParsedRequest:
    """A request body decoded and parsed; RequestError for invalid or too deeply nested JSON."""
    try:
        body = decode_body(raw)
    except ValueError as e:
        raise RequestError(f"the request body is not valid JSON: {e}") from None
    except RecursionError:
        raise RequestError(json_depth_message(limits.max_json_depth), code="too_deeply_nested") from None
    return parse(body, limits)


def protocol_for_path(path: str) -> ClientProtocol:
    """The protocol whose error shape a response on `path` takes (OpenAI's by default)."""
    for prefix, protocol in PROTOCOL_PREFIXES:
        if path == prefix or path.startswith(prefix + "/"):
            return protocol
    return OPENAI_CHAT


def refusal_body(path: str, status: int, message: str, code: str) -> bytes:
    """The access checks' refusals (security.py), in the shape of the protocol on `path`."""
    return json.dumps(protocol_for_path(path).error_body(RequestError(message, code=code, status=status))).encode()


def error_response(
    protocol: ClientProtocol, e: RequestError, headers: dict[str, str] | None = None
) -> JSONResponse:
    return JSONResponse(protocol.error_body(e), status_code=e.status, headers=headers)


def internal_error(what: str, request_id: str) -> RequestError:
    return RequestError(f"internal error {what} (request id {request_id})", status=500, type="server_error")


def backend_failure(e: BackendError, request_id: str = "") -> RequestError:
    """What a client learns of an engine failure: that it happened (502), or that the engine
    refused the request (400), and the request id under which the log has the details (which
    may name internal URLs and paths)."""
    rid = request_id or "unknown"
    if e.status in (400, 413, 422):
        return RequestError(
            f"the inference engine refused this request (HTTP {e.status}); the server log has the "
            f"reason under request id {rid}",
            param="messages",
            code="backend_rejected",
        )
    return RequestError(
        f"the inference engine failed on this request; the server log has the details under "
        f"request id {rid}",
        status=502,
        type="server_error",
        code="backend_error",
    )


class EventStreamResponse(Response):
    """Server-sent events written by `body(out)` (straight to the transport where the server offers
    a `ChunkedBody`); a client disconnect cancels it (and so the engine request) at once, whatever
    the ASGI server's spec version."""

    media_type = "text/event-stream"

    def __init__(
        self,
        body: Callable[[_Out], Awaitable[None]],
        headers: dict[str, str] | None = None,
    ) -> None:
        self.produce = body
        self.status_code = 200
        self.background = None
        self.init_headers({"Cache-Control": "no-cache", "X-Accel-Buffering": "no", **(headers or {})})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def send_body(data: bytes) -> None:
            await send({"type": "http.response.body", "body": data, "more_body": True})

        direct = scope.get("extensions", {}).get(CHUNKED_BODY)
        async with anyio.create_task_group() as tg:

            async def stream() -> None:
                try:
                    await send(
                        {
                            "type": "http.response.start",
                            "status": self.status_code,
                            "headers": self.raw_headers,
                        }
                    )
                    body = direct if direct is not None and direct.usable() else None
                    await self.produce(_Out(send_body, body))
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
                except OSError:
                    pass  # the client went away mid-send
                finally:
                    tg.cancel_scope.cancel()

            tg.start_soon(stream)
            await _wait_for_disconnect(receive)
            tg.cancel_scope.cancel()


async def _wait_for_disconnect(receive: Receive) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


async def _until_disconnect(request: Request, work: Callable[[], Awaitable[Response]]) -> Response:
    """Run `work`, cancelling it if the client disconnects first (non-streaming requests)."""
    result: list[Response] = []
    async with anyio.create_task_group() as tg:

        async def run() -> None:
            result.append(await work())
            tg.cancel_scope.cancel()

        tg.start_soon(run)
        await _wait_for_disconnect(request.receive)
        tg.cancel_scope.cancel()
    return result[0] if result else Response(status_code=499)


def create_app(config: ServerConfig, *, tokenizer: Any = None) -> Starlette:
    """The app for `config`; `tokenizer` (a chatsieve Tokenizer) skips loading from model_dir."""
    service = ChatService(config, tokenizer)
    from chatsieve.server.response_store import ResponseStore
    from chatsieve.server.responses_api import ChainBounds, responses_routes

    store = ResponseStore(
        config.response_store, max_responses=config.response_store_max, max_age=config.response_store_max_age,
        max_bytes=config.response_store_max_bytes,
    )
    chain_bounds = ChainBounds(config.response_chain_max_items,
                               config.response_chain_max_bytes or config.security.max_body_bytes,
                               wait=config.prompt_queue_timeout)

    async def prepared(
        request: Request, protocol: ClientProtocol, parse: Callable[[Any, RequestLimits], ParsedRequest],
        blocking: bool = False,
    ) -> tuple[ParsedRequest, Generation] | Response:
        """The request parsed by `parse`, its model checked and its generation prepared; or the
        error response, in the protocol's shape. A body over OFF_LOOP_BYTES, or any body when
        `parse` blocks (it reads the response store), is decoded and parsed in a worker thread,
        and a large one without cyclic garbage collection meanwhile (`_no_cycle_collection`);
        bodies over BIG_BODY_BYTES take turns (`ChatService.big_bodies`).
        The parsed request comes back without its messages (they were for the prompt, and are not
        held while the answer is generated: a large one is let go of in a worker thread); its
        `after_prepare` then runs in a worker thread, even if the request was cancelled."""
        raw = await request.body()
        large = len(raw) > OFF_LOOP_BYTES
        big = len(raw) > BIG_BODY_BYTES and service.big_bodies is not None
        held: list[ParsedRequest] = []
        async with service.big_bodies if big else contextlib.nullcontext():
            with _no_cycle_collection() if large else contextlib.nullcontext():
                try:
                    return await _prepared(request, protocol, parse, blocking or large, raw, held)
                finally:
                    after = held[0].after_prepare if held else None
                    with anyio.CancelScope(shield=True):
                        if large:  # gone before collection resumes, and not on the event loop
                            await run_in_threadpool(held.clear)
                        held.clear()
                        if after is not None:
                            await run_in_threadpool(after)

    async def _prepared(
        request: Request, protocol: ClientProtocol, parse: Callable[[Any, RequestLimits], ParsedRequest],
        off_loop: bool, raw: bytes, held: list[ParsedRequest],
    ) -> tuple[ParsedRequest, Generation] | Response:
        rid = request.scope.get(REQUEST_ID_KEY, "")
        try:
            if off_loop:
                parsed = await _refusable(parse_body, raw, parse, service.limits)
            else:
                parsed = parse_body(raw, parse, service.limits)
            held.append(parsed)
            service.check_model(parsed.chat.model)
            gen = await service.prepare(parsed.chat, caller_of(request.scope).id)
            gen.request_id = rid
        except RequestError as e:
            if e.code == "too_deeply_nested":
                log.info("%s refused: %s", rid, log_safe(e.message))
            return error_response(protocol, e)
        except Exception:
            log.exception("%s failed to prepare the request", rid)
            return error_response(protocol, internal_error("preparing the request", rid))
        return dataclasses.replace(parsed, chat=dataclasses.replace(parsed.chat, messages=[])), gen

    async def run(
        request: Request,
        protocol: ClientProtocol,
        parse: Callable[[Any, RequestLimits], ParsedRequest] | None = None,
        blocking: bool = False,
    ) -> Response:
        """One generation request of any protocol: streamed or whole, cancelled on disconnect;
        `parse` replaces `protocol.parse` for a request that needs more than its body (`blocking`:
        it does I/O, and runs in a worker thread)."""
        got = await prepared(request, protocol, parse or protocol.parse, blocking)
        if isinstance(got, Response):
            return got
        parsed, gen = got
        info = ResponseInfo(
            model=parsed.chat.model or service.model,
            prompt_tokens=gen.prompt_tokens,
            token_bytes=service.token_bytes,
        )
        headers = {**dict(parsed.headers), **gen.headers}
        if headers:
            log.info("%s %s", gen.request_id, log_safe(", ".join(f"{k}: {v}" for k, v in headers.items()), 2000))
        if parsed.chat.stream:
            encoder = protocol.encoder(parsed, info)
            return EventStreamResponse(
                functools.partial(_stream, gen, encoder, protocol.ping_interval), headers=headers
            )
        collector = protocol.collector(parsed, info)
        return await _until_disconnect(request, lambda: _complete(gen, protocol, collector, headers))

    async def chat_completions(request: Request) -> Response:
        return await run(request, OPENAI_CHAT)

    async def messages(request: Request) -> Response:
        # the served family decides what the thinking switch and effort become
        return await run(request, ANTHROPIC, functools.partial(ANTHROPIC.parse, format=service.config.format))

    async def count_tokens(request: Request) -> Response:
        """Anthropic's token count: the prompt rendered as for a generation, nothing generated."""
        got = await prepared(request, ANTHROPIC, functools.partial(ANTHROPIC.parse_count_tokens, format=service.config.format))
        if isinstance(got, Response):
            return got
        parsed, gen = got
        return JSONResponse({"input_tokens": gen.prompt_tokens}, headers=dict(parsed.headers))

    async def models(request: Request) -> Response:
        names = [service.model, *config.model_aliases]
        if "anthropic-version" in request.headers:  # the anthropic SDK's client.models.list()
            return JSONResponse(models_page(names, service.created))
        return JSONResponse(
            {
                "object": "list",
                "data": [
                    {"id": name, "object": "model", "created": service.created, "owned_by": "chatsieve",
                     "chatsieve": service.format_choice.to_dict()}
                    for name in names
                ],
            }
        )

    async def model(request: Request) -> Response:
        name = request.path_params["model"]
        anthropic_client = "anthropic-version" in request.headers
        try:
            service.check_model(name)
        except RequestError as e:
            return error_response(ANTHROPIC if anthropic_client else OPENAI_CHAT, e)
        if anthropic_client:
            return JSONResponse(model_entry(name, service.created))
        return JSONResponse({"id": name, "object": "model", "created": service.created, "owned_by": "chatsieve",
                             "chatsieve": service.format_choice.to_dict()})

    async def health(request: Request) -> Response:
        # Liveness: this process answers (200) whatever the engine's state, which it reports.
        up = await service.engine_reachable()
        return JSONResponse({"status": "ok" if up else "degraded", "engine": "up" if up else "down"})

    async def ready(request: Request) -> Response:
        # Readiness: 503 while the engine is unreachable, so a load balancer sends no traffic.
        up = await service.engine_reachable()
        return JSONResponse(
            {"status": "ready" if up else "not_ready", "engine": "up" if up else "down"},
            status_code=200 if up else 503,
        )

    async def server_error(request: Request, exc: Exception) -> Response:
        rid = request.scope.get(REQUEST_ID_KEY, "")
        log.error("%s unexpected %s: %s", rid, type(exc).__name__, log_safe(str(exc)))
        return error_response(protocol_for_path(request.url.path), internal_error("", rid))

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
        e = RequestError(str(exc.detail), code=code, status=exc.status_code)
        return error_response(protocol_for_path(request.url.path), e, headers=exc.headers)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await service.start()
        try:
            yield
        finally:
            await service.stop()
            store.close()

    app = Starlette(
        routes=[
            Route("/v1/chat/completions", chat_completions, methods=["POST"]),
            Route("/v1/messages", messages, methods=["POST"]),
            Route("/v1/messages/count_tokens", count_tokens, methods=["POST"]),
            *responses_routes(service, store, run, chain_bounds),
            Route("/v1/models", models, methods=["GET"]),
            Route("/v1/models/{model:path}", model, methods=["GET"]),
            Route("/health", health, methods=["GET"]),
            Route("/ready", ready, methods=["GET"]),
        ],
        exception_handlers={HTTPException: http_error, Exception: server_error},
        middleware=_middleware(config, service.metrics),
        lifespan=lifespan,
    )
    app.state.service = service
    app.state.response_store = store
    return app


def _middleware(config: ServerConfig, metrics: Metrics) -> list[Middleware]:
    """CORS (only for the --cors-origins given) outside the access checks: a browser's preflight
    carries no API key."""
    stack = []
    if config.cors_origins:
        stack.append(
            Middleware(
                CORSMiddleware,
                allow_origins=list(config.cors_origins),
                allow_methods=["GET", "POST", "DELETE"],
                allow_headers=["authorization", "content-type", "x-api-key", "anthropic-version", "anthropic-beta"],
                expose_headers=["x-request-id", LEFT_OUT_HEADER, MAX_TOKENS_HEADER],
            )
        )
    stack.append(Middleware(SecurityMiddleware, policy=config.security, error_shape=refusal_body,
                            on_refusal=lambda code: observe_refusal(metrics, code)))
    # inside the access checks: /metrics needs the API key like every route but /health
    stack.append(Middleware(MetricsMiddleware, metrics=metrics))
    return stack


def app_from_environ() -> Starlette:
    """The app for the configuration `chatsieve serve --workers N` put in the environment."""
    from chatsieve.server import CONFIG_ENV, _freeze_startup_objects

    app = create_app(ServerConfig.from_json(os.environ[CONFIG_ENV]))
    _freeze_startup_objects()
    return app


async def _complete(
    gen: Generation, protocol: ClientProtocol, collector: Collector, headers: dict[str, str]
) -> Response:
    try:
        async for events in gen.events():
            collector.apply(events)
        if getattr(collector, "blocking", False):  # it stores the response
            body = await run_in_threadpool(collector.body, gen.outcome)
        else:
            body = collector.body(gen.outcome)
    except BackendError as e:
        log.warning("%s backend failed: %s", gen.request_id, log_safe(str(e)))
        return error_response(protocol, backend_failure(e, gen.request_id))
    except Exception:
        log.exception("%s generation failed", gen.request_id)
        return error_response(protocol, internal_error("during generation", gen.request_id))
    if isinstance(body, bytes):
        return Response(body, media_type="application/json", headers=headers)
    return JSONResponse(body, headers=headers)


class _Pending:
    """Events the engine side has produced and the client side has not yet written.

    The writer takes everything pending at once, so when the client reads slower than the
    engine writes, deltas pile up here and go out merged (ChunkStream merges adjacent deltas
    of one kind); a client that keeps up gets each batch as it comes, the first at once.
    """

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.end: bytes | None = None  # b"" for a normal end, else the error events to send
        self.busy = False  # the writer holds a batch it has not finished writing
        self.last = 0.0  # loop time of the engine's last batch (for pings)
        self._waiter: asyncio.Future | None = None  # the writer's, while it waits

    def put(self, events: list[Event]) -> None:
        self.events += events
        self._wake()

    def close(self, end: bytes) -> None:
        self.end = end
        self._wake()

    def _wake(self) -> None:
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    async def take(self) -> tuple[list[Event], bytes | None]:
        if not self.events and self.end is None:
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        return self.take_now()

    def take_now(self) -> tuple[list[Event], bytes | None]:
        events, self.events = self.events, []
        return events, self.end


class _Out:
    """Where a stream's bytes go: straight to the client's transport (`ChunkedBody`) where the
    HTTP server offers it, else through the ASGI `send` (`send_body`)."""

    __slots__ = ("send_body", "body")

    def __init__(self, send_body: Callable[[bytes], Awaitable[None]], body: ChunkedBody | None) -> None:
        self.send_body = send_body
        self.body = body

    async def write(self, data: bytes) -> None:
        body = self.body
        if body is None:
            await self.send_body(data)
        else:
            await body.drain()
            body.write(data)


async def _produce(gen: Generation, pending: _Pending, encoder: StreamEncoder, out: _Out, ping: bool) -> None:
    """Read the engine's batches; write each straight away while the client keeps up and nothing
    waits before it (no hand-over, and for most engine events no task wake-up either: they come
    to `deliver` from the engine connection's callback), else leave it to the writer."""
    loop = asyncio.get_running_loop()
    body = out.body  # written to here only where the server offers the transport

    def deliver(batch: list[Event]) -> None:
        if ping:
            pending.last = loop.time()
        if not batch:
            return
        if pending.busy or pending.events or body is None or not body.ready:
            pending.put(batch)
        else:
            data = encoder.encode(batch)
            if data:
                body.write(data)

    try:
        async with contextlib.aclosing(gen.events(deliver)) as events:
            async for batch in events:
                deliver(batch)
    except BackendError as e:
        log.warning("%s backend failed mid-stream: %s", gen.request_id, log_safe(str(e)))
        pending.close(encoder.error(backend_failure(e, gen.request_id)))
    except Exception:
        log.exception("%s generation failed mid-stream", gen.request_id)
        pending.close(encoder.error(internal_error("during generation", gen.request_id)))
    else:
        pending.close(b"")


async def _stream(gen: Generation, encoder: StreamEncoder, ping_interval: float | None, out: _Out) -> None:
    """Write the encoded events of `gen` as they come: the engine is read by a task of its own
    (which writes itself while the client keeps up), so a slow client makes the writes bigger,
    never the engine wait. While the engine is silent for `ping_interval` seconds, the encoder's
    keep-alive is sent."""
    await out.write(encoder.start())
    pending = _Pending()
    loop = asyncio.get_running_loop()
    pending.last = loop.time()
    failed: Exception | None = None
    async with anyio.create_task_group() as tg:
        tg.start_soon(_produce, gen, pending, encoder, out, ping_interval is not None)
        try:
            while True:
                if ping_interval is None or pending.events or pending.end is not None:
                    events, end = await pending.take()
                else:
                    # one timer per quiet interval, not per event: the batches the producer
                    # writes itself move `pending.last` on, and the wait is resumed
                    wait = pending.last + ping_interval - loop.time()
                    events, end = [], None
                    if wait > 0:
                        with anyio.move_on_after(wait):
                            events, end = await pending.take()
                    if not events and end is None:
                        if loop.time() - pending.last >= ping_interval:
                            pending.last = loop.time()
                            ping = encoder.ping()
                            if ping:
                                pending.busy = True
                                await out.write(ping)
                                pending.busy = False
                        continue
                pending.busy = True
                body = out.body
                if body is not None and not body.ready:  # merge what comes until the client reads
                    await body.drain()
                    more, end = pending.take_now()
                    events += more
                data = encoder.encode(events) if events else b""
                if end is not None:
                    parts = getattr(encoder, "finish_parts", None)
                    if not end and parts is not None:
                        # the closing events one at a time, each made (and the response stored)
                        # in a worker thread and written before the next is made
                        if data:
                            await out.write(data)
                        closing = parts(gen.outcome)
                        while (part := await run_in_threadpool(next, closing, None)) is not None:
                            await out.write(part)
                            del part  # not held while the next is made
                        break
                    await out.write(data + (end or encoder.finish(gen.outcome)))
                    break
                if data:
                    await out.write(data)
                pending.busy = False
        except Exception as e:  # a failed write (client gone): raised as itself, not in a group
            failed = e
        tg.cancel_scope.cancel()
    if failed is not None:
        raise failed
