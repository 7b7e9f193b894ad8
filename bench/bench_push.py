"""The Python cost per engine event of `chatsieve serve`'s push path, with no sockets and no kernel.

N streams of bench_server's 1,000-token Qwen3 answer (reasoning, content, one call): each stream's
`_stream` runs as in the server, its engine connection is a `_Connection` on a transport that
keeps what is written, and the stand-in engine's events are handed to the connections'
`data_received` one at a time, interleaved across the streams as a batching engine steps them.
The client side is a body that keeps the bytes. So this is what `bench_server.py --step-ms`
measures minus the wake-ups, the reads and the writes (its bare-relay row) and minus cold caches.
`--calls` also counts the Python and C calls per event (sys.setprofile), by function.

`--gap-ms 10` puts the paced bench's idle between the engine's steps back (the thread sleeps, as
the server's does in epoll_wait) and times each step's thread CPU alone: the same Python, woken
from idle as the server is 100 times a second at 1 stream. The difference from `--gap-ms 0` is
what the idle costs this code on this machine (cold caches, a core clocked down).

    CHATSIEVE_MODELS=../shared/models python bench/bench_push.py [--streams 1,128] [--calls] [--gap-ms 10]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_server import engine_events, loop_policy  # noqa: E402
from bench_stream import TOOLS, make_output, models_dir  # noqa: E402

from chatsieve import load_tokenizer, parse  # noqa: E402
from chatsieve.protocols.common import ResponseInfo  # noqa: E402
from chatsieve.protocols.openai_chat import OPENAI_CHAT  # noqa: E402
from chatsieve.server import client as engine_client  # noqa: E402
from chatsieve.server.config import ServerConfig  # noqa: E402
from chatsieve.server.service import ChatService  # noqa: E402
from chatsieve.server.streaming import StreamOut as _Out  # noqa: E402
from chatsieve.server.streaming import write_event_stream as _stream  # noqa: E402

HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
DONE = b"data: [DONE]\n\n"
END = b"%x\r\n%b\r\n0\r\n\r\n" % (len(DONE), DONE)


class Transport:
    """The engine connection's transport: keeps the request, ignores flow control."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.sent.append(data)

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


class Body:
    """The client's side (a ChunkedBody that is always ready)."""

    ready = True

    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.parts.append(data)

    async def drain(self) -> None:
        pass


async def run(streams: int, reps: int, count_calls: bool, gap: float) -> None:
    models = models_dir()
    tok = load_tokenizer(models / "qwen3")
    ids = make_output("qwen3", tok, 1000)
    events = engine_events(ids, tok.decode)
    expected = parse(token_ids=ids, format="qwen3", tokenizer=tok, tools=TOOLS, thinking=True)
    connections: list[engine_client._Connection] = []

    async def connection(self, key):  # EngineHTTP._connection without a socket
        conn = engine_client._Connection()
        conn.connection_made(Transport())
        connections.append(conn)
        return conn, False

    engine_client.EngineHTTP._connection = connection
    config = ServerConfig(model_dir=models / "qwen3", format="qwen3", backend_url="http://127.0.0.1:9",
                          warm_up=False)
    service = ChatService(config, tokenizer=tok)
    await service.start()
    request = {"model": "qwen3", "messages": [{"role": "user", "content": "Write the notes file."}],
               "tools": TOOLS, "stream": True, "chat_template_kwargs": {"enable_thinking": True}}
    best = float("inf")
    for rep in range(reps):
        connections.clear()
        tasks, bodies = [], []
        for _ in range(streams):
            parsed = OPENAI_CHAT.parse(request, service.limits)
            gen = await service.prepare(parsed.chat)
            info = ResponseInfo(model="qwen3", prompt_tokens=gen.prompt_tokens, token_bytes=service.token_bytes)
            bodies.append(Body())
            tasks.append(asyncio.create_task(_stream(gen, OPENAI_CHAT.encoder(parsed, info), None,
                                                     _Out(None, bodies[-1]))))
        while len(connections) < streams or not all(c.transport.sent for c in connections):
            await asyncio.sleep(0)
        for conn in connections:
            conn.data_received(HEAD)
        while not all(c.push is not None for c in connections):
            await asyncio.sleep(0)
        calls: collections.Counter[str] = collections.Counter()

        def count(frame, event, arg, calls=calls) -> None:
            if event == "call":
                calls[f"{Path(frame.f_code.co_filename).name}:{frame.f_code.co_name}"] += 1
            elif event == "c_call":
                calls["C " + getattr(arg, "__qualname__", str(arg))] += 1

        if count_calls and rep == 0:
            sys.setprofile(count)
        if gap:
            elapsed = 0.0
            for event in events[:-1]:
                time.sleep(gap)
                t0 = time.thread_time()
                for conn in connections:
                    conn.data_received(event)
                elapsed += time.thread_time() - t0
        else:
            t0 = time.perf_counter()
            for event in events[:-1]:
                for conn in connections:
                    conn.data_received(event)
            elapsed = time.perf_counter() - t0
        sys.setprofile(None)
        for conn in connections:
            conn.data_received(events[-1] + END)
        await asyncio.gather(*tasks)
        text = b"".join(bodies[0].parts)
        assert b"[DONE]" in text and expected.tool_calls[0].name.encode() in text, text[-300:]
        n = (len(events) - 1) * streams
        if calls:
            print(f"{sum(calls.values()) / n:.1f} calls per event (Python and C); the most frequent:")
            for name, k in calls.most_common(25):
                print(f"  {k / n:5.2f}  {name}")
        else:
            best = min(best, elapsed / n)
    after = f", {gap * 1e3:g} ms idle before each step" if gap else ""
    print(f"{streams:4} stream(s): {best * 1e6:.2f} µs per event (best of {reps - count_calls}{after})", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--streams", default="1,128", help="concurrent streams, comma-separated")
    ap.add_argument("--reps", type=int, default=5, help="timed runs per stream count (the best is shown)")
    ap.add_argument("--calls", action="store_true", help="also count calls per event (one extra, untimed run)")
    ap.add_argument("--gap-ms", type=float, default=0.0,
                    help="idle before each engine step, as in bench_server's paced mode (0: back to back)")
    a = ap.parse_args()
    loop_policy()
    for n in (int(s) for s in a.streams.split(",")):
        asyncio.run(run(n, a.reps + a.calls, a.calls, a.gap_ms / 1e3))


if __name__ == "__main__":
    main()
