"""Request bodies in: decoded (orjson where it reads a body exactly as json does) and parsed into
the protocol's request, and `refusable` work handed to worker threads.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any

import anyio
from starlette.concurrency import run_in_threadpool

from chatsieve._json import loads
from chatsieve._json import orjson as _orjson
from chatsieve.protocols.common import ParsedRequest, RequestError, RequestLimits, json_depth_message
from chatsieve.server.known_tools import KnownTools

# A body this large is decoded and parsed in a worker thread, not on the event loop.
OFF_LOOP_BYTES = 32 * 1024
# Bodies this large are parsed and prepared at most BIG_BODIES_AT_ONCE at a time (the others wait
# their turn, holding no thread): every busy worker thread takes the GIL from the event loop, and
# /health waited 0.4-0.65 s with five 4 MB bodies of small parts at once, 0.2-0.4 s with two.
BIG_BODY_BYTES = 1 << 20
BIG_BODIES_AT_ONCE = 2


async def refusable(work: Callable[..., Any], *args: Any, executor: Executor | None = None) -> Any:
    """`work(*args)` in a worker thread (of `executor` when given); a RequestError it raises is
    raised here without the worker's frames. Raised across the thread, it would be held in a
    reference cycle (its traceback holds the awaiting frame, which holds the future, which holds
    it) with every frame it passed and their locals (a request's whole body, its messages) until
    the cyclic collector found it, which walks all of that with the GIL held."""

    def call() -> tuple[Any, RequestError | None]:
        try:
            return work(*args), None
        except RequestError as e:
            e.__traceback__ = e.__context__ = e.__cause__ = None
            return None, e

    if executor is None:
        result, error = await run_in_threadpool(call)
    else:
        result, error = await _in_executor(executor, call)
    if error is not None:
        try:
            raise error
        finally:
            error = None  # this frame, in the traceback, must not hold it too
    return result


async def _in_executor(executor: Executor, work: Callable[[], Any]) -> Any:
    """`work()` in one of `executor`'s threads, handed over at once: no checkpoint before it (anyio's
    worker threads are reached through a capacity limiter, whose checkpoint sends the task to the
    back of the event loop's queue, behind every request that arrived meanwhile). A cancelled
    caller still waits for the work, as anyio's `run_sync` does, so it never outlives its slot."""
    future = asyncio.get_running_loop().run_in_executor(executor, work)
    with anyio.CancelScope(shield=True):
        return await future


# A run of 19 digits may be an integer beyond 64 bits, which orjson reads as a float where the
# standard library keeps an int (in a string, it only sends the body the slow way). Found by
# making every digit a 0 and looking for 19 of them: a regex takes ten times as long.
_DIGITS_AS_ZERO = bytes.maketrans(b"0123456789", b"0" * 10)
_LONG_NUMBER = b"0" * 19


def decode_body(raw: bytes) -> Any:
    """`json.loads(raw)`, the same value for every body: orjson where it reads the body exactly
    as the standard library does (no integer beyond 64 bits; anything orjson refuses, such as
    NaN, a lone surrogate, a BOM or UTF-16, and every error, goes to json.loads)."""
    if _orjson is not None and raw.translate(_DIGITS_AS_ZERO).find(_LONG_NUMBER) < 0:
        return loads(raw)
    return json.loads(raw)


def parse_body(raw: bytes, parse: Callable[[Any, RequestLimits], ParsedRequest],
               limits: RequestLimits, known: KnownTools | None = None, caller: str = "") -> ParsedRequest:
    """A request body decoded and parsed; RequestError for invalid or too deeply nested JSON. With
    `known`, the tools `caller` sent before are not decoded again (server/known_tools.py)."""
    try:
        body = decode_body(raw) if known is None else known.decode(raw, caller, decode_body)
    except ValueError as e:
        raise RequestError(f"the request body is not valid JSON: {e}") from None
    except RecursionError:
        raise RequestError(json_depth_message(limits.max_json_depth), code="too_deeply_nested") from None
    return parse(body, limits)
