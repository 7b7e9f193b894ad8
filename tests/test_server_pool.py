"""Several engine replicas: least-loaded healthy first, a refused connection retried on another
replica before the first token, health checks skipping a failing replica until it recovers."""

from __future__ import annotations

import asyncio
import contextlib
import json
import lzma
import socket

import pytest
from models import DEV_INSTALL, require_module

require_module("starlette", DEV_INSTALL)
require_module("uvicorn", DEV_INSTALL)
tokenizers = require_module("tokenizers", DEV_INSTALL)

from fake_engines import FakeEngine, Script, ServerThread  # noqa: E402
from models import model_path  # noqa: E402

from chatsieve.server.backends import Backend, BackendError, GenerationRequest  # noqa: E402
from chatsieve.server.client import EngineHTTP  # noqa: E402
from chatsieve.server.pool import ReplicaPool  # noqa: E402


@pytest.fixture(scope="module")
def qwen():
    path = model_path("qwen3/tokenizer.json.xz")
    return tokenizers.Tokenizer.from_str(lzma.open(path, "rt", encoding="utf-8").read())


@pytest.fixture(scope="module")
def answer(qwen):
    return qwen.encode("The answer is 42.<|im_end|>", add_special_tokens=False).ids


@pytest.fixture(scope="module")
def engines(qwen, answer):
    def decode(ids):
        return qwen.decode(list(ids), skip_special_tokens=False)

    scripts = {
        "[fast]": Script(answer, batch=2),
        "[slow]": Script(answer, batch=2, delay=0.1),
        "[cut]": Script(answer, batch=2, fail="truncate"),
    }
    with contextlib.ExitStack() as stack:
        out = []
        for _ in range(2):
            fake = FakeEngine(decode, scripts)
            fake.url = stack.enter_context(ServerThread(fake.app)).url
            out.append(fake)
        yield out


def dead_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def prompt(qwen, case: str) -> list[int]:
    return qwen.encode(f"<|im_start|>user\n{case} hi<|im_end|>\n<|im_start|>assistant\n").ids


async def generate(pool: ReplicaPool, ids: list[int]) -> list[int]:
    return [t async for b in pool.generate(GenerationRequest(ids)) for t in b.token_ids]


def make_pool(urls, qwen, **kw) -> ReplicaPool:
    client = EngineHTTP(read_timeout=10)
    backends = [Backend("vllm", u, client, lambda i: qwen.decode([i])) for u in urls]
    return ReplicaPool(backends, client, **kw)


def served(engines) -> list[int]:
    return [len(e.requests) for e in engines]


def clear(engines) -> None:
    for e in engines:
        e.requests.clear()
        e.healthy = True


def test_requests_go_to_the_least_loaded_replica(engines, qwen, answer):
    clear(engines)

    async def go():
        pool = make_pool([e.url for e in engines], qwen)
        results = await asyncio.gather(*(generate(pool, prompt(qwen, "[slow]")) for _ in range(6)))
        assert all(r == answer for r in results)
        assert [r.in_flight for r in pool.replicas] == [0, 0]

    asyncio.run(go())
    assert served(engines) == [3, 3]


def test_an_idle_replica_is_preferred_to_a_busy_one(engines, qwen, answer):
    clear(engines)

    async def go():
        pool = make_pool([e.url for e in engines], qwen)
        busy = pool.replicas[0]
        busy.in_flight = 5  # as if five streams were running there
        for _ in range(3):
            assert await generate(pool, prompt(qwen, "[fast]")) == answer

    asyncio.run(go())
    assert served(engines) == [0, 3]


def test_a_refused_connection_is_retried_on_another_replica(engines, qwen, answer):
    clear(engines)

    async def go():
        pool = make_pool([dead_url(), engines[0].url], qwen)
        for _ in range(3):
            assert await generate(pool, prompt(qwen, "[fast]")) == answer
        assert [r.healthy for r in pool.replicas] == [False, True]  # marked down after its refusal

    asyncio.run(go())
    assert served(engines) == [3, 0]


def test_a_failure_after_the_first_token_is_not_retried(engines, qwen):
    clear(engines)

    async def go():
        pool = make_pool([e.url for e in engines], qwen)
        with pytest.raises(BackendError, match="closed the stream before finishing"):
            await generate(pool, prompt(qwen, "[cut]"))

    asyncio.run(go())
    assert sum(served(engines)) == 1  # the engine had started: sending it again could run it twice


def test_when_every_replica_refuses_the_error_says_so(qwen):
    async def go():
        pool = make_pool([dead_url(), dead_url()], qwen)
        with pytest.raises(BackendError, match="cannot reach"):
            await generate(pool, [1, 2, 3])

    asyncio.run(go())


def test_a_replica_failing_its_health_check_is_skipped_until_it_recovers(engines, qwen, answer):
    clear(engines)

    async def go():
        pool = make_pool([e.url for e in engines], qwen)
        engines[0].healthy = False
        assert await pool.check(pool.replicas[0]) is False
        for _ in range(3):
            assert await generate(pool, prompt(qwen, "[fast]")) == answer
        assert served(engines) == [0, 3]
        engines[0].healthy = True
        assert await pool.check(pool.replicas[0]) is True
        for _ in range(2):
            await asyncio.gather(*(generate(pool, prompt(qwen, "[slow]")) for _ in range(2)))
        assert served(engines) == [2, 5]

    asyncio.run(go())


def test_the_health_loop_marks_replicas_down_and_back_up(engines, qwen):
    clear(engines)

    async def until(condition) -> None:
        for _ in range(500):
            if condition():
                return
            await asyncio.sleep(0.01)
        raise AssertionError("the health loop did not get there")

    async def go():
        pool = make_pool([e.url for e in engines] + [dead_url()], qwen, health_interval=0.05)
        pool.start()
        try:
            await until(lambda: not pool.replicas[2].healthy)
            engines[1].healthy = False
            await until(lambda: not pool.replicas[1].healthy)
            engines[1].healthy = True
            await until(lambda: pool.replicas[1].healthy)
            assert pool.replicas[0].healthy
        finally:
            await pool.stop()

    asyncio.run(go())


def test_one_replica_runs_no_health_checks(engines, qwen):
    async def go():
        pool = make_pool([engines[0].url], qwen, health_interval=0.01)
        pool.start()
        assert pool._health_task is None
        await pool.stop()

    asyncio.run(go())


def test_the_server_spreads_chat_requests_over_its_backends(engines, qwen):
    import chatsieve
    from chatsieve.server.app import create_app
    from chatsieve.server.config import ServerConfig

    httpx = require_module("httpx", DEV_INSTALL)
    clear(engines)
    tok = chatsieve.load_tokenizer(model_path("qwen3"))
    cfg = ServerConfig(
        model_dir=model_path("qwen3"),
        format="qwen3",
        backend_url=dead_url(),
        extra_backend_urls=(engines[0].url, engines[1].url),
        served_model_name="m",
        warm_up=False,
    )
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "[slow] hi"}],
        "chat_template_kwargs": {"enable_thinking": False},
    }

    async def one(client, stream: bool) -> str:
        r = await client.post("/v1/chat/completions", json={**body, "stream": stream}, timeout=60)
        assert r.status_code == 200
        if not stream:
            return r.json()["choices"][0]["message"]["content"]
        chunks = [json.loads(e[6:]) for e in r.text.split("\n\n") if e.startswith("data: {")]
        return "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])

    with ServerThread(create_app(cfg, tokenizer=tok)) as server:

        async def go():
            async with httpx.AsyncClient(base_url=server.url) as client:
                return await asyncio.gather(*(one(client, i % 2 == 0) for i in range(4)))

        texts = asyncio.run(go())
    assert texts == ["The answer is 42."] * 4
    assert sorted(served(engines)) == [2, 2]


def test_backend_may_be_given_more_than_once():
    from chatsieve.server import build_parser, config_from_args

    args = build_parser().parse_args(
        ["--model-dir", "m", "--format", "qwen3", "--backend", "http://a:1", "--backend", "http://b:2/"]
    )
    cfg = config_from_args(args)
    assert cfg.backend_urls == ("http://a:1", "http://b:2/")
    assert type(cfg).from_json(cfg.to_json()) == cfg  # what --workers processes are given
