"""Stamps each streamed request's phases inside `chatsieve serve`, for `bench_burst.py --timeline`.

That bench puts this directory first on the server's PYTHONPATH, so every process of the server
(each `--workers` process too) imports this at start-up. Where CHATSIEVE_BENCH_TIMELINE is set, it
wraps five of the server's functions and appends one JSON line per streamed request to
`$CHATSIEVE_BENCH_TIMELINE.<pid>`: the request id and the CLOCK_MONOTONIC times at which the
request reached the app (its head parsed), entered `ChatService.prepare` (its body read and
parsed), its preparation began and ended (in a thread, or on the event loop: `loop`), `prepare`
returned on the event loop, its stream began, and its engine request went out (an engine
connection in hand, the request written next: `new_connection` says whether that connection was
opened for it). The line is written when the engine request goes out, its last stamp, so it is
there before the answer's first byte. The writes cost the server a little CPU: compare runs with
it against runs with it, not against runs without.
"""

from __future__ import annotations

import os

_OUT = os.environ.get("CHATSIEVE_BENCH_TIMELINE")


def _install(out: str) -> None:
    import contextvars
    import json
    import threading
    import time

    from chatsieve.server import app, client, security, service

    # One request's stamps, set where its task begins; the task that reads its engine answer is
    # started from that task, and so sees the same dict.
    current: contextvars.ContextVar[dict | None] = contextvars.ContextVar("bench_timeline", default=None)
    call = security.SecurityMiddleware.__call__
    prepare, prepare_sync, stream = service.ChatService.prepare, service.ChatService._prepare, app.write_event_stream
    connection = client.EngineHTTP._connection

    async def timed_call(self, scope, receive, send):
        if scope["type"] == "http":
            current.set({"stamps": [time.monotonic()]})
        return await call(self, scope, receive, send)

    def timed_prepare_sync(self, req):
        began = time.monotonic()
        gen = prepare_sync(self, req)
        gen._bench_timeline = [began, time.monotonic()]
        gen._bench_on_loop = threading.current_thread() is threading.main_thread()
        return gen

    async def timed_prepare(self, req, partition="", **kw):
        entered = time.monotonic()
        gen = await prepare(self, req, partition, **kw)
        got = current.get()
        if got is not None:
            got["stamps"] += [entered, *gen._bench_timeline, time.monotonic()]
            got["loop"] = gen._bench_on_loop
        return gen

    async def timed_stream(gen, *args):
        got = current.get()
        if got is not None and len(got["stamps"]) == 5:
            got["stamps"].append(time.monotonic())
            got["id"] = gen.request_id
        return await stream(gen, *args)

    async def timed_connection(self, key):
        conn, reused = await connection(self, key)
        got = current.get()
        if got is not None and "id" in got and len(got["stamps"]) == 6:
            got["stamps"].append(time.monotonic())
            line = json.dumps({"id": got["id"], "stamps": got["stamps"], "loop": got["loop"],
                               "new_connection": not reused})
            with open(f"{out}.{os.getpid()}", "a") as f:
                f.write(line + "\n")
        return conn, reused

    security.SecurityMiddleware.__call__ = timed_call
    service.ChatService._prepare = timed_prepare_sync
    service.ChatService.prepare = timed_prepare
    app.write_event_stream = timed_stream
    client.EngineHTTP._connection = timed_connection


if _OUT:
    _install(_OUT)
