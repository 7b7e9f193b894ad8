"""Stamps each streamed request's phases inside `chatsieve serve`, for `bench_burst.py --timeline`.

That bench puts this directory first on the server's PYTHONPATH, so every process of the server
(each `--workers` process too) imports this at start-up. Where CHATSIEVE_BENCH_TIMELINE is set, it
wraps three of the server's functions and appends one JSON line per streamed request to
`$CHATSIEVE_BENCH_TIMELINE.<pid>`: the request id and the CLOCK_MONOTONIC times at which the request
entered `ChatService.prepare` (its body read and parsed), its preparation began and ended (in a
thread, or on the event loop: `loop`), `prepare` returned on the event loop, and its stream
began. The writes cost the server a little CPU: compare runs with it against runs with it, not
against runs without.
"""

from __future__ import annotations

import os

_OUT = os.environ.get("CHATSIEVE_BENCH_TIMELINE")


def _install(out: str) -> None:
    import json
    import threading
    import time

    from chatsieve.server import app, service

    prepare, prepare_sync, stream = service.ChatService.prepare, service.ChatService._prepare, app.write_event_stream

    def timed_prepare_sync(self, req):
        began = time.monotonic()
        gen = prepare_sync(self, req)
        gen._bench_timeline = [began, time.monotonic()]
        gen._bench_on_loop = threading.current_thread() is threading.main_thread()
        return gen

    async def timed_prepare(self, req, partition="", **kw):
        entered = time.monotonic()
        gen = await prepare(self, req, partition, **kw)
        gen._bench_timeline = [entered, *gen._bench_timeline, time.monotonic()]
        return gen

    async def timed_stream(gen, *args):
        stamps = getattr(gen, "_bench_timeline", None)
        if stamps is not None:
            line = json.dumps({"id": gen.request_id, "stamps": [*stamps, time.monotonic()],
                               "loop": gen._bench_on_loop})
            with open(f"{out}.{os.getpid()}", "a") as f:
                f.write(line + "\n")
        return await stream(gen, *args)

    service.ChatService._prepare = timed_prepare_sync
    service.ChatService.prepare = timed_prepare
    app.write_event_stream = timed_stream


if _OUT:
    _install(_OUT)
