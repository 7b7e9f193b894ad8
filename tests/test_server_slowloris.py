"""Slow and idle clients cannot exhaust `chatsieve serve` (issue 10, finding 8): a few hundred
half-open connections on loopback, short timeouts, the server's own uvicorn options."""

from __future__ import annotations

import contextlib
import socket
import time

import httpx
import pytest
from fake_engines import ServerThread
from models import model_path

import chatsieve
from chatsieve.server import build_parser, connection_headroom, uvicorn_options
from chatsieve.server.app import create_app
from chatsieve.server.config import ServerConfig

LIMIT = 20
ATTACKERS = 200


@contextlib.contextmanager
def serve(extra_args: list[str]):
    args = build_parser().parse_args(
        ["--model-dir", "m", "--format", "qwen3", "--backend", "http://127.0.0.1:9", *extra_args]
    )
    cfg = ServerConfig(model_dir=model_path("qwen3"), format="qwen3", backend_url="http://127.0.0.1:9",
                       served_model_name="m", warm_up=False)
    app = create_app(cfg, tokenizer=chatsieve.load_tokenizer(model_path("qwen3")))
    with ServerThread(app, **uvicorn_options(args)) as server:
        yield server.server, server.port


def half_open(port: int, n: int) -> list[socket.socket]:
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        try:
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: 1")
        except OSError:
            pass  # already closed by the server: that is the point
        socks.append(s)
    return socks


def closed_by_server(s: socket.socket, timeout: float) -> bool:
    """Whether the server closes `s` within `timeout` seconds (reading whatever it still sends)."""
    deadline = time.monotonic() + timeout
    try:
        while True:
            s.settimeout(max(deadline - time.monotonic(), 0.01))
            if s.recv(4096) == b"":
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


def test_half_open_connections_are_bounded_and_timed_out():
    with serve(["--limit-concurrency", str(LIMIT), "--timeout-header", "1"]) as (server, port):
        socks = half_open(port, ATTACKERS)
        try:
            time.sleep(0.3)
            # the server never holds more than the limit plus its headroom, whatever is thrown at it
            assert len(server.server_state.connections) <= LIMIT + connection_headroom(LIMIT)
            # every half-open connection is closed: at once past the cap, after 1 s otherwise
            assert all(closed_by_server(s, 5) for s in socks)
            assert len(server.server_state.connections) <= 1
            assert httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200
        finally:
            for s in socks:
                s.close()


def test_slow_second_request_and_idle_keep_alive_are_closed():
    with serve(["--timeout-header", "1", "--timeout-keep-alive", "1"]) as (server, port):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert s.recv(4096).startswith(b"HTTP/1.1 200")
        assert closed_by_server(s, 5)  # idle after its response: the keep-alive timeout
        s.close()
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert s.recv(4096).startswith(b"HTTP/1.1 200")
        s.sendall(b"GET /health HTTP/1.1\r\n")  # the next request's head, never finished
        start = time.monotonic()
        assert closed_by_server(s, 5) and time.monotonic() - start < 4
        s.close()


def test_oversized_request_head_is_refused():
    with serve(["--max-header-bytes", "4096"]) as (server, port):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        for _ in range(4):  # a head that keeps growing and never ends
            time.sleep(0.05)
            with contextlib.suppress(OSError):
                s.sendall(b"X-Pad: " + b"a" * 2000 + b"\r\n")
        s.settimeout(5)
        assert s.recv(4096).startswith(b"HTTP/1.1 400")
        s.close()
        assert httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200


@pytest.mark.parametrize("limit", [1, 8, 512])
def test_headroom_is_positive(limit):
    assert connection_headroom(limit) >= 16
