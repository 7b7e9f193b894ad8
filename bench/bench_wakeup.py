"""The floor under bench_server's paced figures: CPU per event of a bare uvloop relay (read one
TCP connection, write another) fed one event per stream every 10 ms, and of the same relay with one
small JSON round trip per event (stdlib json, and orjson). On a machine shared with other work, a
process woken every 10 ms runs with cold caches; this says what that costs before any HTTP, SSE
or parsing. With `--streams N`, N relays are fed together each step, as a batching engine feeds
N streams (bench_server's 128-stream rows).

    python bench/bench_wakeup.py [--events 500] [--every-ms 10] [--streams 1,128]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import selectors
import socket
import time

import orjson

EVENT = b"data: " + json.dumps({"choices": [{"index": 0, "text": " word", "token_ids": [1234]}]}).encode() + b"\n\n"


def cpu_seconds() -> float:
    """CPU time of this process's threads (scheduler accounting, nanoseconds)."""
    total = 0
    for task in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{task}/schedstat") as f:
            total += int(f.read().split()[0])
    return total / 1e9


def _stdlib(data: bytes) -> bytes:
    """Each event in `data` (a read may hold more than one) decoded and encoded again."""
    return b"".join(json.dumps(json.loads(e[6:])).encode() for e in data.split(b"\n\n") if e)


def _orjson(data: bytes) -> bytes:
    return b"".join(orjson.dumps(orjson.loads(e[6:])) for e in data.split(b"\n\n") if e)


WORK = {"bare relay": None, "relay + stdlib json round trip": _stdlib, "relay + orjson round trip": _orjson}


class Relay(asyncio.Protocol):
    def __init__(self, out: asyncio.Transport, done: asyncio.Future, work) -> None:
        self.out, self.done, self.work = out, done, work

    def data_received(self, data: bytes) -> None:
        work = self.work
        self.out.write(work(data) if work is not None else data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.out.close()
        if not self.done.done():
            self.done.set_result(None)


def _pairs(n: int) -> list[tuple[socket.socket, socket.socket]]:
    """n connected TCP pairs on loopback (Nagle off, as servers set it)."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.listen(n)
        out = []
        for _ in range(n):
            a = socket.create_connection(listener.getsockname())
            b, _ = listener.accept()
            for s in (a, b):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            out.append((a, b))
    return out


def _read_all(readers: list[socket.socket]) -> None:
    """Read every connection as a client does: woken by each arrival (epoll), until all end."""
    sel = selectors.DefaultSelector()
    for r in readers:
        sel.register(r, selectors.EVENT_READ)
    while sel.get_map():
        for key, _ in sel.select():
            if not key.fileobj.recv(1 << 16):
                sel.unregister(key.fileobj)


def run(work, events: int, every: float, streams: int) -> float:
    src = _pairs(streams)  # sender -> relay
    dst = _pairs(streams)  # relay -> reader
    children = []
    for role in ("send", "read"):
        pid = os.fork()
        if pid == 0:  # the paced sender, or the reader of what is relayed (each keeps only its ends)
            mine = [a for a, _ in src] if role == "send" else [b for _, b in dst]
            for sock in (x for pair in (*src, *dst) for x in pair):
                if sock not in mine:
                    sock.close()
            if role == "send":
                for _ in range(events):
                    for sender, _ in src:
                        sender.send(EVENT)
                    time.sleep(every)
                for sender, _ in src:
                    sender.close()
            else:
                _read_all([reader for _, reader in dst])
            os._exit(0)
        children.append(pid)
    for sender, _ in src:
        sender.close()
    for _, reader in dst:
        reader.close()

    async def main() -> float:
        loop = asyncio.get_running_loop()
        dones = []
        for (_, relay_in), (relay_out, _) in zip(src, dst):
            done = loop.create_future()
            out, _ = await loop.create_connection(asyncio.Protocol, sock=relay_out)
            await loop.create_connection(lambda out=out, done=done: Relay(out, done, work), sock=relay_in)
            dones.append(done)
        t0 = cpu_seconds()
        await asyncio.gather(*dones)
        return (cpu_seconds() - t0) / (events * streams)

    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    per_event = asyncio.run(main())
    for pid in children:
        os.waitpid(pid, 0)
    return per_event


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=500, help="events per stream")
    ap.add_argument("--every-ms", type=float, default=10.0)
    ap.add_argument("--streams", default="1", help="concurrent streams, comma-separated")
    a = ap.parse_args()
    for n in (int(s) for s in a.streams.split(",")):
        for name, work in WORK.items():
            us = run(work, a.events, a.every_ms / 1000, n) * 1e6
            print(f"{n:4} stream(s)  {name:31} {us:7.1f} µs CPU per event", flush=True)


if __name__ == "__main__":
    main()
