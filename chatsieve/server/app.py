"""The ASGI app: OpenAI chat completions in front of an engine that speaks token ids.

request -> render_prompt (isolation on) -> prompt ids -> backend -> generated ids (+ logprobs)
-> gated StreamParser -> tool_choice filter -> OpenAI chunks or one chat.completion.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import inspect
import json
import logging
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
from jinja2 import TemplateError
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from chatsieve import StreamParser, formats, load_tokenizer, render_prompt
from chatsieve.events import Event
from chatsieve.grammar import GrammarError
from chatsieve.grammar import plan as constraint_plan
from chatsieve.prompt import PromptError, PromptTooLong
from chatsieve.protocols.openai_chat import (
    ChatRequest,
    ChunkStream,
    CompletionCollector,
    RequestError,
    RequestLimits,
    ToolCallFilter,
    chat_completion,
    error_body,
    finish_reason,
    json_depth_message,
    parse_chat_request,
    sse,
    sse_all,
    usage,
)
from chatsieve.server.backends import Backend, BackendError, GenerationRequest
from chatsieve.server.client import EngineHTTP
from chatsieve.server.model_check import check_model, engine_model_path
from chatsieve.server.pool import ReplicaPool
from chatsieve.server.security import REQUEST_ID_KEY, SecurityMiddleware, SecurityPolicy

log = logging.getLogger("chatsieve.server")

# render_prompt's own parameters: chat_template_kwargs may not override them, except the few
# that are safe to take from a request (documents for RAG templates, Gemma 4's empty thought).
REQUEST_RENDER_OPTIONS = frozenset({"documents", "keep_empty_thinking"})
RENDER_PARAMETERS = (
    frozenset(
        p.name for p in inspect.signature(render_prompt).parameters.values() if p.kind is not p.VAR_KEYWORD
    )
    - REQUEST_RENDER_OPTIONS
)


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
                "extra_backend_urls": tuple(d.get("extra_backend_urls", ())),
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
_CONTEXT_KEYS = ("max_position_embeddings", "max_sequence_length", "seq_length", "n_positions", "n_ctx")


def model_context_length(model_dir: Path, tokenizer: Any) -> int | None:
    """The model's context in tokens: config.json's max_position_embeddings (or kin), else the
    tokenizer's model_max_length; None if neither says."""
    try:
        config = json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        config = {}
    for section in (config, config.get("text_config") if isinstance(config, dict) else None):
        if isinstance(section, dict):
            for key in _CONTEXT_KEYS:
                value = section.get(key)
                if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                    return value
    value = getattr(tokenizer, "model_max_length", None)
    return value if isinstance(value, int) and value > 0 else None


class ChatService:
    """Everything one request needs: tokenizer, format, backend; owns the pooled HTTP client."""

    def __init__(self, config: ServerConfig, tokenizer: Any = None) -> None:
        formats.get(config.format)  # fail at start, naming the known formats
        self.config = config
        self.model = config.model_name
        self.tokenizer = tokenizer if tokenizer is not None else load_tokenizer(config.model_dir)
        self.stop_token_ids = tuple(sorted(self.tokenizer.stop_token_ids))
        self.token_bytes = self.tokenizer.token_bytes
        self.created = int(time.time())
        self.client: EngineHTTP | None = None  # generation traffic: the keep-alive pool
        self.probe: httpx.AsyncClient | None = None  # health and /props checks
        self.backend: ReplicaPool | None = None
        self.max_model_len = config.max_model_len or model_context_length(config.model_dir, self.tokenizer)
        if self.max_model_len is None:
            log.warning("the model's context length is unknown: pass --max-model-len to check prompt lengths")
        self.limits = dataclasses.replace(config.limits, max_model_len=self.max_model_len)
        self.vocab_size = self.tokenizer.hf.get_vocab_size(with_added_tokens=True)
        self._engine_state: tuple[float, bool] = (-1e9, False)  # (checked at, reachable)
        self._probe_lock = anyio.Lock()

    async def start(self) -> None:
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
        """Refuse to serve (ModelMismatch) when the engine's model has another vocabulary."""
        path = self.config.gguf
        if path is None and self.config.check_engine_model and self.config.backend_kind == "llamacpp":
            assert self.probe is not None
            path = await engine_model_path(self.probe, self.config.backend_url)
        if path is not None:
            await run_in_threadpool(check_model, Path(path), self.tokenizer)

    async def stop(self) -> None:
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
                [{"role": "user", "content": content}], tokenizer=self.tokenizer, format=self.config.format
            )
        except Exception as e:  # the request path reports the real error, with its reason
            log.warning("prompt warm-up failed: %s", e)

    def _token_text(self, token_id: int) -> str:
        return self.tokenizer.decode([token_id])

    # ------------------------------------------------------------ one request

    async def prepare(self, req: ChatRequest) -> Generation:
        """Render the prompt and set up parser and backend request; RequestError on bad input."""
        kwargs = req.template_kwargs
        bad = sorted(RENDER_PARAMETERS & kwargs.keys())
        if bad:
            raise RequestError(
                f"chat_template_kwargs may not set {', '.join(bad)}", param="chat_template_kwargs"
            )
        tools = req.prompt_tools
        context = self.max_model_len
        # room for the answer: max_tokens if given, else at least one token
        limit = None if context is None else context - (req.max_tokens or 1)
        try:
            prompt = await run_in_threadpool(
                lambda: render_prompt(
                    req.messages,
                    tokenizer=self.tokenizer,
                    tools=tools,
                    format=self.config.format,
                    token_limit=limit,
                    **kwargs,
                )
            )
        except PromptTooLong as e:
            asked = f" plus max_tokens {req.max_tokens}" if req.max_tokens else ""
            raise RequestError(
                f"this model's context is {context} tokens; the prompt has "
                f"{'' if e.exact else 'at least '}{e.tokens} tokens{asked}: shorten the messages"
                + (" or lower max_tokens" if req.max_tokens else ""),
                param="messages",
                code="context_length_exceeded",
            ) from None
        except PromptError as e:
            raise RequestError(
                f"cannot build the prompt: {e}", param="messages", code="prompt_error"
            ) from None
        except (TemplateError, TypeError, KeyError, IndexError, AttributeError) as e:
            # the template refused (raise_exception) or choked on this request's messages
            raise RequestError(
                f"the chat template failed on this request: {type(e).__name__}: {e}",
                param="messages",
                code="template_error",
            ) from None
        try:
            constraint = constraint_plan(
                self.config.format,
                engine=self.config.backend_kind,
                tools=tools,
                tool_choice=req.tool_choice.mode,
                response_format=req.response_format,
                token_id=self.tokenizer.single_token_id,
                parallel=req.parallel_tool_calls,
                thinking=req.thinking,
            )
        except GrammarError as e:
            param = "tool_choice" if req.tool_choice.mode in ("required", "function") else "response_format"
            raise RequestError(str(e), param=param, code="unsupported_constraint") from None
        parser = StreamParser(
            self.config.format,
            tools=tools,
            thinking=req.thinking,
            prompt=prompt.text,
            tokenizer=self.tokenizer,
            stop=list(req.stop) or None,
            stop_token_ids=list(self.stop_token_ids),
        )
        gen_req = GenerationRequest(
            prompt_token_ids=list(prompt.token_ids),
            max_tokens=req.max_tokens,
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
        assert self.backend is not None, "ChatService.start() was not awaited"
        gen = Generation(self.backend, gen_req, parser, req.tool_call_filter(), len(prompt.token_ids))
        # enforced here too, in case the engine ignores it: max_tokens, or what the context leaves
        gen.max_tokens = req.max_tokens or (context - len(prompt.token_ids) if context else None)
        gen.vocab_size = self.vocab_size
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
        self.request_id = ""

    async def events(self) -> AsyncIterator[list[Event]]:
        """Filtered event lists as the engine produces ids; BackendError if the engine fails."""
        engine_finish = None
        stream = self.backend.generate(self.request)
        try:
            async for batch in stream:
                ids, lps, over = batch.token_ids, batch.logprobs, False
                if self.max_tokens is not None and self.completion_tokens + len(ids) > self.max_tokens:
                    keep = max(self.max_tokens - self.completion_tokens, 0)
                    ids, lps, over = ids[:keep], lps[:keep] if lps is not None else None, True
                if ids and self.vocab_size is not None and (min(ids) < 0 or max(ids) >= self.vocab_size):
                    bad = next(i for i in ids if not 0 <= i < self.vocab_size)
                    raise BackendError(
                        f"the engine sent token id {bad}, outside the tokenizer's vocabulary "
                        f"(0..{self.vocab_size - 1}): does --model-dir hold the engine's tokenizer?"
                    )
                self.completion_tokens += len(ids)
                if ids:
                    events = self.parser.feed(token_ids=ids, logprobs=list(lps) if lps is not None else None)
                    if events:
                        yield self.calls.apply(events)
                if batch.finish_reason:
                    engine_finish = batch.finish_reason
                if over:
                    engine_finish = "length"  # the engine went past max_tokens: cut here
                    break
                if self.parser.stopped and not batch.finish_reason:
                    break  # a local stop: closing the stream cancels the engine request
        finally:
            await stream.aclose()
        events = self.calls.apply(self.parser.finish("stop" if self.parser.stopped else engine_finish))
        self.calls.finish()
        yield events
        if self.calls.dropped:
            log.info("dropped %d tool call(s) by tool_choice policy", len(self.calls.dropped))

    @property
    def finish_reason(self) -> str:
        return finish_reason(self.parser.finish_reason, self.calls.kept)

    @property
    def usage(self) -> dict:
        return usage(self.prompt_tokens, self.completion_tokens)


# ---------------------------------------------------------------- HTTP layer


def error_response(e: RequestError) -> JSONResponse:
    return JSONResponse(e.to_dict(), status_code=e.status)


def backend_error_body(e: BackendError, request_id: str = "") -> dict:
    """What a client learns of an engine failure: that it happened, and the request id under
    which the log has the details (which may name internal URLs and paths)."""
    return error_body(
        f"the inference engine failed on this request; the server log has the details under "
        f"request id {request_id or 'unknown'}",
        type="server_error",
        code="backend_error",
    )


def backend_rejected_body(e: BackendError, request_id: str = "") -> dict:
    return error_body(
        f"the inference engine refused this request (HTTP {e.status}); the server log has the "
        f"reason under request id {request_id or 'unknown'}",
        param="messages",
        code="backend_rejected",
    )


class EventStreamResponse(Response):
    """Server-sent events written by `body(write)`; a client disconnect cancels it (and so the
    engine request) at once, whatever the ASGI server's spec version."""

    media_type = "text/event-stream"

    def __init__(self, body: Callable[[Callable[[bytes], Awaitable[None]]], Awaitable[None]]) -> None:
        self.produce = body
        self.status_code = 200
        self.background = None
        self.init_headers({"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def write(data: bytes) -> None:
            await send({"type": "http.response.body", "body": data, "more_body": True})

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
                    await self.produce(write)
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

    async def chat_completions(request: Request) -> Response:
        rid = request.scope.get(REQUEST_ID_KEY, "")
        raw = await request.body()
        try:
            body = json.loads(raw)
        except ValueError as e:
            return error_response(RequestError(f"the request body is not valid JSON: {e}"))
        except RecursionError:
            message = json_depth_message(service.limits.max_json_depth)
            log.info("%s refused: %s", rid, message)
            return error_response(RequestError(message, code="too_deeply_nested"))
        try:
            req = parse_chat_request(body, service.limits)
            if req.model is not None and req.model != service.model:
                raise RequestError(
                    f"the model {req.model!r} does not exist; this server serves {service.model!r}",
                    param="model",
                    code="model_not_found",
                    status=404,
                )
            gen = await service.prepare(req)
            gen.request_id = rid
        except RequestError as e:
            if e.code == "too_deeply_nested":
                log.info("%s refused: %s", rid, e.message)
            return error_response(e)
        except Exception:
            log.exception("%s failed to prepare the request", rid)
            return JSONResponse(
                error_body(f"internal error preparing the request (request id {rid})", type="server_error"), 500
            )
        if req.stream:
            return EventStreamResponse(
                functools.partial(_stream, gen, req, service.model, service.token_bytes)
            )
        return await _until_disconnect(
            request, lambda: _complete(gen, req, service.model, service.token_bytes)
        )

    async def models(request: Request) -> Response:
        return JSONResponse(
            {
                "object": "list",
                "data": [
                    {
                        "id": service.model,
                        "object": "model",
                        "created": service.created,
                        "owned_by": "chatsieve",
                    }
                ],
            }
        )

    async def model(request: Request) -> Response:
        if request.path_params["model"] != service.model:
            raise HTTPException(404, f"the model {request.path_params['model']!r} does not exist")
        return JSONResponse(
            {"id": service.model, "object": "model", "created": service.created, "owned_by": "chatsieve"}
        )

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
        log.error("%s unexpected %s: %s", rid, type(exc).__name__, exc)
        return JSONResponse(error_body(f"internal error (request id {rid})", type="server_error"), 500)

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
        return JSONResponse(error_body(str(exc.detail), code=code), status_code=exc.status_code)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await service.start()
        try:
            yield
        finally:
            await service.stop()

    app = Starlette(
        routes=[
            Route("/v1/chat/completions", chat_completions, methods=["POST"]),
            Route("/v1/models", models, methods=["GET"]),
            Route("/v1/models/{model:path}", model, methods=["GET"]),
            Route("/health", health, methods=["GET"]),
            Route("/ready", ready, methods=["GET"]),
        ],
        exception_handlers={HTTPException: http_error, Exception: server_error},
        middleware=_middleware(config),
        lifespan=lifespan,
    )
    app.state.service = service
    return app


def _middleware(config: ServerConfig) -> list[Middleware]:
    """CORS (only for the --cors-origins given) outside the access checks: a browser's preflight
    carries no API key."""
    stack = []
    if config.cors_origins:
        stack.append(
            Middleware(
                CORSMiddleware,
                allow_origins=list(config.cors_origins),
                allow_methods=["GET", "POST"],
                allow_headers=["authorization", "content-type"],
                expose_headers=["x-request-id"],
            )
        )
    stack.append(Middleware(SecurityMiddleware, policy=config.security))
    return stack


def app_from_environ() -> Starlette:
    """The app for the configuration `chatsieve serve --workers N` put in the environment."""
    from chatsieve.server import CONFIG_ENV

    return create_app(ServerConfig.from_json(os.environ[CONFIG_ENV]))


async def _complete(
    gen: Generation, req: ChatRequest, model: str, token_bytes: Callable[[int], bytes]
) -> Response:
    collector = CompletionCollector()
    try:
        async for events in gen.events():
            collector.apply(events)
    except BackendError as e:
        log.warning("%s backend failed: %s", gen.request_id, e)
        if e.status in (400, 413, 422):
            return JSONResponse(backend_rejected_body(e, gen.request_id), status_code=400)
        return JSONResponse(backend_error_body(e, gen.request_id), status_code=502)
    except Exception:
        log.exception("%s generation failed", gen.request_id)
        return JSONResponse(
            error_body(f"internal error during generation (request id {gen.request_id})", type="server_error"),
            500,
        )
    return JSONResponse(
        chat_completion(
            collector.message,
            model=model,
            finish_reason=gen.finish_reason,
            usage=gen.usage,
            logprobs=req.logprobs,
            top_logprobs=req.top_logprobs,
            content_logprobs=collector.content_logprobs,
            reasoning_logprobs=collector.reasoning_logprobs,
            token_bytes=token_bytes,
        )
    )


class _Pending:
    """Events the engine side has produced and the client side has not yet written.

    The writer takes everything pending at once, so when the client reads slower than the
    engine writes, deltas pile up here and go out merged (ChunkStream merges adjacent deltas
    of one kind); a client that keeps up gets each batch as it comes, the first at once.
    """

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.end: bytes | None = None  # b"" for a normal end, else the error events to send
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
        events, self.events = self.events, []
        return events, self.end


async def _produce(gen: Generation, pending: _Pending) -> None:
    try:
        async with contextlib.aclosing(gen.events()) as events:
            async for batch in events:
                pending.put(batch)
    except BackendError as e:
        log.warning("%s backend failed mid-stream: %s", gen.request_id, e)
        pending.close(sse(backend_error_body(e, gen.request_id)))
    except Exception:
        log.exception("%s generation failed mid-stream", gen.request_id)
        pending.close(
            sse(error_body(f"internal error during generation (request id {gen.request_id})", type="server_error"))
        )
    else:
        pending.close(b"")


async def _stream(
    gen: Generation,
    req: ChatRequest,
    model: str,
    token_bytes: Callable[[int], bytes],
    write: Callable[[bytes], Awaitable[None]],
) -> None:
    """Write the chunks of `gen` as they come: the engine is read by a task of its own, so a
    slow client makes the chunks bigger, never the engine wait."""
    chunks = ChunkStream(
        model=model,
        logprobs=req.logprobs,
        top_logprobs=req.top_logprobs,
        include_usage=req.include_usage,
        token_bytes=token_bytes,
    )
    await write(sse(chunks.first()))
    pending = _Pending()
    failed: Exception | None = None
    async with anyio.create_task_group() as tg:
        tg.start_soon(_produce, gen, pending)
        try:
            while True:
                events, end = await pending.take()
                data = chunks.encode(events) if events else b""
                if end is not None:
                    if not end:
                        end = sse_all(chunks.finish(gen.finish_reason, gen.usage))
                    await write(data + end + sse("[DONE]"))
                    break
                if data:
                    await write(data)
        except Exception as e:  # a failed write (client gone): raised as itself, not in a group
            failed = e
        tg.cancel_scope.cancel()
    if failed is not None:
        raise failed
