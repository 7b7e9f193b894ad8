"""The OpenAI Responses routes: ``POST /v1/responses`` through the shared route runner, and
``GET`` / ``DELETE /v1/responses/{id}``, ``GET /v1/responses/{id}/input_items`` on the store.

Routes only: the protocol is protocols/openai_responses.py, the rows server/response_store.py;
this module binds them per request (the caller, the earlier items, storing the result).
"""

from __future__ import annotations

import dataclasses
import logging
import sqlite3
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from chatsieve._json import dumps
from chatsieve.protocols.common import RequestError, RequestLimits
from chatsieve.protocols.openai_responses import (
    OPENAI_RESPONSES,
    ResponsesParsed,
    input_items_page,
    not_found,
)
from chatsieve.protocols.openai_responses_request import ResponsesRequest, parse_responses_request
from chatsieve.server.errors import error_response
from chatsieve.server.response_store import ResponseStore, StoredResponse
from chatsieve.server.security import caller_of, log_safe
from chatsieve.server.tuning import trim_heap

log = logging.getLogger("chatsieve.server")

Runner = Callable[..., Awaitable[Response]]  # app.py's run(request, protocol, parse, blocking)


class LoadBudget:
    """Bytes of stored conversations loaded at once: a continuation takes its conversation's size
    before loading it and gives it back once its prompt is prepared (each takes at most the
    whole budget), so concurrent continuations of long conversations wait for each other rather
    than all holding their copies at once."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.used = 0
        self._room = threading.Condition()

    def take(self, n: int, timeout: float) -> Callable[[], None] | None:
        """Wait up to `timeout` seconds for `n` bytes of room; the function giving them back, or
        None when there was none."""
        n = min(n, self.capacity)
        with self._room:
            if not self._room.wait_for(lambda: self.used + n <= self.capacity, timeout):
                return None
            self.used += n
        given: list[bool] = []

        def give_back() -> None:
            if given:
                return
            given.append(True)
            with self._room:
                self.used -= n
                self._room.notify_all()

        return give_back


@dataclass(frozen=True)
class ChainBounds:
    """What a continuation (previous_response_id) may load: the stored conversation plus the
    request's own input, in items and in JSON bytes. Items that render nothing cost no tokens,
    so the context length alone does not bound them. At most `in_flight` conversations of the
    largest size are loaded and prepared at once (`LoadBudget`); a continuation that finds no
    room within `wait` seconds is a 503."""

    max_items: int
    max_bytes: int
    in_flight: int = 2
    wait: float = 5.0
    budget: LoadBudget = dataclasses.field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "budget", LoadBudget(self.in_flight * self.max_bytes))

    def load(self, size: int) -> Callable[[], None]:
        """Room to load a conversation of `size` bytes (the function gives it back), or a 503."""
        give_back = self.budget.take(size, self.wait)
        if give_back is None:
            raise RequestError(
                f"the server is loading {self.in_flight} long stored conversations already: retry shortly",
                code="server_busy", status=503, type="server_error",
            )
        return give_back

    def check(self, previous: str, stored_items: int, stored_bytes: int, req: ResponsesRequest) -> None:
        items = stored_items + len(req.input)
        size = stored_bytes + len(dumps(req.input))
        if items > self.max_items or size > self.max_bytes:
            raise RequestError(
                f"the conversation of previous_response_id {previous!r} ({stored_items} items, {stored_bytes} "
                f"bytes stored) and this request's input make {items} items and {size} bytes, over the "
                f"{self.max_items} items and {self.max_bytes} bytes a continuation may hold: start a new "
                "conversation (send the items it needs as input, without previous_response_id)",
                param="previous_response_id",
                code="conversation_too_long",
            )


# a continuation that loaded this much gives the freed heap back to the system once its prompt is
# prepared (worker threads allocate in arenas of their own, which keep what they freed)
TRIM_AFTER_BYTES = 1 << 20


def _then_trim(give_back: Callable[[], None]) -> Callable[[], None]:
    def done() -> None:
        give_back()
        trim_heap()

    return done


def responses_routes(service: Any, store: ResponseStore, run: Runner, bounds: ChainBounds) -> list[Route]:
    """The Responses routes for a ChatService, its store, the app's route runner and the bound
    on what a continuation may load. Everything that touches the store runs in a worker thread."""
    fmt = service.config.format

    def count_tokens(text: str) -> int:
        return len(service.tokenizer.encode(text))

    async def create(request: Request) -> Response:
        owner = caller_of(request.scope).id

        def parse(body: Any, limits: RequestLimits) -> ResponsesParsed:  # in a worker thread
            req = parse_responses_request(body, limits)
            history: list[dict] = []
            previous = req.previous_response_id
            give_back = None
            if previous is not None:
                size = store.size(owner, previous)  # a read of one row by key (WAL: never waits for a writer)
                found = None
                if size is not None:
                    bounds.check(previous, size.items, size.bytes, req)
                    give_back = bounds.load(size.bytes)
                    try:
                        found = store.get(owner, previous)
                    finally:
                        if found is None:
                            give_back()
                if found is None:
                    e = not_found(previous)
                    e.param = "previous_response_id"
                    raise e
                history = found.conversation
                del found
                if size.bytes >= TRIM_AFTER_BYTES:
                    give_back = _then_trim(give_back)

            def keep(response: dict) -> None:  # in a worker thread, before the client sees the end
                try:
                    stored = store.put(owner, response, req.input, previous)
                except sqlite3.Error as e:  # the answer still goes out; continuing from it will 404
                    stored = False
                    log.error("could not store response %s: %s", response.get("id"), log_safe(str(e)))
                if not stored:
                    log.warning("response %s was not stored (its previous response is gone, or it is over "
                                "--response-store-max-bytes alone)", response.get("id"))

            try:
                parsed = OPENAI_RESPONSES.parse_with(req, history, format=fmt, keep=keep, count_tokens=count_tokens)
            except BaseException:
                if give_back is not None:
                    give_back()
                raise
            return dataclasses.replace(parsed, after_prepare=give_back)

        return await run(request, OPENAI_RESPONSES, parse, blocking=True)

    async def retrieve(request: Request) -> Response:
        id = request.path_params["id"]
        found = await run_in_threadpool(store.response, caller_of(request.scope).id, id)
        return error_response(OPENAI_RESPONSES, not_found(id)) if found is None else JSONResponse(found)

    async def delete(request: Request) -> Response:
        id = request.path_params["id"]
        if not await run_in_threadpool(store.delete, caller_of(request.scope).id, id):
            return error_response(OPENAI_RESPONSES, not_found(id))
        return JSONResponse({"id": id, "object": "response", "deleted": True})

    async def input_items(request: Request) -> Response:
        id = request.path_params["id"]
        q = request.query_params

        def page() -> dict | None:
            found: StoredResponse | None = store.get(caller_of(request.scope).id, id)
            if found is None:
                return None
            return input_items_page(
                found.context, after=q.get("after"), before=q.get("before"), limit=q.get("limit"), order=q.get("order")
            )

        try:
            listed = await run_in_threadpool(page)
        except RequestError as e:
            return error_response(OPENAI_RESPONSES, e)
        return error_response(OPENAI_RESPONSES, not_found(id)) if listed is None else JSONResponse(listed)

    return [
        Route("/v1/responses", create, methods=["POST"]),
        Route("/v1/responses/{id}", retrieve, methods=["GET"]),
        Route("/v1/responses/{id}", delete, methods=["DELETE"]),
        Route("/v1/responses/{id}/input_items", input_items, methods=["GET"]),
    ]
