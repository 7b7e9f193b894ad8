"""How `ChatService.prepare` runs preparations: in threads of its own (at most two at once, in the
order the requests came), each request handed to one at once, with `max_concurrent_prompts`
slots bounding how many are admitted; a small request whose prompt is mostly cached on the event
loop instead, in the order they came, in slices with a loop turn between two."""

from __future__ import annotations

import asyncio
import threading
import time
import traceback
from types import SimpleNamespace

import pytest
from models import model_path, tokenizer

from chatsieve import render_prompt
from chatsieve.protocols.common import ChatRequest, RequestError
from chatsieve.server.config import ServerConfig
from chatsieve.server.service import LOOP_SLICE, LOOP_TOKENIZE_CHARS, PREPARATION_THREADS, ChatService


def _service(**kw) -> ChatService:
    config = ServerConfig(model_dir=model_path("qwen3"), format="qwen3", backend_url="http://127.0.0.1:9",
                          warm_up=False, **kw)
    return ChatService(config, tokenizer=tokenizer("qwen3"))


def test_preparations_run_in_their_own_threads_in_order_two_at_a_time():
    service = _service(max_concurrent_prompts=8)
    lock, release = threading.Lock(), threading.Event()
    started: list[str] = []
    running = [0, 0]  # now, most at once
    threads = set()

    def prepare(req: ChatRequest):
        with lock:
            started.append(req.model)
            running[0] += 1
            running[1] = max(running)
            threads.add(threading.current_thread().name)
        release.wait(10)
        with lock:
            running[0] -= 1
        if req.model == "refused":
            raise RequestError("no")
        return SimpleNamespace(prompt_tokens=1, model=req.model)

    service._prepare = prepare

    async def main() -> list:
        await service.start()
        try:
            names = [str(k) for k in range(6)] + ["refused"]
            tasks = [asyncio.create_task(service.prepare(ChatRequest(messages=[], model=n))) for n in names]
            while len(started) < PREPARATION_THREADS:
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.2)
            assert running[0] == PREPARATION_THREADS, "more preparations ran at once than there are threads"
            release.set()
            return await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            await service.stop()

    got = asyncio.run(main())
    assert [g.model for g in got[:-1]] == [str(k) for k in range(6)] and isinstance(got[-1], RequestError)
    assert started == [str(k) for k in range(6)] + ["refused"], "not prepared in the order the requests came"
    assert running[1] == PREPARATION_THREADS
    assert all(name.startswith("chatsieve-prepare") for name in threads)
    assert service._preparing.value == 8, "a slot was not given back"


def _log_handovers(service: ChatService, log: list[str]) -> None:
    """Append "handed over" to `log` each time a preparation is handed to a thread."""
    submit = service._preparers.submit

    def handed(fn, *args):
        log.append("handed over")
        return submit(fn, *args)

    service._preparers.submit = handed


def test_a_free_slot_is_taken_without_letting_later_requests_go_first():
    """The first request's preparation is handed to a thread before a request created after it
    has been parsed: no checkpoint between the two (one would put it behind all of them)."""
    service = _service()
    order: list[str] = []

    def prepare(req: ChatRequest):
        order.append(f"prepare {req.model}")
        return SimpleNamespace(prompt_tokens=1)

    service._prepare = prepare

    async def request(name: str) -> None:
        order.append(f"parse {name}")
        await service.prepare(ChatRequest(messages=[], model=name))

    async def main() -> None:
        await service.start()
        _log_handovers(service, order)
        try:
            first = asyncio.create_task(request("a"))
            await asyncio.sleep(0)  # "a" runs up to its thread's future
            later = [asyncio.create_task(request(n)) for n in "bcd"]
            await asyncio.gather(first, *later)
        finally:
            await service.stop()

    asyncio.run(main())
    assert order[:2] == ["parse a", "handed over"], order


def test_a_small_request_whose_prompt_is_cached_is_prepared_on_the_event_loop():
    """An agent's second request (same system prompt, a new turn) is prepared on the loop, with the
    ids a thread gives; its first (nothing cached), a large body's and a long new turn's in a thread."""
    service = _service()
    system = "You are a careful coding agent. " * 200  # far more than the loop tokenizes
    assert len(system) > 2 * LOOP_TOKENIZE_CHARS

    def request(turn: str) -> ChatRequest:
        return ChatRequest(messages=[{"role": "system", "content": system}, {"role": "user", "content": turn}],
                           stream=True)

    async def main() -> None:
        await service.start()
        handed: list[str] = []
        _log_handovers(service, handed)
        try:
            cases = [("first task", True, 1), ("second task", True, 0), ("third task", False, 1),
                     ("a long turn " * 200, True, 1), ("fourth task", True, 0)]
            for turn, small, threads in cases:
                before = len(handed)
                gen = await service.prepare(request(turn), "team", small=small)
                assert len(handed) - before == threads, (turn[:20], small)
                want = render_prompt(request(turn).messages, tokenizer=tokenizer("qwen3"), format="qwen3")
                assert gen.request.prompt_token_ids == want.token_ids
        finally:
            await service.stop()

    asyncio.run(main())
    assert service._preparing.value == service.config.max_concurrent_prompts


@pytest.mark.parametrize("slow", [False, True])
def test_preparations_on_the_loop_come_in_order_in_slices(slow):
    """Small requests prepared on the loop at once: in the order they came, back to back while a
    slice lasts (quick ones share loop turns), and a loop turn (another task runs) after each slice
    (slow ones: one per turn); a refusal is a RequestError without the preparer's frames, and every
    slot is given back."""
    service = _service()
    ticks = [0]
    seen: list[tuple[str, int]] = []

    def prepare(req: ChatRequest):
        seen.append((req.model, ticks[0]))
        if slow:
            time.sleep(LOOP_SLICE)
        if req.model == "refused":
            raise RequestError("no")
        return SimpleNamespace(prompt_tokens=1, model=req.model)

    service._prepare = prepare

    async def ticker() -> None:
        while True:
            ticks[0] += 1
            await asyncio.sleep(0)

    async def main() -> list:
        await service.start()
        handed: list[str] = []
        _log_handovers(service, handed)
        tick = asyncio.create_task(ticker())
        try:
            names = [str(k) for k in range(20)] + ["refused"]
            got = await asyncio.gather(*(service.prepare(ChatRequest(messages=[], model=n), small=True)
                                         for n in names), return_exceptions=True)
            assert not handed, "a small request went to a thread"
            return got
        finally:
            tick.cancel()
            await service.stop()

    got = asyncio.run(main())
    assert [g.model for g in got[:-1]] == [str(k) for k in range(20)] and isinstance(got[-1], RequestError)
    assert got[-1].__traceback__ is None or all(
        "_prepare_queued" not in str(f) for f in traceback.extract_tb(got[-1].__traceback__))
    assert [name for name, _ in seen] == [str(k) for k in range(20)] + ["refused"]
    at = [tick for _, tick in seen]
    assert at == sorted(at)
    if slow:
        assert all(b > a for a, b in zip(at, at[1:])), f"two slow preparations in one slice: {at}"
    else:
        assert len(set(at)) < len(at), f"every quick preparation had a loop turn of its own: {at}"
    assert service._preparing.value == service.config.max_concurrent_prompts


def test_a_request_cancelled_while_queued_on_the_loop_is_not_prepared():
    service = _service()
    seen: list[str] = []

    def prepare(req: ChatRequest):
        seen.append(req.model)
        return SimpleNamespace(prompt_tokens=1, model=req.model)

    service._prepare = prepare

    async def main() -> None:
        await service.start()
        try:
            tasks = [asyncio.create_task(service.prepare(ChatRequest(messages=[], model=n), small=True)) for n in "abc"]
            await asyncio.sleep(0)  # all three queued, none prepared yet
            tasks[1].cancel()
            done = await asyncio.gather(*tasks, return_exceptions=True)
            assert isinstance(done[1], asyncio.CancelledError) and [d.model for d in (done[0], done[2])] == ["a", "c"]
        finally:
            await service.stop()

    asyncio.run(main())
    assert seen == ["a", "c"]
    assert service._preparing.value == service.config.max_concurrent_prompts
