"""The CPU one agent request costs `chatsieve serve`, with no sockets and no other process: intake,
preparation, the engine request, and a short answer streamed back.

The server's own pieces run as in `chatsieve serve`: its guarded h11 protocol on a transport that
keeps what is written, the app (`create_app`, with its middleware), the preparation thread, and the
engine client, whose connection is a `_Connection` on such a transport (as in bench_push.py), fed
bench_server's stand-in events for a 60-token Qwen3 answer (reasoning, content, a call) at once.
The request is an agent's: a system prompt of `--size` tokens, 20 tools, a new user message each
time, one API key. Printed: process CPU ms per request (every thread), in turn with requests
`--at-once` at a time; `--profile FILE` writes cProfile stats of the timed requests (every
thread's calls in one file, thread CPU time).

    CHATSIEVE_MODELS=../shared/models python bench/bench_request.py [--size 2000] [--requests 200]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import json
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_prompt import agent_tools, system_prompt  # noqa: E402
from bench_push import END, HEAD  # noqa: E402
from bench_push import Transport as EngineTransport  # noqa: E402
from bench_server import Response as ClientResponse  # noqa: E402
from bench_server import engine_events, loop_policy, read_chat  # noqa: E402
from bench_stream import TOOLS, make_output, models_dir  # noqa: E402

from chatsieve import load_tokenizer, parse  # noqa: E402
from chatsieve.server import client as engine_client  # noqa: E402
from chatsieve.server.tuning import freeze_startup_objects  # noqa: E402

KEY = "sk-bench-request-team-key-0123456789"


class ClientTransport:
    """The client's connection as uvicorn's protocol sees it: keeps what is written."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.closing = False
        self.done: asyncio.Future | None = None

    def write(self, data: bytes) -> None:
        self.data += data
        if self.data.endswith(b"\r\n0\r\n\r\n") and self.done is not None and not self.done.done():
            self.done.set_result(None)

    def writelines(self, parts) -> None:
        for p in parts:
            self.write(p)

    def get_extra_info(self, name: str, default=None):
        return {"peername": ("127.0.0.1", 40000), "sockname": ("127.0.0.1", 8000)}.get(name, default)

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def abort(self) -> None:
        self.closing = True

    def set_protocol(self, protocol) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0


async def run(args) -> None:
    import uvicorn

    from chatsieve.server import build_parser, config_from_args, uvicorn_options
    from chatsieve.server.app import create_app

    models = models_dir()
    tok = load_tokenizer(models / "qwen3")
    ids = make_output("qwen3", tok, 30)
    events = engine_events(ids, tok.decode)
    expected = parse(token_ids=ids, format="qwen3", tokenizer=tok, tools=TOOLS, thinking=True)
    engine_conns: list[engine_client._Connection] = []

    sent = asyncio.Event()

    class Sent(EngineTransport):
        def write(self, data: bytes) -> None:
            super().write(data)
            sent.set()

    async def connection(self, key):  # EngineHTTP._connection without a socket
        conn = engine_client._Connection()
        conn.connection_made(Sent())
        engine_conns.append(conn)
        return conn, False

    engine_client.EngineHTTP._connection = connection
    cli = build_parser().parse_args(["--model-dir", str(models / "qwen3"), "--format", "qwen3", "--backend",
                                     "http://127.0.0.1:9", "--api-key", KEY, "--response-store", ":memory:",
                                     "--log-level", "warning", *args.serve_arg])
    app = create_app(config_from_args(cli))
    options = uvicorn_options(cli)
    config = uvicorn.Config(app, **{k: v for k, v in options.items() if k != "http"}, lifespan="off")
    config.load()
    protocol_class = options["http"]
    service = app.state.service
    await service.start()
    freeze_startup_objects()  # as `chatsieve serve` does before it serves
    from uvicorn.server import ServerState

    state = ServerState()
    tools = [*agent_tools(19), *TOOLS]
    system = system_prompt(tok, args.size, 0)
    serial = iter(range(10**9))

    def request_bytes() -> bytes:
        k = next(serial)
        body = json.dumps({
            "model": "qwen3",
            "messages": [{"role": "system", "content": system},
                         {"role": "user", "content": f"Task {k}: fix the failing test in module_{k}.py and explain why."}],
            "tools": tools, "stream": True, "chat_template_kwargs": {"enable_thinking": True},
        }).encode()
        return (f"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1:8000\r\ncontent-type: application/json\r\n"
                f"authorization: Bearer {KEY}\r\naccept: text/event-stream\r\ncontent-length: {len(body)}\r\n\r\n"
                ).encode() + body

    split = {"intake": 0.0, "answer": 0.0, "threads": 0.0, "total": 0.0}

    async def one_batch(n: int) -> None:
        requests = [request_bytes() for _ in range(n)]  # (made before the clock starts)
        t0, p0 = time.thread_time(), time.process_time()
        transports, protocols = [], []
        for data in requests:
            t = ClientTransport()
            t.done = asyncio.get_running_loop().create_future()
            protocol = protocol_class(config=config, server_state=state, app_state={})
            protocol.connection_made(t)
            protocol.data_received(data)
            transports.append(t)
            protocols.append(protocol)
        while sum(1 for c in engine_conns if c.transport.sent) < n:  # (no spinning: its CPU would count)
            sent.clear()
            await sent.wait()
        t1 = time.thread_time()
        for conn in engine_conns:  # each engine request, once sent, gets its whole answer
            conn.data_received(HEAD + b"".join(events[:-1]) + events[-1] + END)
        await asyncio.gather(*(t.done for t in transports))
        for protocol in protocols:  # the client closes its connection
            protocol.connection_lost(None)
        t2, p2 = time.thread_time(), time.process_time()
        split["intake"] += t1 - t0
        split["answer"] += t2 - t1
        split["threads"] += (p2 - p0) - (t2 - t0)
        split["total"] += p2 - p0
        for t in transports:  # (checked after the clock stops)
            raw = bytes(t.data)
            r = ClientResponse(0.0, arrivals=[0.0], ends=[len(raw)], raw=bytearray(raw))
            msg, _ = read_chat(r)
            assert msg["content"] == expected.content and msg["reasoning"] == expected.reasoning, msg
        engine_conns.clear()

    for _ in range(20):  # warm up: the prompt cache, the pools
        await one_batch(1)
    profiles: list[cProfile.Profile] = []
    if args.profile:
        original = threading.Thread.run

        def profiled_run(self) -> None:
            p = cProfile.Profile(time.thread_time)
            profiles.append(p)
            p.enable()
            try:
                original(self)
            finally:
                p.disable()

        threading.Thread.run = profiled_run
        service.config  # noqa: B018
        # worker threads started from now on are profiled; make the pool start fresh ones
        from anyio import to_thread

        to_thread.current_default_thread_limiter()  # (the limiter stays; idle threads retire)
        main = cProfile.Profile(time.thread_time)
        profiles.append(main)
        main.enable()
    for k in split:
        split[k] = 0.0
    collections = [0, 0.0, 0.0]  # cyclic collections in the timed requests: count, seconds, the longest

    def on_gc(phase: str, info: dict) -> None:
        if phase == "start":
            on_gc.began = time.perf_counter()
        else:
            took = time.perf_counter() - on_gc.began
            collections[0] += 1
            collections[1] += took
            collections[2] = max(collections[2], took)

    gc.callbacks.append(on_gc)
    done = 0
    while done < args.requests:
        n = min(args.at_once, args.requests - done)
        await one_batch(n)
        done += n
    cpu = split["total"]
    gc.callbacks.remove(on_gc)
    if args.profile:
        main.disable()
        import pstats

        stats = pstats.Stats(main)
        for p in profiles[1:]:
            p.create_stats()
            if p.stats:
                stats.add(p)
        stats.dump_stats(args.profile)
    print(f"system prompt {args.size} tokens, {len(tools)} tools, {len(ids)}-token answers, {args.at_once} at a time: "
          f"{cpu * 1e3 / args.requests:.3f} ms CPU per request: on the event loop, until the engine request is "
          f"sent {split['intake'] * 1e3 / args.requests:.3f}, from the engine's answer to the end "
          f"{split['answer'] * 1e3 / args.requests:.3f}; other threads (the preparation) "
          f"{split['threads'] * 1e3 / args.requests:.3f}; cyclic garbage collection "
          f"{collections[1] * 1e3 / args.requests:.3f} ({collections[0]} collections, the longest "
          f"{collections[2] * 1e3:.1f} ms)")
    await service.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=int, default=2000, help="system prompt tokens (2000)")
    ap.add_argument("--requests", type=int, default=200, help="timed requests (200)")
    ap.add_argument("--at-once", type=int, default=1, help="requests in flight together (1)")
    ap.add_argument("--profile", metavar="FILE", default=None, help="cProfile stats of the timed requests")
    ap.add_argument("--serve-arg", action="append", default=[], help="extra argument for chatsieve serve")
    args = ap.parse_args()
    loop_policy()
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
