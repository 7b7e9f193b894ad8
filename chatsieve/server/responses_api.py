"""The OpenAI Responses routes: ``POST /v1/responses`` through the shared route runner, and
``GET`` / ``DELETE /v1/responses/{id}``, ``GET /v1/responses/{id}/input_items`` on the store.

Routes only: the protocol is protocols/openai_responses.py, the rows server/response_store.py;
this module binds them per request (the caller's key, the earlier items, storing the result).
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from chatsieve.protocols.common import RequestError, RequestLimits
from chatsieve.protocols.openai_responses import (
    OPENAI_RESPONSES,
    ResponsesParsed,
    input_items_page,
    not_found,
    parse_responses_request,
)
from chatsieve.server.response_store import ResponseStore, StoredResponse, owner_of

log = logging.getLogger("chatsieve.server")

Runner = Callable[..., Awaitable[Response]]  # app.py's run(request, protocol, parse)


def bearer_token(request: Request) -> str | None:
    """The API key the request carried (what its stored responses are bound to)."""
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return (token.strip() or None) if scheme.lower() == "bearer" else None


def responses_routes(service: Any, store: ResponseStore, run: Runner) -> list[Route]:
    """The Responses routes for a ChatService, its store and the app's route runner."""
    from chatsieve.server.app import error_response

    fmt = service.config.format

    def count_tokens(text: str) -> int:
        return len(service.tokenizer.encode(text))

    async def create(request: Request) -> Response:
        owner = owner_of(bearer_token(request))

        def parse(body: Any, limits: RequestLimits) -> ResponsesParsed:
            req = parse_responses_request(body, limits)
            history: list[dict] = []
            if req.previous_response_id is not None:
                # a read of one row by key (WAL: never waits for a writer)
                previous = store.get(owner, req.previous_response_id)
                if previous is None:
                    e = not_found(req.previous_response_id)
                    e.param = "previous_response_id"
                    raise e
                history = previous.conversation
            context = [*history, *req.input]

            def keep(response: dict) -> None:
                try:
                    store.put(owner, response, context)
                except sqlite3.Error as e:  # the answer still goes out; continuing from it will 404
                    log.error("could not store response %s: %s", response.get("id"), e)

            if req.left_out:
                log.info("responses: tools left out (no such service here): %s", ", ".join(req.left_out))
            return OPENAI_RESPONSES.parse_with(req, history, format=fmt, keep=keep, count_tokens=count_tokens)

        return await run(request, OPENAI_RESPONSES, parse)

    async def find(request: Request) -> StoredResponse | Response:
        id = request.path_params["id"]
        found = await run_in_threadpool(store.get, owner_of(bearer_token(request)), id)
        return error_response(OPENAI_RESPONSES, not_found(id)) if found is None else found

    async def retrieve(request: Request) -> Response:
        found = await find(request)
        return found if isinstance(found, Response) else JSONResponse(found.response)

    async def delete(request: Request) -> Response:
        id = request.path_params["id"]
        if not await run_in_threadpool(store.delete, owner_of(bearer_token(request)), id):
            return error_response(OPENAI_RESPONSES, not_found(id))
        return JSONResponse({"id": id, "object": "response", "deleted": True})

    async def input_items(request: Request) -> Response:
        found = await find(request)
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
            return error_response(OPENAI_RESPONSES, e)
        return JSONResponse(page)

    return [
        Route("/v1/responses", create, methods=["POST"]),
        Route("/v1/responses/{id}", retrieve, methods=["GET"]),
        Route("/v1/responses/{id}", delete, methods=["DELETE"]),
        Route("/v1/responses/{id}/input_items", input_items, methods=["GET"]),
    ]
