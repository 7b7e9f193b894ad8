"""A small HTTP/1.1 client for streaming from engines: a keep-alive connection pool, one POST
per generation, the response body handed over per network read (not per HTTP chunk).

Why not httpx here: it hands a chunked body over one HTTP chunk at a time through several
layers, and engines write one chunk per token, so its cost was paid per token. This client
parses with httptools and gives the reader everything that has arrived, so when the engine
is ahead many events are read, parsed and sent on as one batch.
"""

from __future__ import annotations

import asyncio
import os
import ssl
import time
from collections.abc import AsyncIterator, Callable
from typing import Any
from urllib.parse import urlsplit

import httptools

MAX_BUFFER = 1 << 20  # unread body bytes above which the socket stops being read
STEP_BYTES = 32 << 10  # body bytes handed over at a time; then other streams get their turn


class ClientError(Exception):
    """Base of the client's errors."""


class ConnectFailed(ClientError):
    """No connection could be made (refused, unreachable, timed out): nothing was sent."""


class ReadTimeout(ClientError):
    """No byte arrived for `read_timeout` seconds."""


class Disconnected(ClientError):
    """The engine closed the connection before the response was complete."""


def compiled(name: str) -> Any:
    """`name` from the compiled extension (chatsieve/_lane.c, built at install where a C compiler is
    found), unless CHATSIEVE_COMPILED_LANE=0; None without it, or where an extension built from an
    older source lacks it (the same path then runs in Python)."""
    if os.environ.get("CHATSIEVE_COMPILED_LANE", "1") == "0":
        return None
    try:
        from chatsieve import _lane
    except ImportError:
        return None
    return getattr(_lane, name, None)


class _PlainConnection(asyncio.Protocol):
    """An engine connection: every read through httptools (`_Connection` where the extension is
    built takes a read of whole chunks apart itself)."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.body: list[bytes] = []
        self.buffered = 0
        self.head_done = False
        self.complete = False
        self.lost = False
        self.error: Exception | None = None
        self.waiter: asyncio.Future | None = None
        self.deadline = 0.0
        self.watchdog: asyncio.TimerHandle | None = None
        self.idle_since = 0.0
        self.reading_paused = False
        self.received_any = False
        self.keep_alive = False
        # set while a reader has handed body bytes to a callback (Response.push_to); see there
        self.push: Callable[[bytes], bool] | None = None
        self.pushed_back = False  # the callback gave up: the reader's next `chunks()` step looks
        self.timeout = 0.0  # the reader's read timeout (moved on by pushed bytes too)

    # ---- asyncio.Protocol
    def connection_made(self, transport) -> None:
        self.transport = transport
        self.loop = asyncio.get_running_loop()

    def data_received(self, data: bytes) -> None:
        self.received_any = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as e:
            self.error = Disconnected(f"unreadable HTTP from the engine: {e}")
            self.transport.close()
        push = self.push
        if push is not None and self.body and not self.complete and self.error is None:
            self.deadline = self.loop.time() + self.timeout
            while self.body:  # (`take` hands over at most STEP_BYTES at a time)
                if not push(self.take()):
                    self.push = None
                    self.pushed_back = True
                    break
            else:
                return  # handled in this callback: the reader's task sleeps on
        if self.buffered > MAX_BUFFER and not self.reading_paused:
            self.reading_paused = True
            self.transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool | None:
        return None  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if self.head_done and not self.complete and exc is None and self._ends_at_close():
            self.complete = True  # a body without length or chunks ends with the connection
        if not self.complete and self.error is None and self.waiter is not None:
            self.error = Disconnected(str(exc) if exc else "the engine closed the connection")
        self._wake()

    def _ends_at_close(self) -> bool:
        names = {name for name, _ in self.headers}
        chunked = any(n == b"transfer-encoding" and b"chunked" in v.lower() for n, v in self.headers)
        return b"content-length" not in names and not chunked

    # ---- httptools callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        self.head_done = True

    def on_body(self, body: bytes) -> None:
        self.body.append(body)
        self.buffered += len(body)

    def on_message_complete(self) -> None:
        self.complete = True
        self.keep_alive = self.parser.should_keep_alive()  # the parser forgets it afterwards

    # ----
    def _wake(self) -> None:
        w = self.waiter
        if w is not None and not w.done():
            w.set_result(None)

    def start(self) -> None:
        """Reset for the next request on this connection."""
        self.parser = httptools.HttpResponseParser(self)
        self.status = 0
        self.headers = []
        self.body = []
        self.buffered = 0
        self.head_done = self.complete = self.received_any = self.keep_alive = False
        self.error = None
        self.push = None
        self.pushed_back = False

    async def wait(self, timeout: float) -> None:
        """Until something happens on the connection; ReadTimeout after `timeout` seconds.

        One timer per connection, moved on lazily when it fires, instead of one per wait: a
        stream waits once per token when the engine is not ahead."""
        loop = asyncio.get_running_loop()
        waiter = self.waiter = loop.create_future()
        self.timeout = timeout
        self.deadline = loop.time() + timeout
        if self.watchdog is None:
            self.watchdog = loop.call_at(self.deadline, self._check_deadline, timeout)
        try:
            await waiter
        finally:
            self.waiter = None

    def _check_deadline(self, timeout: float) -> None:
        self.watchdog = None
        waiter = self.waiter
        if waiter is None or waiter.done():
            return
        loop = asyncio.get_running_loop()
        if loop.time() >= self.deadline:
            waiter.set_exception(ReadTimeout(f"no data from the engine for {timeout:g} s"))
        else:
            self.watchdog = loop.call_at(self.deadline, self._check_deadline, timeout)

    def close(self) -> None:
        if self.watchdog is not None:
            self.watchdog.cancel()
            self.watchdog = None
        if self.transport is not None:
            self.transport.close()

    def take(self) -> bytes:
        """The buffered body, or its first pieces up to about STEP_BYTES."""
        body = self.body
        if self.buffered <= STEP_BYTES:
            data = b"".join(body) if len(body) != 1 else body[0]
            body.clear()
            self.buffered = 0
        else:
            n = size = 0
            while size < STEP_BYTES:
                size += len(body[n])
                n += 1
            data = b"".join(body[:n])
            del body[:n]
            self.buffered -= size
        if self.reading_paused and self.buffered <= MAX_BUFFER // 2:
            self.reading_paused = False
            self.transport.resume_reading()
        return data


_ConnectionBase = compiled("ConnectionBase")
if _ConnectionBase is None:
    _Connection = _PlainConnection
else:

    class _Connection(_ConnectionBase, _PlainConnection):  # type: ignore[no-redef]
        """An engine connection whose `data_received` (compiled: ConnectionBase) takes a read of
        whole plain chunks apart itself while a callback takes pushes and the parser stands at a
        chunk's start, which the parser's callbacks below keep track of; other reads go to `_read`,
        the plain connection's."""

        def __init__(self) -> None:
            super().__init__()
            self.step_bytes = STEP_BYTES
            self.at_chunk_start = False

        def _read(self, data: bytes) -> None:
            _PlainConnection.data_received(self, data)
            if self.error is not None or not data.endswith(b"\r\n"):  # (a size line may have begun)
                self.at_chunk_start = False

        def on_chunk_header(self) -> None:
            self.at_chunk_start = False

        def on_chunk_complete(self) -> None:
            self.at_chunk_start = True

        def start(self) -> None:
            super().start()
            self.at_chunk_start = False


class Response:
    """A streaming response; use as an async context manager (leaving it early closes the
    connection, which an engine takes as an abort; a complete one goes back to the pool)."""

    def __init__(self, pool: EngineHTTP, key: tuple, conn: _Connection) -> None:
        self._pool = pool
        self._key = key
        self._conn = conn
        self.status = conn.status
        self.headers = conn.headers

    def push_to(self, callback: Callable[[bytes], bool] | None) -> None:
        """Hand body bytes to `callback` as they arrive, in the connection's own callback, instead
        of waking the task reading `chunks()`: when an engine sends one event per token, that is a
        task wake-up and a climb through the reader's generators saved per token.

        `callback(data)` returns True to go on. False stops the pushing and wakes the reader, whose
        `chunks()` then yields (b"" when nothing new came) so it can look at what the callback
        left it. The end of the response, a failure and a disconnect are never pushed: they wake
        the reader as usual. None stops the pushing."""
        self._conn.push = callback

    async def chunks(self) -> AsyncIterator[bytes]:
        """Body bytes as they arrive: everything received so far, each time (see `push_to`)."""
        conn = self._conn
        while True:
            if conn.body:
                conn.pushed_back = False
                yield conn.take()
                if conn.body:
                    await asyncio.sleep(0)  # more is here: let the other streams have a turn first
            elif conn.pushed_back:
                conn.pushed_back = False
                yield b""
            elif conn.complete:
                return
            elif conn.error is not None:
                raise conn.error
            elif conn.lost:
                raise Disconnected("the engine closed the connection mid-response")
            else:
                await conn.wait(self._pool.read_timeout)

    async def read(self, limit: int = 1 << 20) -> bytes:
        out = bytearray()
        async for data in self.chunks():
            out += data
            if len(out) > limit:
                break
        return bytes(out[:limit])

    async def __aenter__(self) -> Response:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._conn.push = None
        self._pool._release(self._key, self._conn)


class EngineHTTP:
    """Keep-alive pool of at most `max_connections` connections per engine (host, port)."""

    def __init__(
        self,
        *,
        max_connections: int = 1024,
        connect_timeout: float = 10.0,
        read_timeout: float = 600.0,
        keepalive_expiry: float = 4.0,  # below the engines' own (uvicorn's and llama.cpp's are 5 s)
    ) -> None:
        self.max_connections = max_connections
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self.keepalive_expiry = keepalive_expiry
        self._idle: dict[tuple, list[_Connection]] = {}
        self._slots: dict[tuple, asyncio.Semaphore] = {}
        self.opened = 0  # connections made so far (for tests and the benchmark)
        self._ssl: ssl.SSLContext | None = None

    async def post(self, url: str, body: bytes, *, accept: str = "text/event-stream") -> Response:
        """Send a JSON POST and return once the response head has arrived (see `request`)."""
        return await self.request("POST", url, body, accept=accept)

    async def get(self, url: str) -> Response:
        return await self.request("GET", url, None, accept="*/*")

    async def request(self, method: str, url: str, body: bytes | None, *, accept: str) -> Response:
        """Send a request and return once the response head has arrived.

        A kept-alive connection that turns out closed before any byte of the answer came back
        (the engine dropped it while idle) is replaced by a new one, once.
        """
        parts = urlsplit(url)
        secure = parts.scheme == "https"
        host = parts.hostname or "127.0.0.1"
        port = parts.port or (443 if secure else 80)
        key = (secure, host, port)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        if body is None:
            head = f"{method} {path} HTTP/1.1\r\nhost: {parts.netloc}\r\naccept: {accept}\r\n\r\n"
            body = b""
        else:
            head = (
                f"{method} {path} HTTP/1.1\r\nhost: {parts.netloc}\r\ncontent-type: application/json\r\n"
                f"accept: {accept}\r\ncontent-length: {len(body)}\r\n\r\n"
            )
        request = head.encode("latin-1") + body
        slots = self._slots.get(key)
        if slots is None:
            slots = self._slots[key] = asyncio.Semaphore(self.max_connections)
        try:
            async with asyncio.timeout(self.read_timeout):
                await slots.acquire()
        except TimeoutError:
            raise ReadTimeout(f"all {self.max_connections} engine connections stayed busy") from None
        try:
            for _ in range(2):
                conn, reused = await self._connection(key)
                conn.start()
                conn.transport.write(request)
                try:
                    while not conn.head_done:
                        if conn.error is not None:
                            raise conn.error
                        if conn.lost:
                            raise Disconnected("the engine closed the connection before answering")
                        await conn.wait(self.read_timeout)
                except Disconnected:
                    conn.close()
                    if reused and not conn.received_any:
                        continue  # a stale kept-alive connection: try a fresh one
                    raise
                except BaseException:
                    conn.close()
                    raise
                return Response(self, key, conn)
            raise Disconnected("the engine closed the connection before answering")  # pragma: no cover
        except BaseException:
            slots.release()
            raise

    async def _connection(self, key: tuple) -> tuple[_Connection, bool]:
        idle = self._idle.get(key)
        now = time.monotonic()
        while idle:
            conn = idle.pop()
            if conn.lost or conn.transport.is_closing() or now - conn.idle_since > self.keepalive_expiry:
                conn.close()
                continue
            return conn, True
        secure, host, port = key
        if secure and self._ssl is None:
            self._ssl = ssl.create_default_context()
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.connect_timeout):
                _, conn = await loop.create_connection(
                    _Connection, host, port, ssl=self._ssl if secure else None
                )
        except TimeoutError:
            raise ConnectFailed(f"connecting timed out after {self.connect_timeout:g} s") from None
        except OSError as e:
            raise ConnectFailed(e.strerror or str(e)) from None
        self.opened += 1
        return conn, False

    def _release(self, key: tuple, conn: _Connection) -> None:
        self._slots[key].release()
        reusable = (
            conn.complete
            and not conn.body
            and not conn.lost
            and conn.error is None
            and conn.keep_alive
            and not conn.transport.is_closing()
        )
        if reusable:
            conn.idle_since = time.monotonic()
            self._idle.setdefault(key, []).append(conn)
        else:
            conn.close()

    def idle(self) -> int:
        """Kept-alive connections waiting for a request."""
        return sum(len(v) for v in self._idle.values())

    async def aclose(self) -> None:
        for conns in self._idle.values():
            for conn in conns:
                conn.close()
        self._idle.clear()
