"""The OpenAI Responses routes: ``POST /v1/responses`` (streamed or whole), and
``GET`` / ``DELETE /v1/responses/{id}``, ``GET /v1/responses/{id}/input_items`` on the store.

Routes only: the protocol is protocols/openai_responses.py, the rows are server/response_store.py;
generation is the same ChatService / Generation as chat completions.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import sqlite3
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from chatsieve.protocols.openai_chat import RequestError, error_body, json_depth_message
from chatsieve.protocols.openai_responses import (
    LEFT_OUT_HEADER,
    ResponsesRequest,
    ResponseStream,
    input_items_page,
    not_found,
    parse_responses_request,
    response_id,
    usage,
)
from chatsieve.server.backends import BackendError
from chatsieve.server.response_store import ResponseStore, owner_of
from chatsieve.server.security import REQUEST_ID_KEY

log = logging.getLogger("chatsieve.server")


def bearer_token(request: Request) -> str | None:
    """The API key the request carried (what its stored responses are bound to)."""
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


def responses_routes(service: Any, store: ResponseStore) -> list[Route]:
    """The Responses routes for a ChatService and its store."""
    from chatsieve.server import app as server

    async def create(request: Request) -> Response:
        rid = request.scope.get(REQUEST_ID_KEY, "")
        raw = await request.body()
        try:
            body = json.loads(raw)
        except ValueError as e:
            return server.error_response(RequestError(f"the request body is not valid JSON: {e}"))
        except RecursionError:
            return server.error_response(
                RequestError(json_depth_message(service.limits.max_json_depth), code="too_deeply_nested")
            )
        owner = owner_of(bearer_token(request))
        try:
            req = parse_responses_request(body, service.limits)
            if req.model is not None and req.model != service.model:
                raise RequestError(
                    f"the model {req.model!r} does not exist; this server serves {service.model!r}",
                    param="model",
                    code="model_not_found",
                    status=404,
                )
            history: list[dict] = []
            if req.previous_response_id is not None:
                previous = await run_in_threadpool(store.get, owner, req.previous_response_id)
                if previous is None:
                    e = not_found(req.previous_response_id)
                    e.param = "previous_response_id"
                    raise e
                history = previous.conversation
            gen = await service.prepare(req.chat_request(history, format=service.config.format))
            gen.request_id = rid
        except RequestError as e:
            return server.error_response(e)
        except Exception:
            log.exception("%s failed to prepare the request", rid)
            return JSONResponse(
                error_body(f"internal error preparing the request (request id {rid})", type="server_error"),
                500,
            )
        headers = {}
        if req.left_out:
            headers[LEFT_OUT_HEADER] = ", ".join(req.left_out)
            log.info("%s tools left out (no such service here): %s", rid, ", ".join(req.left_out))
        run = _Run(service, store, req, gen, owner, [*history, *req.input])
        if req.stream:
            response = server.EventStreamResponse(run.stream)
            response.raw_headers += [(k.encode(), v.encode()) for k, v in headers.items()]
            return response
        result = await server._until_disconnect(request, run.complete)
        result.headers.update(headers)
        return result

    async def retrieve(request: Request) -> Response:
        found = await _find(request)
        return found if isinstance(found, Response) else JSONResponse(found.response)

    async def delete(request: Request) -> Response:
        id = request.path_params["id"]
        if not await run_in_threadpool(store.delete, owner_of(bearer_token(request)), id):
            return server.error_response(not_found(id))
        return JSONResponse({"id": id, "object": "response", "deleted": True})

    async def input_items(request: Request) -> Response:
        found = await _find(request)
        if isinstance(found, Response):
            return found
        q = request.query_params
        try:
            page = input_items_page(
                found.context,
                after=q.get("after"),
                before=q.get("before"),
                limit=q.get("limit"),
                order=q.get("order"),
            )
        except RequestError as e:
            return server.error_response(e)
        return JSONResponse(page)

    async def _find(request: Request):
        id = request.path_params["id"]
        found = await run_in_threadpool(store.get, owner_of(bearer_token(request)), id)
        return server.error_response(not_found(id)) if found is None else found

    return [
        Route("/v1/responses", create, methods=["POST"]),
        Route("/v1/responses/{id}", retrieve, methods=["GET"]),
        Route("/v1/responses/{id}", delete, methods=["DELETE"]),
        Route("/v1/responses/{id}/input_items", input_items, methods=["GET"]),
    ]


class _Run:
    """One Responses generation: the engine's events to the stream or the final object, and the
    finished response into the store (before the client learns it is finished)."""

    def __init__(
        self,
        service: Any,
        store: ResponseStore,
        req: ResponsesRequest,
        gen: Any,
        owner: str,
        context: list[dict],
    ) -> None:
        self.service = service
        self.store = store
        self.req = req
        self.gen = gen
        self.owner = owner
        self.context = context
        skeleton = req.skeleton(id=response_id(), model=service.model)
        self.out = ResponseStream(skeleton, namespaces=req.namespaces, emit=req.stream)

    def _usage(self) -> dict:
        reasoning = "".join(
            p["text"] for item in self.out.output if item["type"] == "reasoning" for p in item["content"]
        )
        spent = len(self.service.tokenizer.encode(reasoning)) if reasoning else 0
        return usage(self.gen.prompt_tokens, self.gen.completion_tokens, spent)

    def _finish(self) -> bytes:
        cut = self.gen.parser.finish_reason == "length"
        return self.out.finish(usage=self._usage(), incomplete_reason="max_output_tokens" if cut else None)

    async def _keep(self) -> None:
        if not self.req.store:
            return
        try:
            await run_in_threadpool(self.store.put, self.owner, self.out.final, self.context)
        except sqlite3.Error as e:  # the answer still goes out; continuing from it will 404
            log.error("%s could not store response %s: %s", self.gen.request_id, self.out.final["id"], e)

    async def complete(self) -> Response:
        from chatsieve.server import app as server

        gen = self.gen
        try:
            async for events in gen.events():
                self.out.encode(events)
        except BackendError as e:
            log.warning("%s backend failed: %s", gen.request_id, e)
            if e.status in (400, 413, 422):
                return JSONResponse(server.backend_rejected_body(e, gen.request_id), status_code=400)
            return JSONResponse(server.backend_error_body(e, gen.request_id), status_code=502)
        except Exception:
            log.exception("%s generation failed", gen.request_id)
            return JSONResponse(
                error_body(
                    f"internal error during generation (request id {gen.request_id})", type="server_error"
                ),
                500,
            )
        self._finish()
        await self._keep()
        return JSONResponse(self.out.final)

    async def stream(self, write: Callable[[bytes], Awaitable[None]]) -> None:
        """Write the events as they come; the engine is read by a task of its own (as chat's)."""
        from chatsieve.server import app as server

        await write(self.out.start())
        pending = server._Pending()
        failure: list[tuple[str, str]] = []
        failed: Exception | None = None
        async with anyio.create_task_group() as tg:
            tg.start_soon(functools.partial(_produce, self.gen, pending, failure))
            try:
                while True:
                    events, end = await pending.take()
                    data = self.out.encode(events) if events else b""
                    if end is not None:
                        if failure:
                            code, message = failure[0]
                            data += self.out.fail(message, code=code, usage=self._usage())
                        else:
                            tail = self._finish()
                            await self._keep()
                            data += tail
                        await write(data)
                        break
                    if data:
                        await write(data)
            except Exception as e:  # a failed write (client gone): raised as itself, not in a group
                failed = e
            tg.cancel_scope.cancel()
        if failed is not None:
            raise failed


async def _produce(gen: Any, pending: Any, failure: list[tuple[str, str]]) -> None:
    from chatsieve.server import app as server

    try:
        async with contextlib.aclosing(gen.events()) as events:
            async for batch in events:
                pending.put(batch)
    except BackendError as e:
        log.warning("%s backend failed mid-stream: %s", gen.request_id, e)
        failure.append(("backend_error", server.backend_error_body(e, gen.request_id)["error"]["message"]))
    except Exception:
        log.exception("%s generation failed mid-stream", gen.request_id)
        failure.append(("server_error", f"internal error during generation (request id {gen.request_id})"))
    pending.close(b"")
