"""The chat service (`ChatService`): the served model's tokenizer and format, the engine pool, and
each request's preparation (prompt, parser, engine request) into a `Generation`.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
from starlette.concurrency import run_in_threadpool

from chatsieve import StreamParser, formats, load_tokenizer, prefix_cache, render_prompt
from chatsieve.call_list import CallListParser
from chatsieve.detect import FormatNotFound
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
from chatsieve.protocols.common import EFFORT_BUDGETS, ChatRequest, RequestError, check_effort_budgets
from chatsieve.server.backends import Backend, BackendError, GenerationRequest
from chatsieve.server.client import EngineHTTP
from chatsieve.server.config import ServerConfig
from chatsieve.server.generation import Generation
from chatsieve.server.intake import BIG_BODIES_AT_ONCE, refusable
from chatsieve.server.known_tools import KnownTools
from chatsieve.server.metrics import Metrics, observe_refusal
from chatsieve.server.model_check import check_engine_kind, check_model, engine_model_path
from chatsieve.server.pool import ReplicaPool
from chatsieve.server.tuning import SWITCH_INTERVAL, fix_mmap_threshold, trim_heap

log = logging.getLogger("chatsieve.server")

# Threads that prepare prompts (render, isolate, tokenize): the work holds the GIL but for the
# tokenizer's part, so more threads than cores only take turns with the event loop, and each
# preparation of a burst then ends later (all of them about when the last one does, instead of one
# after another). Requests beyond these wait in order, holding a `max_concurrent_prompts` slot.
PREPARATION_THREADS = 2
# A small request is prepared on the event loop when its prompt needs at most this many characters
# tokenized (the rest is the prefix cache's): about a millisecond's work at worst.
LOOP_TOKENIZE_CHARS = 2048
# ... back to back for up to this many seconds at a time (as long as the GIL stays with a thread before
# it is asked for it back, at the interpreter's default switch interval)
LOOP_SLICE = 0.005
# A preparation this long (in prompt tokens) returns the freed heap to the system afterwards:
# the renderings, encodings and copies it used are many times the request's size.
TRIM_AFTER_TOKENS = 50_000


def _in_partition(partition: str, work: Callable[..., Any], *args: Any) -> Any:
    with prefix_cache.partition(partition):
        return work(*args)


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
        self.known_tools = KnownTools()  # each caller's tools as it sent them: not decoded again
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
        fix_mmap_threshold()
        sys.setswitchinterval(SWITCH_INTERVAL)
        self._preparing = anyio.Semaphore(self.config.max_concurrent_prompts)
        self._loop_queue: collections.deque[tuple[ChatRequest, str, asyncio.Future]] = collections.deque()
        self._loop_preparer: asyncio.Task | None = None
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
        self.known_tools.clear()
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

    async def prepare(self, req: ChatRequest, partition: str = "", *, small: bool = False) -> Generation:
        """Render the prompt and set up parser and backend request; RequestError on bad input.
        `partition` (the caller's id) is the prompt cache's: a prompt reuses only prefixes that
        prompts of the same partition left (`prefix_cache.partition`).

        Every route's request goes through here. The work (rendering, isolation, tokenizing, the
        grammar) runs in a worker thread, so no request holds up the event loop, and at most
        `max_concurrent_prompts` are prepared at once: a request that finds no free slot within
        `prompt_queue_timeout` seconds is a 503 (each preparation holds several copies of its
        prompt in memory).

        A `small` request (its body was parsed on the event loop) is prepared on the event loop
        instead, in the order they came, back to back for up to LOOP_SLICE seconds with a loop turn
        between two slices (`_prepare_queued`), unless its prompt needs more than
        LOOP_TOKENIZE_CHARS characters tokenized (the cache did not hold the rest of it) or waits for
        another's (`prefix_cache.on_event_loop`): then it is prepared again in a thread. An agent's
        request, whose system prompt and tools the cache holds, so costs the loop about a millisecond
        of the interpreter it would take from it in a thread anyway, without the hand-offs there and
        back (half of a burst's time to first token was the wait for one of the two threads).
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
                gen = await self._on_loop(req, partition) if small else None
                if gen is None:
                    gen = await refusable(_in_partition, partition, self._prepare, req, executor=self._preparers)
            except RequestError as e:
                observe_refusal(self.metrics, e.code)
                raise
            if gen.prompt_tokens >= TRIM_AFTER_TOKENS:
                await run_in_threadpool(trim_heap)  # the copies a long prompt needed go back
            return gen
        finally:
            self._preparing.release()

    async def _on_loop(self, req: ChatRequest, partition: str) -> Generation | None:
        """`req` prepared on the event loop, or None where that would tokenize too much (`prepare`):
        queued, and prepared in its turn by `_prepare_queued`."""
        future = asyncio.get_running_loop().create_future()
        self._loop_queue.append((req, partition, future))
        if self._loop_preparer is None:
            self._loop_preparer = asyncio.create_task(self._prepare_queued())
        return await future

    async def _prepare_queued(self) -> None:
        """Prepare the queued requests in the order they came, back to back for up to LOOP_SLICE
        seconds at a time, with a loop turn (the engines' and clients' sockets read, the answers
        streaming) before each slice: a burst's preparations are not each held up by the answers
        already streaming, whose events wait at most one slice."""
        queue = self._loop_queue
        try:
            while queue:
                await asyncio.sleep(0)
                ends = time.perf_counter() + LOOP_SLICE
                while queue and time.perf_counter() < ends:
                    req, partition, future = queue.popleft()
                    if future.done():  # its request was cancelled meanwhile
                        continue
                    try:
                        with prefix_cache.on_event_loop(LOOP_TOKENIZE_CHARS):
                            future.set_result(_in_partition(partition, self._prepare, req))
                    except prefix_cache.WouldBlock:
                        future.set_result(None)
                    except RequestError as e:  # raised where it is awaited, without this frame (as `refusable`)
                        e.__traceback__ = e.__context__ = e.__cause__ = None
                        future.set_exception(e)
                    except Exception as e:
                        future.set_exception(e)
                    del future
        finally:
            self._loop_preparer = None
            for _, _, future in queue:  # (cancelled: the server is stopping)
                future.cancel()
            queue.clear()

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
