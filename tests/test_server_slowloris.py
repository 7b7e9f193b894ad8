"""Slow and idle clients cannot exhaust `chatsieve serve` (issue 10, finding 8): a few hundred
half-open connections on loopback, short timeouts, the server's own uvicorn options."""

from __future__ import annotations

import contextlib
import socket
import time

import httpx
import pytest
from fake_engines import ServerThread
from hypothesis import given, settings
from hypothesis import strategies as st
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


# ---------------------------------------------------------------- the head's reader searches the head only


def _unbounded_strict_connection(max_head: int):
    """The strict reader as it was before it searched only the first max_head + 3 bytes for the
    head's end: the whole buffer, the body that came with the head included."""
    import h11
    from h11._readers import maybe_read_from_IDLE_client

    from chatsieve.server.security import _LEADING_BLANK_LINES, request_head_problem

    def read_head(buf):
        raw = bytes(buf)
        start = _LEADING_BLANK_LINES.match(raw).end()
        ends = [i for i in (raw.find(b"\n\r\n", start), raw.find(b"\n\n", start)) if i >= 0]
        if ends:
            end = min(ends)
            head = raw[: end + (3 if raw[end:end + 3] == b"\n\r\n" else 2)]
            problem = request_head_problem(head, max_head)
            if problem is not None:
                raise h11.LocalProtocolError(problem)
        elif len(raw) > max_head:
            raise h11.LocalProtocolError(f"request head over {max_head} bytes")
        return maybe_read_from_IDLE_client(buf)

    class Unbounded(h11.Connection):
        def _get_io_object(self, role, event, io_dict):
            reader = super()._get_io_object(role, event, io_dict)
            return read_head if reader is maybe_read_from_IDLE_client else reader

    return Unbounded(h11.SERVER, max_incomplete_event_size=max_head)


def _outcome(conn, pieces: list[bytes]) -> list:
    """What the connection makes of `pieces` received one after another: its events (or NEED_DATA)
    after each, up to the first error (its type and message)."""
    import h11

    out = []
    try:
        for piece in pieces:
            conn.receive_data(piece)
            while True:
                event = conn.next_event()
                out.append(repr(event))
                if event is h11.NEED_DATA or event is h11.PAUSED or type(event) is h11.EndOfMessage:
                    break
    except h11.ProtocolError as e:
        out.append((type(e).__name__, str(e)))
    return out


_line_end = st.sampled_from([b"\r\n", b"\r\n", b"\r\n", b"\n"])
_filler = st.binary(max_size=60).map(lambda b: b.replace(b"\r", b"r").replace(b"\n", b"n").replace(b":", b";"))


@st.composite
def _requests(draw):
    blank = draw(st.sampled_from([b"", b"\r\n", b"\n", b"\r\n\n\r\n"]))
    line = draw(st.sampled_from([b"POST /v1/chat/completions HTTP/1.1", b"GET /health HTTP/1.0",
                                 b"GET /v1%2fmodels HTTP/1.1", b"GET /x HTTP/9.9"]))
    headers = [b"Host: " + draw(st.sampled_from([b"127.0.0.1", b"[::1]:80x", b"llm.example"]))]
    headers += [b"X-Pad-%d: %s" % (k, draw(_filler)) for k in range(draw(st.integers(0, 4)))]
    body = draw(st.binary(max_size=200) | st.sampled_from([b"\n\n" * 40, b"\n\r\n" * 30, b"{}\n\n"]))
    headers.append(b"Content-Length: %d" % len(body))
    head = line + draw(_line_end) + b"".join(h + draw(_line_end) for h in headers) + draw(_line_end)
    raw = blank + head + body
    cuts = sorted(draw(st.lists(st.integers(0, len(raw)), max_size=3)))
    return [raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)]) if b > a]


@settings(max_examples=400, deadline=None)
@given(pieces=_requests(), max_head=st.integers(16, 400))
def test_the_head_reader_reads_as_when_it_searched_the_whole_buffer(pieces, max_head):
    from chatsieve.server.security import _strict_connection

    assert _outcome(_strict_connection(max_head), pieces) == _outcome(_unbounded_strict_connection(max_head), pieces)


def test_the_head_reader_does_not_search_the_body():
    """A body that came with its head is not searched for the head's end (searching it cost more
    than h11's whole parse of a 30 KB agent request): no search reaches past the head's bound, and
    the search for a bare-LF end stops where the CRLF one is."""
    from chatsieve.server.security import _strict_connection

    windows: dict[bytes, list[int]] = {}

    class Watched(bytes):
        def find(self, sub, start=0, end=None):
            end = len(self) if end is None else min(end, len(self))
            windows.setdefault(bytes(sub), []).append(end - start)
            return super().find(sub, start, end)

    class Buffer:  # what `bytes(buf)` makes of h11's buffer, with its searches recorded
        def __init__(self, data):
            self.data = data

        def __bytes__(self):
            return Watched(self.data)

    conn = _strict_connection(1024)
    head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100000\r\n\r\n"
    with contextlib.suppress(Exception):  # (the stand-in buffer is not h11's: only the searches matter)
        conn._read_head(Buffer(head + b"x" * 100_000))
    assert windows and max(max(w) for w in windows.values()) <= 1024 + 3
    assert max(windows[b"\n\n"]) <= len(head)


def test_a_strict_connection_is_freed_when_let_go_of():
    """No reference cycle through the head reader: a connection goes when its protocol lets go of it,
    not at the cyclic collector's next pass (which would walk every connection left so)."""
    import gc
    import weakref

    import h11

    from chatsieve.server.security import _strict_connection

    conn = _strict_connection(16 * 1024)  # one request answered, then idle (kept alive) as uvicorn leaves it
    conn.receive_data(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    assert type(conn.next_event()) is h11.Request and type(conn.next_event()) is h11.EndOfMessage
    conn.send(h11.Response(status_code=200, headers=[(b"content-length", b"0")]))
    conn.send(h11.EndOfMessage())
    conn.start_next_cycle()
    assert conn.next_event() is h11.NEED_DATA
    gone = weakref.ref(conn)
    enabled = gc.isenabled()
    gc.disable()
    try:
        del conn
        assert gone() is None
    finally:
        if enabled:
            gc.enable()
