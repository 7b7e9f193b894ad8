"""The streamed response: `EventStreamResponse` writes a generation's encoded events as they come
(the engine read by a task of its own, pending events merged for a slow client, pings while the
engine is silent); a disconnect cancels it, and `until_disconnect` a whole response's work.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import NamedTuple, TypeVar

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from chatsieve.events import Event
from chatsieve.protocols.common import StreamEncoder
from chatsieve.server.backends import BackendError
from chatsieve.server.chunked_body import EXTENSION as CHUNKED_BODY
from chatsieve.server.chunked_body import ChunkedBody
from chatsieve.server.errors import backend_failure, internal_error
from chatsieve.server.generation import Generation
from chatsieve.server.security import log_safe

log = logging.getLogger("chatsieve.server")
T = TypeVar("T")


class EventStreamResponse(Response):
    """Server-sent events written by `body(out)` (straight to the transport where the server offers
    a `ChunkedBody`); a client disconnect cancels it (and so the engine request) at once, whatever
    the ASGI server's spec version."""

    media_type = "text/event-stream"

    def __init__(
        self,
        body: Callable[[StreamOut], Awaitable[None]],
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

        async def stream() -> None:
            try:
                await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
                body = direct if direct is not None and direct.usable() else None
                await self.produce(StreamOut(send_body, body))
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            except OSError:
                pass  # the client went away mid-send

        await _until_disconnect(stream(), receive)


async def _wait_for_disconnect(receive: Receive) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


async def _until_disconnect(work: Awaitable[T], receive: Receive) -> T | None:
    """`work`, awaited in this task while a task of its own waits for the client's disconnect,
    which cancels it: its result, or None where the client went away first. (asyncio's own
    primitives: an anyio task group costs several times as much, and this runs per request.)"""
    task = asyncio.current_task()
    assert task is not None
    gone = False

    async def watch() -> None:
        nonlocal gone
        await _wait_for_disconnect(receive)
        gone = True
        task.cancel()

    watcher = asyncio.get_running_loop().create_task(watch())
    try:
        return await work
    except asyncio.CancelledError:
        if gone and not task.uncancel():  # cancelled by the disconnect alone
            return None
        raise
    finally:
        watcher.cancel()


async def until_disconnect(request: Request, work: Callable[[], Awaitable[Response]]) -> Response:
    """Run `work`, cancelling it if the client disconnects first (non-streaming requests)."""
    result = await _until_disconnect(work(), request.receive)
    return result if result is not None else Response(status_code=499)


class _Pending:
    """Events the engine side has produced and the client side has not yet written.

    The writer takes everything pending at once, so when the client reads slower than the
    engine writes, deltas pile up here and go out merged (ChunkStream merges adjacent deltas
    of one kind); a client that keeps up gets each batch as it comes, the first at once.
    """

    # what the compiled lane (chatsieve/_lane.c) reads and writes per token: slots, which it reaches
    # by their offsets; any other attribute is in the instance's __dict__
    __slots__ = ("busy", "events", "last", "__dict__", "__weakref__")

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


class TextLane(NamedTuple):
    """What `_produce`'s `deliver_text` reads and writes, for the compiled text lane
    (`chatsieve._lane`), which does what it does."""

    pending: _Pending
    body: ChunkedBody
    frames: dict[str, tuple[bytes, ...]]  # the encoder's `text_frames()`
    loop_time: Callable[[], float] | None  # where pings are sent: the loop's clock for `pending.last`
    chunked: tuple | None  # a ChunkedBody's flow, cycle and transport (its `ready` and `write` in the lane)


class StreamOut:
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


async def _produce(gen: Generation, pending: _Pending, encoder: StreamEncoder, out: StreamOut, ping: bool) -> None:
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

    encode_text = getattr(encoder, "encode_text", None)

    def deliver_text(kind: str, text: str) -> bool:  # `deliver` of one text delta, where it can be written now
        if pending.busy or pending.events or not body.ready:
            return False
        data = encode_text(kind, text)
        if data is None:
            return False
        if ping:
            pending.last = loop.time()
        body.write(data)
        return True

    frames = getattr(encoder, "text_frames", None)
    frames = frames() if frames is not None and body is not None else None
    if frames is not None:  # for the compiled lane: what deliver_text reads and writes
        kind = type(body)  # (the lane does ChunkedBody's `ready` and `write` itself: only where they are those)
        own = getattr(kind, "write", None) is ChunkedBody.write and getattr(kind, "ready", None) is ChunkedBody.ready
        chunked = (body._flow, body._cycle, body._transport) if own else None
        deliver_text.lane = TextLane(pending, body, frames, loop.time if ping else None, chunked)  # type: ignore[attr-defined]

    try:
        events = gen.events(deliver, deliver_text if encode_text is not None and body is not None else None)
        async with contextlib.aclosing(events) as events:
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


async def write_event_stream(gen: Generation, encoder: StreamEncoder, ping_interval: float | None, out: StreamOut) -> None:
    """Write the encoded events of `gen` as they come: the engine is read by a task of its own
    (which writes itself while the client keeps up), so a slow client makes the writes bigger,
    never the engine wait. While the engine is silent for `ping_interval` seconds, the encoder's
    keep-alive is sent."""
    await out.write(encoder.start())
    pending = _Pending()
    loop = asyncio.get_running_loop()
    pending.last = loop.time()
    failed: Exception | None = None
    async with asyncio.TaskGroup() as tg:
        producer = tg.create_task(_produce(gen, pending, encoder, out, ping_interval is not None))
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
                        try:
                            async with asyncio.timeout(wait):
                                events, end = await pending.take()
                        except TimeoutError:
                            pass
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
        producer.cancel()
    if failed is not None:
        raise failed
