"""Serving under load: chunks merge when the client reads slower than the engine writes (and
only then), client keep-alive survives idle pauses at 200 concurrent connections, engine
connections are reused, and `--workers N` serves from N processes."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from models import DEV_INSTALL, require_module

require_module("starlette", DEV_INSTALL)
require_module("uvicorn", DEV_INSTALL)
require_module("tokenizers", DEV_INSTALL)
httpx = require_module("httpx", DEV_INSTALL)
anyio = require_module("anyio", DEV_INSTALL)

from fake_engines import FakeEngine, Script, serve_process  # noqa: E402
from models import model_path  # noqa: E402

import chatsieve  # noqa: E402
from chatsieve.events import (  # noqa: E402
    ContentDelta,
    Dropped,
    ReasoningDelta,
    ToolCallArgsDelta,
    ToolCallEnd,
    ToolCallStart,
)
from chatsieve.protocols.common import Outcome, RequestLimits, ResponseInfo  # noqa: E402
from chatsieve.protocols.openai_chat import OPENAI_CHAT, ChunkStream, sse_all  # noqa: E402
from chatsieve.server import build_parser, uvicorn_options  # noqa: E402
from chatsieve.server.backends import BackendError  # noqa: E402
from chatsieve.server.streaming import StreamOut as _Out  # noqa: E402
from chatsieve.server.streaming import write_event_stream as _stream  # noqa: E402

MODEL = "test-model"

# ---------------------------------------------------------------- coalescing


class FakeGeneration:
    """What `_stream` needs of a Generation: event lists, then its outcome. With `push`, the
    lists go to the sink `_stream` offers (as a real Generation pushes ordinary engine events
    from the engine connection's callback), else they are yielded."""

    def __init__(self, batches, *, between=None, fail: Exception | None = None, push: bool = False) -> None:
        self.batches = batches
        self.between = between  # awaited after each batch is handed over
        self.fail = fail
        self.push = push
        self.request_id = "chatcmpl-test"
        self.outcome = Outcome("stop", prompt_tokens=1, completion_tokens=len(batches))

    async def events(self, sink=None, text_sink=None):
        for batch in self.batches:
            if self.push:
                assert sink is not None, "_stream offers no sink"
                sink(batch)
            else:
                yield batch
            if self.between is not None:
                await self.between()
        if self.fail is not None:
            raise self.fail
        yield []


def chunks_of(writes: list[bytes]) -> list[list]:
    """Per write: the decoded chunks (or "[DONE]")."""
    out = []
    for data in writes:
        events = [e[6:] for e in data.split(b"\n\n") if e]
        out.append([e.decode() if e == b"[DONE]" else json.loads(e) for e in events])
    return out


def deltas(chunk: dict) -> dict:
    return chunk["choices"][0]["delta"] if chunk.get("choices") else {}


def encoder():
    """The chat-completions encoder of a streamed request, as the server makes it."""
    req = OPENAI_CHAT.parse({"messages": [{"role": "user", "content": "hi"}], "stream": True}, RequestLimits())
    return OPENAI_CHAT.encoder(req, ResponseInfo(model=MODEL, token_bytes=lambda i: b""))


class ChunkedSink:
    """A `ChunkedBody` stand-in: a write is taken at once (as the transport takes it) and the
    client has read it when the test's `write` returns; until then `ready` is false (a full
    socket buffer), so the stream waits in `drain` or leaves its batches pending."""

    def __init__(self, write) -> None:
        self._write = write
        self._task: asyncio.Task | None = None

    @property
    def ready(self) -> bool:
        return self._task is None or self._task.done()

    def write(self, data: bytes) -> None:
        assert self.ready, "written while the client was not reading"
        self._task = asyncio.ensure_future(self._write(data))

    async def drain(self) -> None:
        if self._task is not None:
            await self._task


def out(write, sink: str) -> _Out:
    """The stream's output: through the ASGI send (`write`), or straight to a transport."""
    return _Out(write, None) if sink == "send" else _Out(None, ChunkedSink(write))


SINKS = pytest.mark.parametrize("sink", ["send", "chunked_body"])
PUSH = pytest.mark.parametrize("push", [False, True], ids=["yielded", "pushed"])


def stream(gen, write, sink: str = "send") -> None:
    anyio.run(_stream, gen, encoder(), None, out(write, sink))


@PUSH
@SINKS
def test_a_slow_client_gets_the_pending_deltas_merged_and_the_first_at_once(sink, push):
    produced_all = None
    writes: list[bytes] = []

    async def write(data: bytes) -> None:
        nonlocal produced_all
        writes.append(data)
        if len(writes) == 2:  # the client stops reading after the first delta
            await produced_all.wait()

    batches = [[ReasoningDelta("r0 ")], [ReasoningDelta("r1 ")], [ReasoningDelta("r2 ")]]
    batches += [[ContentDelta("c0 ")], [ContentDelta("c1 "), ContentDelta("c2")]]

    class Gen(FakeGeneration):
        async def events(self, sink=None, text_sink=None):
            async for batch in super().events(sink, text_sink):
                yield batch
            produced_all.set()

    async def main():
        nonlocal produced_all
        produced_all = anyio.Event()
        gen = Gen(batches, between=lambda: anyio.sleep(0), push=push)
        await _stream(gen, encoder(), None, out(write, sink))

    anyio.run(main)
    got = chunks_of(writes)
    assert deltas(got[0][0]) == {"role": "assistant", "content": ""}
    assert [deltas(c) for c in got[1]] == [{"reasoning_content": "r0 ", "reasoning": "r0 "}]  # not held back
    # everything produced while the client was not reading: one chunk per kind, then the end
    assert [deltas(c) for c in got[2][:2]] == [
        {"reasoning_content": "r1 r2 ", "reasoning": "r1 r2 "},
        {"content": "c0 c1 c2"},
    ]
    assert got[2][2]["choices"][0]["finish_reason"] == "stop" and got[2][3] == "[DONE]"
    assert len(got) == 3


@PUSH
@SINKS
def test_a_client_that_keeps_up_gets_every_delta_as_it_comes(sink, push):
    written = None
    writes: list[bytes] = []

    async def write(data: bytes) -> None:
        writes.append(data)
        written.set()

    async def wait_written() -> None:
        nonlocal written
        await written.wait()
        written = anyio.Event()

    texts = ["a", "b", "c", "d"]

    async def main():
        nonlocal written
        written = anyio.Event()
        gen = FakeGeneration([[ContentDelta(t)] for t in texts], between=wait_written, push=push)
        await _stream(gen, encoder(), None, out(write, sink))

    anyio.run(main)
    got = chunks_of(writes)
    assert [[deltas(c) for c in w] for w in got[1:5]] == [[{"content": t}] for t in texts]
    assert got[-1][-1] == "[DONE]"


@SINKS
def test_an_engine_failure_mid_stream_comes_after_the_deltas_before_it(sink):
    writes: list[bytes] = []

    async def write(data: bytes) -> None:
        writes.append(data)

    stream(FakeGeneration([[ContentDelta("x")]], fail=BackendError("engine gone")), write, sink)
    events = [c for w in chunks_of(writes) for c in w]
    assert deltas(events[1]) == {"content": "x"}
    # the engine's words stay in the log; the client gets the request id to quote
    message = events[2]["error"]["message"]
    assert "engine gone" not in message and "chatcmpl-test" in message and events[3] == "[DONE]"


@SINKS
def test_pings_come_while_the_engine_is_silent_and_not_while_it_streams(sink):
    from chatsieve.protocols.anthropic import ANTHROPIC

    body = {"model": MODEL, "max_tokens": 10, "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    enc = ANTHROPIC.encoder(ANTHROPIC.parse(body, RequestLimits()), ResponseInfo(model=MODEL, token_bytes=lambda i: b""))
    writes: list[bytes] = []

    async def write(data: bytes) -> None:
        writes.append(data)

    class Gen(FakeGeneration):
        async def events(self, sink=None, text_sink=None):
            for k in range(300):  # 1.5 s or more of events, each far within the ping interval
                yield [ContentDelta(f"{k} ")]
                await anyio.sleep(0.005)
            await anyio.sleep(2.5)  # then silence: pings
            yield [ContentDelta("end")]
            yield []

    anyio.run(_stream, Gen([]), enc, 1.0, out(write, sink))
    kinds = [e.split(b"\n", 1)[0][len(b"event: "):].decode() for w in writes for e in w.split(b"\n\n") if e]
    deltas_before = kinds.index("ping")
    assert kinds[:deltas_before].count("content_block_delta") == 300  # no ping among the streamed deltas
    assert 1 <= kinds.count("ping") <= 3 and kinds[-1] == "message_stop"
    assert kinds[kinds.index("ping"):].count("content_block_delta") == 1  # "end", after the pings


text = st.text(max_size=6)
event = st.one_of(
    st.builds(ContentDelta, text),
    st.builds(ReasoningDelta, text),
    st.builds(ToolCallStart, st.integers(0, 2), st.just("call_1"), st.sampled_from(["f", "g\u00e9"])),
    st.builds(ToolCallArgsDelta, st.integers(0, 2), text),
    st.builds(ToolCallEnd, st.integers(0, 2)),
    st.builds(Dropped, text, st.just("why")),
)


@settings(max_examples=300, deadline=None)
@given(events=st.lists(event, max_size=12), include_usage=st.booleans())
def test_encoded_chunks_are_the_chunk_dicts_as_json(events, include_usage):
    cs = ChunkStream(model="m\u00fc", id="chatcmpl-x", created=7, include_usage=include_usage)
    assert cs.encode(events) == sse_all(cs.events(events))
    for data in cs.encode(events).split(b"\n\n")[:-1]:
        assert json.loads(data[6:])["object"] == "chat.completion.chunk"


@PUSH
def test_a_failed_write_stops_the_engine_side_and_comes_out_as_itself(push):
    closed = []

    class Gen(FakeGeneration):
        async def events(self, sink=None, text_sink=None):
            try:
                async for batch in super().events(sink, text_sink):
                    yield batch
            finally:
                closed.append(True)

    async def write(data: bytes) -> None:
        if b'"content":"a"' in data:
            raise OSError("the client went away")

    with pytest.raises(OSError, match="went away"):
        stream(Gen([[ContentDelta("a")], [ContentDelta("b")]], between=lambda: anyio.sleep(0.05), push=push), write)
    assert closed == [True]  # the engine request was closed, not left running


# ---------------------------------------------------------------- keep-alive at load


@pytest.fixture(scope="module")
def qwen_tok():
    return chatsieve.load_tokenizer(model_path("qwen3"))


@pytest.fixture(scope="module")
def engine(qwen_tok):
    ids = qwen_tok.encode("Fine, thanks.<|im_end|>")
    with FakeEngine(qwen_tok.decode, {"[ka]": Script(ids, batch=2)}).serving() as fake:
        yield fake


def content(r: httpx.Response) -> str:
    if not r.text.startswith("data: "):
        return r.json()["choices"][0]["message"]["content"]
    chunks = [json.loads(e[6:]) for e in r.text.split("\n\n") if e.startswith("data: {")]
    return "".join(deltas(c).get("content") or "" for c in chunks)


def serve_options(*argv: str) -> dict:
    args = build_parser().parse_args(
        ["--model-dir", ".", "--format", "qwen3", "--backend", "http://x", *argv]
    )
    return {**uvicorn_options(args), "http": "auto", "loop": "auto"}


def established(port: int) -> int:
    """Open TCP connections whose local end is 127.0.0.1:`port` (the server's side)."""
    n = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        f = line.split()
        if f[3] == "01" and int(f[1].split(":")[1], 16) == port:
            n += 1
    return n


def serve(*argv: str):
    """`chatsieve serve` in a process of its own, as a user runs it; yields (process, port, URL)."""
    args = ["--model-dir", str(model_path("qwen3")), "--format", "qwen3"]
    return serve_process(*args, "--served-model-name", MODEL, "--log-level", "warning", *argv)


CHAT = {
    "model": MODEL,
    "messages": [{"role": "user", "content": "[ka] how are you?"}],
    "chat_template_kwargs": {"enable_thinking": False},
}


@pytest.mark.skipif(not Path("/proc/net/tcp").is_file(), reason="counts connections in /proc/net/tcp")
def test_client_keep_alive_2000_requests_at_200_concurrent(engine):
    failures: list[str] = []

    async def one(client: httpx.AsyncClient, i: int) -> None:
        # every 10th a chat completion (streamed or not) through the engine; the rest cheap GETs:
        # keep-alive lives in the HTTP layer, the same for every route
        try:
            if i % 10 == 0:
                r = await client.post("/v1/chat/completions", json={**CHAT, "stream": i % 20 == 0})
                ok = r.status_code == 200 and content(r) == "Fine, thanks."
            else:
                r = await client.get("/v1/models")
                ok = r.status_code == 200 and r.json()["data"][0]["id"] == MODEL
            if not ok:
                failures.append(f"{r.status_code} {r.text[:200]}")
        except httpx.HTTPError as e:
            failures.append(repr(e))

    async def user(client: httpx.AsyncClient, requests: range) -> None:
        for i in requests:
            await one(client, i)

    async def wave(clients, start: int) -> None:
        await asyncio.gather(*(user(c, range(start + k, start + 1000, 200)) for k, c in enumerate(clients)))

    with serve("--backend", engine.url) as (_, port, url):

        async def main():
            # 200 users, each on one kept-alive connection, kept idle longer than uvicorn's own
            # default (5 s) allows; one client each (httpx's pool is slow with hundreds in one)
            limits = httpx.Limits(max_connections=1, max_keepalive_connections=1, keepalive_expiry=60)
            timeout = httpx.Timeout(120, connect=60)
            async with contextlib.AsyncExitStack() as stack:
                clients = [
                    await stack.enter_async_context(
                        httpx.AsyncClient(base_url=url, limits=limits, timeout=timeout)
                    )
                    for _ in range(200)
                ]
                await wave(clients, 0)
                kept = established(port)
                await asyncio.sleep(5.5)  # idle past uvicorn's default keep-alive timeout
                still = established(port)
                await wave(clients, 1000)
                return kept, still

        kept, still = asyncio.run(main())
    assert failures == []
    assert kept == still == 200  # the server did not close idle connections under the client


# ---------------------------------------------------------------- --workers


def children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry))
    return out


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="counts worker processes in /proc")
def test_workers_serve_from_several_processes(engine):
    with serve("--backend", engine.url, "--workers", "2") as (proc, _, url):
        for stream in (False, True):
            r = httpx.post(url + "/v1/chat/completions", json={**CHAT, "stream": stream}, timeout=60)
            assert r.status_code == 200 and content(r) == "Fine, thanks."
        workers = [p for p in children(proc.pid) if "python" in Path(f"/proc/{p}/cmdline").read_text()]
        assert len(workers) >= 2


def listening_sockets(port: int) -> set[str]:
    """Inodes of the sockets listening on 127.0.0.1:`port` (or any address)."""
    out = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        f = line.split()
        if f[3] == "0A" and int(f[1].split(":")[1], 16) == port:
            out.add(f[9])
    return out


def sockets_of(pid: int) -> set[str]:
    out = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            out.add(link[8:-1])
    return out


def spread_of_connections(proc, port: int, n: int) -> list[int]:
    """Open `n` connections at once; how many each worker process took (one request each, answered)."""
    workers = [p for p in children(proc.pid) if sockets_of(p) & listening_sockets(port)]
    before = {p: sockets_of(p) for p in workers}
    conns = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(n)]
    try:
        time.sleep(0.5)
        taken = sorted(len(sockets_of(p) - before[p]) for p in workers)
        for c in conns:
            c.sendall(f"GET /v1/models HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\n\r\n".encode())
        for c in conns:
            assert c.recv(64).startswith(b"HTTP/1.1 200"), "a connection was not answered"
    finally:
        for c in conns:
            c.close()
    return taken


@pytest.mark.skipif(not hasattr(socket, "SO_REUSEPORT") or not Path("/proc/net/tcp").is_file(),
                    reason="per-worker sockets need SO_REUSEPORT; counted in /proc")
def test_each_worker_listens_on_a_socket_of_its_own_and_takes_its_share(engine):
    """With one shared socket, whichever worker woke first took every waiting connection (89/39 of
    128 in a burst); with a socket each, the kernel spreads them. A worker that dies is restarted on
    its own socket, so no socket is left with connections nobody accepts."""
    with serve("--backend", engine.url, "--workers", "2") as (proc, port, url):
        deadline = time.monotonic() + 60
        while len(listening_sockets(port)) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)  # (/health answered once the first worker listened)
        assert len(listening_sockets(port)) == 2
        taken = spread_of_connections(proc, port, 64)
        assert sum(taken) == 64 and min(taken) >= 16, taken  # 64 hashed over 2: below 16 is a 1e-5 chance
        workers = [p for p in children(proc.pid) if sockets_of(p) & listening_sockets(port)]
        assert len(workers) == 2
        victim = workers[0]
        os.kill(victim, signal.SIGKILL)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            time.sleep(0.5)
            now = [p for p in children(proc.pid) if sockets_of(p) & listening_sockets(port)]
            if victim not in now and len(now) == 2 and min(spread_of_connections(proc, port, 16)) > 0:
                break  # the new worker accepts (connections to its socket waited for it meanwhile)
        taken = spread_of_connections(proc, port, 64)
        assert sum(taken) == 64 and min(taken) >= 16, taken
