"""`chatsieve serve --workers N`: uvicorn's worker processes, each listening on a socket of its own.

With one listening socket shared by every worker, whichever worker wakes first takes every
connection that is waiting: a burst of 128 agents' connections went 89/39, 103/25 and 83/45 to two
workers, and the busier one set the burst's tail. Here each worker has its own socket on the same
port (SO_REUSEPORT), and the kernel spreads new connections over the sockets by their addresses,
so each worker gets about its share. Where the platform has no SO_REUSEPORT, or uvicorn's
supervisor is not the one this was written against, the workers share one socket as before.
"""

from __future__ import annotations

import logging
import socket
from typing import Any

log = logging.getLogger("chatsieve.server")


def reuse_port_sockets(host: str, port: int, n: int) -> list[socket.socket] | None:
    """`n` TCP sockets bound to (host, port) with SO_REUSEPORT, or None where that cannot be done
    (no SO_REUSEPORT; the address taken: the caller's usual path then reports it)."""
    if not hasattr(socket, "SO_REUSEPORT") or n < 2:
        return None
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    out: list[socket.socket] = []
    try:
        for _ in range(n):
            sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
            out.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.bind((host, port))
            sock.set_inheritable(True)
    except OSError:
        for sock in out:
            sock.close()
        return None
    return out


def supervisor(config: Any, sockets: list[socket.socket]) -> Any:
    """uvicorn's `Multiprocess` for `config`, worker i serving `sockets[i]` (one per worker); None
    when the installed uvicorn's supervisor lacks what this relies on."""
    try:
        from uvicorn.supervisors.multiprocess import Multiprocess, Process
    except ImportError:
        return None
    needed = ("init_processes", "keep_subprocess_alive", "restart_all", "handle_ttin", "handle_ttou")
    if not all(hasattr(Multiprocess, name) for name in needed) or not hasattr(Process, "wait_until_ready"):
        return None

    class Supervisor(Multiprocess):
        """Multiprocess whose worker i always serves `sockets[i]` (also when it is restarted), so
        no socket is ever left without a worker to accept its connections."""

        def _start(self, i: int) -> Any:
            process = Process(self.config, [self.sockets[i]])
            process.start()
            return process

        def init_processes(self) -> None:
            for i in range(self.processes_num):
                self.processes.append(self._start(i))

        def keep_subprocess_alive(self) -> None:
            if self.should_exit.is_set():
                return
            for i, process in enumerate(self.processes):
                if process.is_alive(timeout=self.config.timeout_worker_healthcheck):
                    continue
                process.kill()
                process.join()
                from uvicorn.config import STARTUP_FAILURE

                if process.exitcode == STARTUP_FAILURE:
                    log.error("worker process [%s] failed to start: stopping", process.pid)
                    self.should_exit.set()
                    return
                if self.should_exit.is_set():
                    return
                log.info("worker process [%s] died: starting another on its socket", process.pid)
                self.processes[i] = self._start(i)

        def restart_all(self) -> None:
            for i, old in enumerate(self.processes):
                if self.should_exit.is_set():
                    return
                new = self._start(i)  # on the same socket: both accept until the old one is gone
                if not new.wait_until_ready(self.config.timeout_worker_healthcheck, self.should_exit):
                    new.kill()
                    new.join()
                    if not self.should_exit.is_set():
                        log.error("new worker process [%s] was not ready in time: keeping [%s]", new.pid, old.pid)
                    return
                old.terminate()
                old.join()
                self.processes[i] = new

        def handle_ttin(self) -> None:
            log.warning("SIGTTIN ignored: each of the %d workers has a socket of its own; restart with "
                        "another --workers to change their number", self.processes_num)

        handle_ttou = handle_ttin

    return Supervisor(config, sockets)
