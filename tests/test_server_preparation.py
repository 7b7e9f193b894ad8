"""How `ChatService.prepare` runs preparations: in threads of its own (at most two at once, in the
order the requests came), each request handed to one at once, with `max_concurrent_prompts`
slots bounding how many are admitted."""

from __future__ import annotations

import asyncio
import threading
from types import SimpleNamespace

from models import model_path, tokenizer

from chatsieve.protocols.common import ChatRequest, RequestError
from chatsieve.server.config import ServerConfig
from chatsieve.server.service import PREPARATION_THREADS, ChatService


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
        submit = service._preparers.submit

        def handed(fn, *args):
            order.append("handed over")
            return submit(fn, *args)

        service._preparers.submit = handed
        try:
            first = asyncio.create_task(request("a"))
            await asyncio.sleep(0)  # "a" runs up to its thread's future
            later = [asyncio.create_task(request(n)) for n in "bcd"]
            await asyncio.gather(first, *later)
        finally:
            await service.stop()

    asyncio.run(main())
    assert order[:2] == ["parse a", "handed over"], order
