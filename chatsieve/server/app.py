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
from jinja2 import TemplateError
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from chatsieve import StreamParser, formats, load_tokenizer, render_prompt
from chatsieve.events import Event
from chatsieve.openai import (
    ChatRequest,
    ChunkStream,
    CompletionCollector,
    RequestError,
    ToolCallFilter,
    chat_completion,
    error_body,
    finish_reason,
    parse_chat_request,
    sse,
    sse_all,
    usage,
)
from chatsieve.prompt import PromptError
from chatsieve.server.backends import Backend, BackendError, GenerationRequest
from chatsieve.server.client import EngineHTTP
from chatsieve.server.pool import ReplicaPool

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
    extra_backend_urls: tuple[str, ...] = ()  # more replicas of the engine at backend_url

    @property
    def model_name(self) -> str:
        return self.served_model_name or Path(self.model_dir).resolve().name

    @property
    def backend_urls(self) -> tuple[str, ...]:
        return (self.backend_url, *self.extra_backend_urls)

    def to_json(self) -> str:
        d = dataclasses.asdict(self)
        d["model_dir"] = str(self.model_dir)
        return json.dumps(d)

    @classmethod
    def from_json(cls, text: str) -> ServerConfig:
        d = json.loads(text)
        d["model_dir"] = Path(d["model_dir"])
        d["extra_backend_urls"] = tuple(d.get("extra_backend_urls", ()))
        return cls(**d)


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
        self.client: EngineHTTP | None = None
        self.backend: ReplicaPool | None = None

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
        if self.config.warm_up:
            await run_in_threadpool(self._warm_up)

    async def stop(self) -> None:
        if self.backend is not None:
            await self.backend.stop()
        if self.client is not None:
            await self.client.aclose()

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
        try:
            prompt = await run_in_threadpool(
                lambda: render_prompt(
                    req.messages, tokenizer=self.tokenizer, tools=tools, format=self.config.format, **kwargs
                )
            )
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
        )
        assert self.backend is not None, "ChatService.start() was not awaited"
        return Generation(self.backend, gen_req, parser, req.tool_call_filter(), len(prompt.token_ids))


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

    async def events(self) -> AsyncIterator[list[Event]]:
        """Filtered event lists as the engine produces ids; BackendError if the engine fails."""
        engine_finish = None
        stream = self.backend.generate(self.request)
        try:
            async for batch in stream:
                self.completion_tokens += len(batch.token_ids)
                if batch.token_ids:
                    events = self.parser.feed(
                        token_ids=list(batch.token_ids),
                        logprobs=list(batch.logprobs) if batch.logprobs is not None else None,
                    )
                    if events:
                        yield self.calls.apply(events)
                if batch.finish_reason:
                    engine_finish = batch.finish_reason
                elif self.parser.stopped:
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


def backend_error_body(e: BackendError) -> dict:
    return error_body(str(e), type="server_error", code="backend_error")


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
        raw = await request.body()
        try:
            body = json.loads(raw)
        except ValueError as e:
            return error_response(RequestError(f"the request body is not valid JSON: {e}"))
        try:
            req = parse_chat_request(body)
            if req.model is not None and req.model != service.model:
                raise RequestError(
                    f"the model {req.model!r} does not exist; this server serves {service.model!r}",
                    param="model",
                    code="model_not_found",
                    status=404,
                )
            gen = await service.prepare(req)
        except RequestError as e:
            return error_response(e)
        except Exception:
            log.exception("failed to prepare a request")
            return JSONResponse(error_body("internal error preparing the request", type="server_error"), 500)
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
        return JSONResponse({"status": "ok"})

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
        ],
        exception_handlers={HTTPException: http_error},
        lifespan=lifespan,
    )
    app.state.service = service
    return app


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
        log.warning("backend failed: %s", e)
        if e.status in (400, 413, 422):
            return JSONResponse(
                error_body(str(e), param="messages", code="backend_rejected"), status_code=400
            )
        return JSONResponse(backend_error_body(e), status_code=502)
    except Exception:
        log.exception("generation failed")
        return JSONResponse(error_body("internal error during generation", type="server_error"), 500)
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
        log.warning("backend failed mid-stream: %s", e)
        pending.close(sse(backend_error_body(e)))
    except Exception:
        log.exception("generation failed mid-stream")
        pending.close(sse(error_body("internal error during generation", type="server_error")))
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
