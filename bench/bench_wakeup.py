"""The floor under bench_server's paced figures: CPU per event of a bare uvloop relay (read one
socket, write another) woken 100 times a second, and of the same relay with one small JSON round
trip per event. On a machine shared with other work, a process woken every 10 ms runs with cold
caches; this says what that costs before any HTTP, SSE or parsing.

    python bench/bench_wakeup.py [--events 500] [--every-ms 10]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import time


def cpu_seconds() -> float:
    """CPU time of this process's threads (scheduler accounting, nanoseconds)."""
    total = 0
    for task in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{task}/schedstat") as f:
            total += int(f.read().split()[0])
    return total / 1e9


class Relay(asyncio.Protocol):
    def __init__(self, out: asyncio.Transport, done: asyncio.Future, work: bool) -> None:
        self.out, self.done, self.work = out, done, work

    def data_received(self, data: bytes) -> None:
        if self.work:
            data = json.dumps(json.loads(json.dumps({"text": data.decode()}))).encode()
        self.out.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.done.set_result(None)


def run(work: bool, events: int, every: float) -> float:
    src_in, src_out = socket.socketpair()
    dst_in, dst_out = socket.socketpair()
    pid = os.fork()
    if pid == 0:  # the paced sender, and the reader of what is relayed
        src_in.close()
        dst_out.close()
        dst_in.setblocking(False)
        for _ in range(events):
            src_out.send(b"x" * 300)
            time.sleep(every)
            try:
                dst_in.recv(1 << 16)
            except BlockingIOError:
                pass
        src_out.close()
        os._exit(0)
    src_out.close()
    dst_in.close()

    async def main() -> float:
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        out, _ = await loop.create_connection(asyncio.Protocol, sock=dst_out)
        await loop.create_connection(lambda: Relay(out, done, work), sock=src_in)
        t0 = cpu_seconds()
        await done
        return (cpu_seconds() - t0) / events

    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    per_event = asyncio.run(main())
    os.waitpid(pid, 0)
    return per_event


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=500)
    ap.add_argument("--every-ms", type=float, default=10.0)
    a = ap.parse_args()
    for work in (False, True):
        us = run(work, a.events, a.every_ms / 1000) * 1e6
        print(f"{'relay + one JSON round trip' if work else 'bare relay':28} {us:7.1f} µs CPU per event", flush=True)


if __name__ == "__main__":
    main()
