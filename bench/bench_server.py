"""`chatsieve serve` throughput against a stand-in engine on loopback.

A stand-in vLLM engine (its own process) streams a 2,000-token Qwen3 answer — reasoning,
content, then a tool call with a long string argument — one token per server-sent event,
stepping all its streams together like a batching engine. `chatsieve serve` (its own
process) sits in front; this process is the client, streaming at 1, 32 and 128
concurrent streams with `--workers` 1 and 2. For each run it prints tokens/s, the
server's CPU µs per token (user + system time of the server process tree), p50/p99 gap
between updates the client receives (inter-token latency), p50/p99 time to first token,
engine connections opened per request and TIME_WAIT sockets left towards the engine; the
same client straight against the stand-in is the ceiling. Each route is measured
(`--routes`: OpenAI chat completions, Anthropic Messages, OpenAI Responses). Every response is checked
against batch parsing of the same ids; a wrong one stops the benchmark.

    CHATSIEVE_MODELS=../shared/models python bench/bench_server.py [--quick] [--streams 1,32]

The server runs the chatsieve this process imported, so `bench/ab.py OTHER bench/bench_server.py`
compares two checkouts' servers; `--profile FILE` writes a one-worker server's cProfile stats.

Two floors run before the servers (`--no-floor` skips them): the bare relay (one uvloop process
copying bytes between client and engine, nothing parsed) and the parsing relay (the same, but each
vLLM event's JSON is read and a chat completions chunk of its text written, one Python function
per read and no state per stream: the least a Python server that parses pays; its client checks
the text). Figures are noisy on a shared machine: compare rows of one run, and note `uptime`.
`--repeat N` measures both floors and each server N times, one after the other, and prints the
medians and the medians of the N ratios (server ÷ relay: what issue 36's paced goal is read from;
server ÷ parsing relay; parsing relay ÷ relay).
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_stream import TOOLS, make_output, models_dir  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MODEL = "bench"


def loop_policy() -> None:
    try:
        import uvloop
    except ImportError:
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------- stand-in engine


def engine_events(ids: list[int], decode) -> list[bytes]:
    """The vLLM stream for `ids`, one id per event, each framed as one HTTP chunk."""
    out = []
    for i, t in enumerate(ids):
        last = i == len(ids) - 1
        choice = {
            "index": 0,
            "text": decode([t]),
            "token_ids": [t],
            "logprobs": None,
            "finish_reason": "stop" if last else None,
            "stop_reason": None,
        }
        event = {
            "id": "cmpl-bench",
            "object": "text_completion",
            "created": 0,
            "model": "x",
            "choices": [choice],
        }
        out.append(_chunk(f"data: {json.dumps(event, ensure_ascii=False)}\n\n".encode()))
    out.append(_chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
    return out


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


class EngineConnection(asyncio.Protocol):
    def __init__(self, engine: StandIn) -> None:
        self.engine = engine
        self.buf = b""
        self.transport: asyncio.Transport | None = None
        self.paused = False
        self.pos: int | None = None  # next event to send while a response is streaming

    def connection_made(self, transport) -> None:
        self.transport = transport
        self.engine.connections += 1

    def connection_lost(self, exc) -> None:
        self.engine.active.discard(self)
        self.transport = None

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while self.pos is None:
            head, sep, rest = self.buf.partition(b"\r\n\r\n")
            if not sep:
                return
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            if len(rest) < length:
                return
            self.buf = rest[length:]
            self.engine.requests += 1
            if head.startswith(b"GET /health"):  # as vLLM answers it: 200, empty body
                self.transport.write(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                continue
            if head.startswith(b"GET /stats"):
                body = json.dumps({"connections": self.engine.connections, "requests": self.engine.requests})
                self.transport.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
                    % (len(body), body.encode())
                )
                continue
            self.transport.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
            )
            self.pos = 0
            self.engine.active.add(self)


class StandIn:
    """Steps every active stream by one event, then yields: one decode step of a batch."""

    def __init__(self, events: list[bytes], step: float = 0.0) -> None:
        self.events = events
        self.step = step  # seconds per decode step; 0: as fast as the readers take it
        self.active: set[EngineConnection] = set()
        self.connections = 0
        self.requests = 0

    async def run(self, port: int) -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: EngineConnection(self), "127.0.0.1", port, backlog=4096)
        last = len(self.events) - 1
        next_step = loop.time()
        async with server:
            while True:
                if self.step:
                    next_step = max(next_step + self.step, loop.time())
                    await asyncio.sleep(next_step - loop.time())
                if not self.active:
                    await asyncio.sleep(0.001)
                    continue
                wrote = False
                for conn in list(self.active):
                    if conn.paused or conn.transport is None:
                        continue
                    wrote = True
                    conn.transport.write(self.events[conn.pos])
                    if conn.pos == last:
                        conn.pos = None
                        self.active.discard(conn)
                        if conn.buf:
                            conn.data_received(b"")
                    else:
                        conn.pos += 1
                await asyncio.sleep(0 if wrote else 0.0005)  # every client is behind: do not spin


def engine_main(port: int, ids_file: str, step_ms: float) -> None:
    from chatsieve import load_tokenizer

    tok = load_tokenizer(models_dir() / "qwen3")
    ids = json.loads(Path(ids_file).read_text())
    loop_policy()
    asyncio.run(StandIn(engine_events(ids, tok.decode), step_ms / 1000).run(port))


# ---------------------------------------------------------------- the floor: a bare relay


class RelayUp(asyncio.Protocol):
    """A client's connection to the bare relay: its bytes go to the engine unread, and back."""

    def __init__(self, engine_port: int, down: type[asyncio.Protocol]) -> None:
        self.engine_port = engine_port
        self.down_type = down
        self.down: asyncio.Transport | None = None  # towards the engine, once connected
        self.early: list[bytes] = []  # what the client sent before that

    def connection_made(self, transport) -> None:
        self.transport = transport
        asyncio.get_running_loop().create_task(self._connect())

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        self.down, _ = await loop.create_connection(lambda: self.down_type(self.transport), "127.0.0.1", self.engine_port)
        for data in self.early:
            self.down.write(data)
        self.early.clear()

    def data_received(self, data: bytes) -> None:
        if self.down is None:
            self.early.append(data)
        else:
            self.down.write(data)

    def connection_lost(self, exc) -> None:
        if self.down is not None:
            self.down.close()


class RelayDown(asyncio.Protocol):
    def __init__(self, up: asyncio.Transport) -> None:
        self.up = up

    def data_received(self, data: bytes) -> None:
        self.up.write(data)

    def connection_lost(self, exc) -> None:
        self.up.close()


class ParsingRelayDown(asyncio.Protocol):
    """The engine's side of the parsing relay: each vLLM event's JSON read, and its text written to
    the client as a chat completions chunk (the engine's head and the [DONE] go through as they are)."""

    HEAD = b'data: {"id":"chatcmpl-relay","object":"chat.completion.chunk","created":0,"model":"bench",' \
        b'"choices":[{"index":0,"delta":{"content":'
    TAIL = b'},"logprobs":null,"finish_reason":null}]}\n\n'

    def __init__(self, up: asyncio.Transport) -> None:
        import orjson

        self.up = up
        self.loads, self.dumps = orjson.loads, orjson.dumps
        self.head_done = False
        self.raw = b""  # engine bytes not yet de-chunked
        self.body = b""  # de-chunked bytes not yet a whole event

    def data_received(self, data: bytes) -> None:
        if not self.head_done:
            head, sep, rest = (self.raw + data).partition(b"\r\n\r\n")
            if not sep:
                self.raw += data
                return
            self.up.write(head + sep)
            self.head_done, self.raw, data = True, b"", rest
        # the usual read: one whole chunk of one whole event, with nothing held from before
        i = data.find(b"\r\n")
        if not self.raw and not self.body and data.endswith(b"\n\n\r\n") and data.count(b"\n\n") == 1:
            if data[i + 2 : i + 9] == b"data: {" and int(data[:i], 16) == len(data) - i - 4:
                text = self.loads(data[i + 8 : -4])["choices"][0]["text"]  # (inline: one frame per read)
                out = b"".join((self.HEAD, self.dumps(text), self.TAIL))
                self.up.write(b"%x\r\n%b\r\n" % (len(out), out))
                return
        self._slow(data)

    def _slow(self, data: bytes) -> None:
        raw, out, ended = self.raw + data, [], False
        while not ended:  # de-chunk what is whole
            i = raw.find(b"\r\n")
            if i < 0:
                break
            size = int(raw[:i], 16)
            if len(raw) < i + 4 + size:
                break
            self.body += raw[i + 2 : i + 2 + size]
            raw = raw[i + 4 + size :]
            ended = size == 0
        self.raw = raw
        *events, self.body = self.body.split(b"\n\n")
        for event in events:
            if event == b"data: [DONE]":
                out.append(b"data: [DONE]\n\n")
            elif event.startswith(b"data: {"):
                text = self.loads(event[6:])["choices"][0]["text"]
                out.append(b"".join((self.HEAD, self.dumps(text), self.TAIL)))
        for piece in out:
            self.up.write(_chunk(piece))
        if ended:  # the response is whole: the next on this connection begins with its head
            self.up.write(b"0\r\n\r\n")
            self.head_done, self.raw, self.body = False, b"", b""

    def connection_lost(self, exc) -> None:
        self.up.close()


def relay_main(port: int, engine_port: int, parsing: bool = False) -> None:
    """What any server in chatsieve's place pays before doing anything: every byte between the
    client and the engine copied through one uvloop process, nothing parsed. `parsing`: what a
    server that only parses pays, in Python (one function per read, no state kept per stream): each
    event's JSON read and a chat completions chunk of its text written (`ParsingRelayDown`)."""

    async def run() -> None:
        loop = asyncio.get_running_loop()
        down = ParsingRelayDown if parsing else RelayDown
        server = await loop.create_server(lambda: RelayUp(engine_port, down), "127.0.0.1", port, backlog=4096)
        async with server:
            await server.serve_forever()

    loop_policy()
    asyncio.run(run())


# ---------------------------------------------------------------- client


@dataclass
class Response:
    sent: float
    arrivals: list[float] = field(default_factory=list)
    ends: list[int] = field(default_factory=list)  # raw byte offset after each arrival
    raw: bytearray = field(default_factory=bytearray)
    done: asyncio.Future | None = None


class ClientConnection(asyncio.Protocol):
    def __init__(self) -> None:
        self.resp: Response | None = None
        self.closed = asyncio.get_running_loop().create_future()

    def connection_made(self, transport) -> None:
        self.transport = transport

    def connection_lost(self, exc) -> None:
        if self.resp is not None and not self.resp.done.done():
            self.resp.done.set_exception(ConnectionError(f"connection lost: {exc}"))
        if not self.closed.done():
            self.closed.set_result(None)

    def data_received(self, data: bytes) -> None:
        r = self.resp
        r.arrivals.append(time.perf_counter())
        r.raw += data
        r.ends.append(len(r.raw))
        if r.raw.endswith(b"\r\n0\r\n\r\n") and not r.done.done():
            r.done.set_result(None)

    async def request(self, head: bytes, body: bytes) -> Response:
        r = self.resp = Response(time.perf_counter(), done=asyncio.get_running_loop().create_future())
        self.transport.write(head + body)
        await r.done
        self.resp = None
        return r


def dechunk(r: Response) -> tuple[int, bytes, list[tuple[int, int]]]:
    """(status, body, [(body offset, raw offset) at each chunk start])."""
    raw = bytes(r.raw)
    head_end = raw.index(b"\r\n\r\n") + 4
    status = int(raw[9:12])
    pos, body, marks = head_end, bytearray(), []
    while True:
        line_end = raw.index(b"\r\n", pos)
        size = int(raw[pos:line_end], 16)
        if size == 0:
            return status, bytes(body), marks
        marks.append((len(body), line_end + 2))
        body += raw[line_end + 2 : line_end + 2 + size]
        pos = line_end + 4 + size


def arrival(r: Response, marks: list[tuple[int, int]], body_offset: int) -> float:
    i = bisect.bisect_right([m[0] for m in marks], body_offset) - 1
    raw_offset = marks[i][1] + body_offset - marks[i][0]
    return r.arrivals[bisect.bisect_left(r.ends, raw_offset + 1)]


def read_chat(r: Response) -> tuple[dict, list[float]]:
    """The streamed message and the arrival times of the events that carried output."""
    status, body, marks = dechunk(r)
    if status != 200:
        raise AssertionError(f"HTTP {status}: {body[:300]!r}")
    msg = {"reasoning": "", "content": "", "calls": {}, "finish": None, "done": False}
    times = []
    pos = 0
    for event in body.split(b"\n\n"):
        end = pos + len(event)
        pos = end + 2
        if not event.startswith(b"data: "):
            continue
        data = event[6:]
        if data == b"[DONE]":
            msg["done"] = True
            continue
        chunk = json.loads(data)
        assert "error" not in chunk, chunk
        for choice in chunk["choices"]:
            d = choice["delta"]
            got = False
            if d.get("reasoning_content"):
                msg["reasoning"] += d["reasoning_content"]
                got = True
            if d.get("content"):
                msg["content"] += d["content"]
                got = True
            for tc in d.get("tool_calls") or []:
                call = msg["calls"].setdefault(tc["index"], {"name": None, "arguments": ""})
                fn = tc.get("function") or {}
                if fn.get("name"):
                    call["name"] = fn["name"]
                if fn.get("arguments"):
                    call["arguments"] += fn["arguments"]
                    got = True
            if choice.get("finish_reason"):
                msg["finish"] = choice["finish_reason"]
            if got:
                times.append(arrival(r, marks, end - 1))
    return msg, times


def read_responses(r: Response) -> tuple[dict, list[float]]:
    """The streamed Responses output (as read_chat's dict) and the arrival times of its deltas."""
    status, body, marks = dechunk(r)
    if status != 200:
        raise AssertionError(f"HTTP {status}: {body[:300]!r}")
    msg = {"reasoning": "", "content": "", "calls": {}, "finish": None, "done": False}
    times, pos = [], 0
    for event in body.split(b"\n\n"):
        end = pos + len(event)
        pos = end + 2
        head, _, data = event.partition(b"\ndata: ")
        if not head.startswith(b"event: "):
            continue
        e = json.loads(data)
        kind = e["type"]
        assert kind == head[7:].decode() and kind not in ("error", "response.failed"), e
        if kind == "response.output_item.added" and e["item"]["type"] == "function_call":
            msg["calls"][e["output_index"]] = {"name": e["item"]["name"], "arguments": ""}
        elif kind.endswith(".delta"):
            if kind == "response.reasoning_text.delta":
                msg["reasoning"] += e["delta"]
            elif kind == "response.output_text.delta":
                msg["content"] += e["delta"]
            elif kind == "response.function_call_arguments.delta":
                msg["calls"][e["output_index"]]["arguments"] += e["delta"]
            times.append(arrival(r, marks, end - 1))
        elif kind == "response.completed":
            msg["done"] = True
            msg["finish"] = "tool_calls" if msg["calls"] else "stop"
    return msg, times


def read_messages(r: Response) -> tuple[dict, list[float]]:
    """The streamed Anthropic message (as read_chat's dict) and the arrival times of its deltas."""
    status, body, marks = dechunk(r)
    if status != 200:
        raise AssertionError(f"HTTP {status}: {body[:300]!r}")
    msg = {"reasoning": "", "content": "", "calls": {}, "finish": None, "done": False}
    times, pos, kinds = [], 0, {}
    for event in body.split(b"\n\n"):
        end = pos + len(event)
        pos = end + 2
        head, _, data = event.partition(b"\ndata: ")
        if not head.startswith(b"event: "):
            continue
        e = json.loads(data)
        assert e["type"] == head[7:].decode() and e["type"] != "error", e
        if e["type"] == "content_block_start":
            block = e["content_block"]
            kinds[e["index"]] = block["type"]
            if block["type"] == "tool_use":
                msg["calls"][e["index"]] = {"name": block["name"], "arguments": ""}
        elif e["type"] == "content_block_delta":
            d = e["delta"]
            if d["type"] == "thinking_delta":
                msg["reasoning"] += d["thinking"]
            elif d["type"] == "text_delta":
                msg["content"] += d["text"]
            elif d["type"] == "input_json_delta":
                msg["calls"][e["index"]]["arguments"] += d["partial_json"]
            else:
                continue
            times.append(arrival(r, marks, end - 1))
        elif e["type"] == "message_delta":
            msg["finish"] = e["delta"]["stop_reason"]
        elif e["type"] == "message_stop":
            msg["done"] = True
    return msg, times


def read_engine(r: Response) -> tuple[list[int], list[float]]:
    status, body, marks = dechunk(r)
    if status != 200:
        raise AssertionError(f"HTTP {status}: {body[:300]!r}")
    ids, times, pos = [], [], 0
    for event in body.split(b"\n\n"):
        end = pos + len(event)
        pos = end + 2
        if event.startswith(b"data: {"):
            ids += json.loads(event[6:])["choices"][0]["token_ids"]
            times.append(arrival(r, marks, end - 1))
    return ids, times


async def load(
    port: int, path: str, body: bytes, streams: int, requests: int
) -> tuple[list[Response], float]:
    loop = asyncio.get_running_loop()
    head = (
        f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\ncontent-type: application/json\r\n"
        f"accept: text/event-stream\r\ncontent-length: {len(body)}\r\n\r\n"
    ).encode()
    todo = list(range(requests))
    out: list[Response] = []

    async def worker() -> None:
        _, conn = await loop.create_connection(ClientConnection, "127.0.0.1", port)
        try:
            while todo:
                todo.pop()
                out.append(await conn.request(head, body))
        finally:
            conn.transport.close()

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(streams)))
    return out, time.perf_counter() - t0


# ---------------------------------------------------------------- measuring


def tree_cpu(pid: int) -> float:
    """CPU seconds of `pid` and its live descendants, every thread: the scheduler's nanosecond
    accounting (/proc/PID/task/TID/schedstat), not the 10 ms ticks of /proc/PID/stat."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry))
    total, stack = 0, [pid]
    while stack:
        p = stack.pop()
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                total += int(Path(f"/proc/{p}/task/{task}/schedstat").read_text().split()[0])
        except OSError:
            continue
        stack += children.get(p, [])
    return total / 1e9


def time_wait(port: int) -> int:
    """Sockets in TIME_WAIT whose remote end is 127.0.0.1:`port`."""
    n = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        f = line.split()
        if f[3] == "06" and int(f[2].split(":")[1], 16) == port:
            n += 1
    return n


def engine_stats(port: int) -> dict:
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(b"GET /stats HTTP/1.1\r\nhost: x\r\n\r\n")
        data = b""
        while b"}" not in data:
            data += s.recv(4096)
    return json.loads(data.split(b"\r\n\r\n", 1)[1])


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


@dataclass
class Row:
    target: str
    workers: int | str
    streams: int
    tokens_per_s: float
    cpu_us: float | None
    itl_p50: float
    itl_p99: float
    ttft_p50: float
    ttft_p99: float
    conns_per_req: float
    time_wait: int


def measure(
    target, workers, streams, requests, port, path, body, check, cpu_pid, engine_port, n_tokens
) -> Row:
    before_stats = engine_stats(engine_port)
    waiting = time_wait(engine_port)
    cpu0 = tree_cpu(cpu_pid) if cpu_pid else 0.0
    responses, wall = asyncio.run(load(port, path, body, streams, requests))
    cpu = tree_cpu(cpu_pid) - cpu0 if cpu_pid else None
    after_stats = engine_stats(engine_port)
    itl, ttft = [], []
    for r in responses:
        times = check(r)
        ttft.append(times[0] - r.sent)
        itl += [b - a for a, b in zip(times, times[1:]) if b > a]
    tokens = n_tokens * len(responses)
    new_conns = after_stats["connections"] - before_stats["connections"] - 1  # minus this stats call
    return Row(
        target,
        workers,
        streams,
        tokens / wall,
        cpu * 1e6 / tokens if cpu is not None else None,
        pct(itl, 0.5) * 1e3,
        pct(itl, 0.99) * 1e3,
        pct(ttft, 0.5) * 1e3,
        pct(ttft, 0.99) * 1e3,
        new_conns / len(responses),
        time_wait(engine_port) - waiting,
    )


def print_rows(rows: list[Row], header: bool = True) -> None:
    if header:
        print(
            "| target | workers | streams | tokens/s | server CPU µs/token | inter-token p50 / p99 ms "
            "| TTFT p50 / p99 ms | engine conns/request | new TIME_WAIT to engine |"
        )
        print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        cpu = f"{r.cpu_us:.1f}" if r.cpu_us is not None else "—"
        print(
            f"| {r.target} | {r.workers} | {r.streams} | {r.tokens_per_s:,.0f} | {cpu} "
            f"| {r.itl_p50:.2f} / {r.itl_p99:.2f} | {r.ttft_p50:.1f} / {r.ttft_p99:.1f} "
            f"| {r.conns_per_req:.2f} | {r.time_wait} |",
            flush=True,
        )


def print_ratios(pairs: dict[tuple[str, int, int], list[tuple[float, float, float]]]) -> None:
    """Per server, worker count and stream count: the median CPU µs/token of the bare relay, the
    parsing relay and the server over the repetitions, and the medians of each repetition's ratios
    (all measured in that repetition: the relays first, then each route in turn)."""

    def ratio(values: list[float]) -> str:
        values = sorted(values)
        return f"{statistics.median(values):.2f} ({values[0]:.2f}–{values[-1]:.2f})"

    print("\n| target | workers | streams | repetitions | µs/token (medians): relay / parsing relay / server "
          "| server ÷ relay: median (range) | server ÷ parsing relay | parsing relay ÷ relay |")
    print("|---|---|---|---|---|---|---|---|")
    for (target, w, n), got in pairs.items():
        medians = " / ".join(f"{statistics.median(g[i] for g in got):.1f}" for i in range(3))
        print(f"| {target} | {w} | {n} | {len(got)} | {medians} | {ratio([s / f for f, _, s in got])} "
              f"| {ratio([s / p for _, p, s in got])} | {ratio([p / f for f, p, _ in got])} |")


def wait_up(port: int, proc: subprocess.Popen, path: str = "/health") -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"bench: process on port {port} exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                s.sendall(f"GET {path} HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\n\r\n".encode())
                if s.recv(64).startswith(b"HTTP/1.1 200"):
                    return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"bench: nothing answered on port {port}")


# The server under cProfile, timed by CPU (thread) time: wall time would count the waits between
# events and the minutes other processes held the cores. Written on SIGINT (see `stop`).
_PROFILED = """
import cProfile, sys, time
from chatsieve.cli import main
out = sys.argv[1]
sys.argv = ["chatsieve", *sys.argv[2:]]
prof = cProfile.Profile(time.thread_time)
try:
    prof.runcall(main)
except (KeyboardInterrupt, SystemExit):
    pass
finally:
    prof.dump_stats(out)
"""


def stop(proc: subprocess.Popen, interrupt: bool = False) -> None:
    """End `proc`: SIGTERM, or SIGINT (`interrupt`), after which a cProfile'd server writes its stats
    (uvicorn re-raises SIGTERM once it has shut down, which kills it before)."""
    if interrupt:
        proc.send_signal(signal.SIGINT)
    else:
        proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=2000, help="tokens per answer (2000)")
    ap.add_argument("--streams", default="1,32,128", help="concurrent streams, comma-separated")
    ap.add_argument("--workers", default="1,2", help="chatsieve serve --workers values, comma-separated")
    ap.add_argument("--requests", type=int, default=8, help="requests per run: max(this, streams)")
    ap.add_argument(
        "--step-ms",
        type=float,
        default=0.0,
        help="the engine's decode step: one token per stream every this many ms (0: flat out, which "
        "measures capacity; e.g. 10 measures latency at 100 tokens/s per stream)",
    )
    ap.add_argument("--quick", action="store_true", help="500-token answers, streams 1 and 32")
    ap.add_argument("--no-ceiling", action="store_true", help="skip the direct-to-engine runs")
    ap.add_argument(
        "--no-floor",
        action="store_true",
        help="skip the floors' runs: the bare relay (a uvloop process copying bytes between client and "
        "engine: the CPU any server in chatsieve's place pays before parsing anything) and the parsing relay",
    )
    ap.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="measure the floors and the server this many times, one after the other, with each "
        "process started once, and print the median of each and of their ratios (the ratio of one run "
        "moves with the machine's load; the medians of alternated runs move less)",
    )
    ap.add_argument("--serve-arg", action="append", default=[], help="extra argument for chatsieve serve")
    ap.add_argument(
        "--profile",
        metavar="FILE",
        default=None,
        help="run the (one-worker) server under cProfile and write its stats to FILE (figures are then "
        "slower; for where the time goes, not for how much)",
    )
    ap.add_argument(
        "--routes",
        default="chat,messages,responses",
        help="routes to measure: chat (completions), messages (Anthropic), responses (OpenAI Responses)",
    )
    args = ap.parse_args()
    if args.quick:
        args.tokens, args.streams = 500, "1,32"
    streams = [int(s) for s in args.streams.split(",")]
    workers = [int(w) for w in args.workers.split(",")]

    from chatsieve import load_tokenizer, parse

    models = models_dir()
    tok = load_tokenizer(models / "qwen3")
    ids = make_output("qwen3", tok, args.tokens)
    expected = parse(token_ids=ids, format="qwen3", tokenizer=tok, tools=TOOLS, thinking=True)
    assert len(expected.tool_calls) == 1 and expected.reasoning and expected.content, expected.diagnostics
    ids_file = Path(f"/tmp/chatsieve-bench-{os.getpid()}.json")
    ids_file.write_text(json.dumps(ids))

    print(
        f"# {time.strftime('%Y-%m-%d %H:%M:%S')}; load average {os.getloadavg()[0]:.2f}; {os.cpu_count()} cores"
    )
    pace = f"one step every {args.step_ms:g} ms" if args.step_ms else "flat out"
    print(
        f"# {args.tokens}-token answers (reasoning, content, one call), one token per engine event, {pace}\n"
    )
    loop_policy()
    # the server runs the chatsieve this process imported (bench/ab.py points it at another checkout)
    code = Path(sys.modules["chatsieve"].__file__).resolve().parents[1]
    print(f"# chatsieve from {code}\n")
    env = {**os.environ, "PYTHONPATH": str(code), "CHATSIEVE_MODELS": str(models)}
    engine_port = free_port()
    engine = subprocess.Popen(
        [sys.executable, __file__, "--engine", str(engine_port), str(ids_file), str(args.step_ms)],
        env=env,
        cwd=ROOT,
    )
    rows: list[Row] = []
    # (target, workers, streams) -> (the bare relay's, the parsing relay's, the server's) CPU µs/token,
    # one per repetition
    pairs: dict[tuple[str, int, int], list[tuple[float, float, float]]] = {}
    relay = parsing = None
    texts = "".join(tok.decode([t]) for t in ids)  # what the parsing relay's client reads
    try:
        wait_up(engine_port, engine, "/stats")

        def check_engine(r: Response) -> list[float]:
            got, times = read_engine(r)
            assert got == ids, "the stand-in engine sent the wrong ids"
            return times

        def checker(read, finish):
            def check(r: Response) -> list[float]:
                msg, times = read(r)
                assert msg["done"], "the stream did not end ([DONE] / message_stop)"
                assert msg["reasoning"] == (expected.reasoning or ""), "reasoning differs from batch parsing"
                assert msg["content"] == (expected.content or ""), "content differs from batch parsing"
                calls = [msg["calls"][k] for k in sorted(msg["calls"])]
                want = [{"name": c.name, "arguments": c.arguments} for c in expected.tool_calls]
                assert calls == want, "tool calls differ from batch parsing"
                assert msg["finish"] == finish, msg["finish"]
                return times

            return check

        engine_body = json.dumps({"prompt": [1, 2, 3], "stream": True}).encode()
        def each_stream_count(target, workers, port, path, body, check, cpu_pid) -> list[Row]:
            """One row per stream count, appended to `rows` (and printed); the new rows."""
            for n in streams:
                rows.append(
                    measure(target, workers, n, max(args.requests, n), port, path, body, check, cpu_pid,
                            engine_port, len(ids))
                )
                print_rows(rows[-1:], header=len(rows) == 1)
            return rows[-len(streams):]

        if not args.no_ceiling:
            each_stream_count("engine direct", "—", engine_port, "/v1/completions", engine_body, check_engine, None)
        if not args.no_floor:
            relay_port = free_port()
            relay = subprocess.Popen([sys.executable, __file__, "--relay", str(relay_port), str(engine_port)],
                                     env=env, cwd=ROOT)
            wait_up(relay_port, relay, "/stats")
            asyncio.run(load(relay_port, "/v1/completions", engine_body, 1, 1))
            parsing_port = free_port()
            parsing = subprocess.Popen(
                [sys.executable, __file__, "--parsing-relay", str(parsing_port), str(engine_port)], env=env, cwd=ROOT
            )
            wait_up(parsing_port, parsing, "/stats")
            asyncio.run(load(parsing_port, "/v1/completions", engine_body, 1, 1))

        def check_parsing(r: Response) -> list[float]:
            msg, times = read_chat(r)
            assert msg["done"] and msg["content"] == texts, "the parsing relay lost or changed text"
            return times

        def floor() -> list[tuple[Row, Row]]:
            """The bare relay's and the parsing relay's rows, a pair per stream count."""
            if relay is None:
                return []
            bare = each_stream_count("bare relay (floor)", "—", relay_port, "/v1/completions", engine_body,
                                     check_engine, relay.pid)
            parsed = each_stream_count("parsing relay (floor)", "—", parsing_port, "/v1/completions", engine_body,
                                       check_parsing, parsing.pid)
            return list(zip(bare, parsed, strict=True))

        if args.repeat == 1:
            floor()
        chat_body = json.dumps(
            {
                "model": MODEL,
                "messages": [{"role": "user", "content": "Write the notes file."}],
                "tools": TOOLS,
                "stream": True,
                "chat_template_kwargs": {"enable_thinking": True},
            }
        ).encode()
        messages_body = json.dumps(
            {
                "model": MODEL,
                "max_tokens": args.tokens + 1000,
                "messages": [{"role": "user", "content": "Write the notes file."}],
                "tools": [
                    {"name": t["function"]["name"], "input_schema": t["function"]["parameters"]} for t in TOOLS
                ],
                "stream": True,
                "thinking": {"type": "enabled", "budget_tokens": args.tokens},
            }
        ).encode()
        responses_body = json.dumps(
            {
                "model": MODEL,
                "input": "Write the notes file.",
                "tools": [{"type": "function", **t["function"]} for t in TOOLS],
                "stream": True,
                "store": False,  # as Codex sends it: no database write per request
                "reasoning": {"effort": "high"},  # thinking on, as the other bodies ask
            }
        ).encode()
        routes = {
            "chat": ("chatsieve serve", "/v1/chat/completions", chat_body, checker(read_chat, "tool_calls")),
            "messages": ("serve /v1/messages", "/v1/messages", messages_body, checker(read_messages, "tool_use")),
            "responses": ("serve /v1/responses", "/v1/responses", responses_body, checker(read_responses, "tool_calls")),
        }
        routes = {k: routes[k] for k in args.routes.split(",")}
        for w in workers:
            port = free_port()
            profile = args.profile if w == 1 else None
            cmd = [
                sys.executable,
                *(["-c", _PROFILED, profile] if profile else ["-m", "chatsieve.cli"]),
                "serve",
                "--model-dir",
                str(models / "qwen3"),
                "--format",
                "qwen3",
                "--backend",
                f"http://127.0.0.1:{engine_port}",
                "--port",
                str(port),
                "--served-model-name",
                MODEL,
                "--log-level",
                "warning",
                *args.serve_arg,
            ]
            if w != 1:
                cmd += ["--workers", str(w)]
            server = subprocess.Popen(cmd, env=env, cwd=code)
            try:
                wait_up(port, server)
                for _target, path, body, _check in routes.values():
                    # one request to warm up each worker's connection pool and caches
                    asyncio.run(load(port, path, body, w, w))
                for _ in range(args.repeat):
                    below = floor() if args.repeat > 1 else []
                    for target, path, body, check in routes.values():
                        got = each_stream_count(target, w, port, path, body, check, server.pid)
                        if below:  # (none with one repetition, or without the relay)
                            for (f, p), r in zip(below, got, strict=True):
                                pairs.setdefault((target, w, r.streams), []).append((f.cpu_us, p.cpu_us, r.cpu_us))
            finally:
                stop(server, interrupt=bool(profile))
    finally:
        for floor_process in (relay, parsing):
            if floor_process is not None:
                stop(floor_process)
        stop(engine)
        ids_file.unlink(missing_ok=True)
    print(f"\n# load average after: {os.getloadavg()[0]:.2f}\n")
    print_rows(rows)
    if pairs:
        print_ratios(pairs)


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--engine":
        engine_main(int(sys.argv[2]), sys.argv[3], float(sys.argv[4]))
    elif len(sys.argv) == 4 and sys.argv[1] in ("--relay", "--parsing-relay"):
        relay_main(int(sys.argv[2]), int(sys.argv[3]), parsing=sys.argv[1] == "--parsing-relay")
    else:
        main()
