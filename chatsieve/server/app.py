"""The router: the ASGI app's routes, middleware and lifespan around one `ChatService`; one route
runner drives every protocol (chatsieve.protocols), streamed (server/streaming.py) or whole.

request -> protocol.parse -> ChatRequest -> ChatService.prepare (server/service.py) -> Generation
(server/generation.py) -> the protocol's encoder (SSE bytes) or collector (one body).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import os
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from chatsieve.preparation import MAX_TOKENS_HEADER
from chatsieve.protocols.anthropic import ANTHROPIC, model_entry, models_page
from chatsieve.protocols.common import (
    LEFT_OUT_HEADER,
    ClientProtocol,
    Collector,
    ParsedRequest,
    RequestError,
    RequestLimits,
    ResponseInfo,
)
from chatsieve.protocols.openai_chat import OPENAI_CHAT
from chatsieve.server.backends import BackendError
from chatsieve.server.config import CONFIG_ENV, ServerConfig
from chatsieve.server.errors import (
    backend_failure,
    error_response,
    internal_error,
    protocol_for_path,
    refusal_body,
)
from chatsieve.server.generation import Generation
from chatsieve.server.intake import BIG_BODY_BYTES, OFF_LOOP_BYTES, parse_body, refusable
from chatsieve.server.metrics import Metrics, MetricsMiddleware, observe_refusal
from chatsieve.server.response_store import ResponseStore
from chatsieve.server.responses_api import ChainBounds, responses_routes
from chatsieve.server.security import REQUEST_ID_KEY, SecurityMiddleware, caller_of, log_safe
from chatsieve.server.service import ChatService
from chatsieve.server.streaming import EventStreamResponse, until_disconnect, write_event_stream
from chatsieve.server.tuning import freeze_startup_objects, no_cycle_collection

log = logging.getLogger("chatsieve.server")


def create_app(config: ServerConfig, *, tokenizer: Any = None) -> Starlette:
    """The app for `config`; `tokenizer` (a chatsieve Tokenizer) skips loading from model_dir."""
    service = ChatService(config, tokenizer)
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
        `parse` blocks (it reads the response store), is decoded and parsed in a worker thread;
        no request is parsed or prepared with cyclic garbage collection running (`no_cycle_collection`:
        it would walk every request in preparation, stopping them all); bodies over BIG_BODY_BYTES take
        turns (`ChatService.big_bodies`).
        The parsed request comes back without its messages (they were for the prompt, and are not
        held while the answer is generated: a large one is let go of in a worker thread); its
        `after_prepare` then runs in a worker thread, even if the request was cancelled."""
        raw = await request.body()
        large = len(raw) > OFF_LOOP_BYTES
        big = len(raw) > BIG_BODY_BYTES and service.big_bodies is not None
        held: list[ParsedRequest] = []
        async with service.big_bodies if big else contextlib.nullcontext():
            with no_cycle_collection(large):
                try:
                    return await _prepared(request, protocol, parse, blocking or large, raw, held)
                finally:
                    after = held[0].after_prepare if held else None
                    if large:  # gone before collection resumes, and not on the event loop
                        with anyio.CancelScope(shield=True):
                            await run_in_threadpool(held.clear)
                    held.clear()
                    if after is not None:  # (a shielded scope only where one is awaited: it costs ~10 µs)
                        with anyio.CancelScope(shield=True):
                            await run_in_threadpool(after)

    async def _prepared(
        request: Request, protocol: ClientProtocol, parse: Callable[[Any, RequestLimits], ParsedRequest],
        off_loop: bool, raw: bytes, held: list[ParsedRequest],
    ) -> tuple[ParsedRequest, Generation] | Response:
        rid = request.scope.get(REQUEST_ID_KEY, "")
        try:
            caller = caller_of(request.scope).id
            if off_loop:
                parsed = await refusable(parse_body, raw, parse, service.limits, service.known_tools, caller)
            else:
                parsed = parse_body(raw, parse, service.limits, service.known_tools, caller)
            held.append(parsed)
            service.check_model(parsed.chat.model)
            gen = await service.prepare(parsed.chat, caller, small=not off_loop)
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
                functools.partial(write_event_stream, gen, encoder, protocol.ping_interval), headers=headers
            )
        collector = protocol.collector(parsed, info)
        return await until_disconnect(request, lambda: _complete(gen, protocol, collector, headers))

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
    app = create_app(ServerConfig.from_json(os.environ[CONFIG_ENV]))
    freeze_startup_objects()
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
