"""Streamed bodies written past h11 (server/chunked_body.py): the same bytes as through h11, strict
chunk framing, the connection reused afterwards, HTTP/1.0 and slow clients. Real HTTP on
loopback, a stand-in engine, raw sockets (so nothing between us and the framing)."""

from __future__ import annotations

import json
import re
import socket
import time

import pytest
from models import DEV_INSTALL, require_module

require_module("uvicorn", DEV_INSTALL)
require_module("tokenizers", DEV_INSTALL)

from fake_engines import FakeEngine, Script, ServerThread  # noqa: E402
from lanes import compiled_connection, compiled_lane, counting_lane  # noqa: E402
from models import model_path, tokenizer  # noqa: E402

from chatsieve.server import backends, chunked_body  # noqa: E402
from chatsieve.server import client as engine_client  # noqa: E402
from chatsieve.server.app import create_app  # noqa: E402
from chatsieve.server.config import ServerConfig  # noqa: E402

MODEL = "chunked-model"
NO_THINK = {"chat_template_kwargs": {"enable_thinking": False}}
LONG = "word " * 1500 + "end."
WORDS = "one word after another, " * 12 + "end."  # (repeated: the hot lane knows their texts after once)


@pytest.fixture(scope="module")
def tok():
    return tokenizer("qwen3")


@pytest.fixture(scope="module")
def engine(tok):
    enc = tok.encode
    scripts = {
        "[paced]": Script(enc("The answer is 42, and then some more words.<|im_end|>"), delay=0.01),
        "[long]": Script(enc(LONG + "<|im_end|>")),  # flat out: more than a socket buffer holds
        "[words]": Script(enc(WORDS + "<|im_end|>"), delay=0.01),
    }
    with FakeEngine(tok.decode, scripts).serving() as engine:
        yield engine


def app(engine, tok):
    config = ServerConfig(model_dir=model_path("qwen3"), format="qwen3", backend_url=engine.url,
                          served_model_name=MODEL, warm_up=False, max_model_len=8192)
    return create_app(config, tokenizer=tok)


@pytest.fixture(autouse=True, params=["python", "compiled"])
def took(request, monkeypatch) -> list[bytes] | None:
    """Each test with the stream's text lane and the engine connection in Python, and with the
    compiled ones (the lane writes a ChunkedBody's chunks itself): the engine reads the compiled
    lane took (None with the lane in Python)."""
    if request.param == "python":
        monkeypatch.setattr(backends, "compiled_lane", None)
        monkeypatch.setattr(engine_client, "_Connection", engine_client._PlainConnection)
        return None
    reads: list[bytes] = []
    compiled_connection()
    monkeypatch.setattr(backends, "compiled_lane", counting_lane(compiled_lane(), reads))
    return reads


@pytest.fixture
def written(monkeypatch):
    """The chunks written past h11, in this process."""
    chunks: list[bytes] = []
    write = chunked_body.ChunkedBody.write

    def counting(self, data: bytes) -> None:
        chunks.append(data)
        write(self, data)

    monkeypatch.setattr(chunked_body.ChunkedBody, "write", counting)
    return chunks


def request(path: str, body: dict | None, version: str = "1.1") -> bytes:
    if body is None:
        return f"GET {path} HTTP/{version}\r\nHost: 127.0.0.1\r\n\r\n".encode()
    data = json.dumps(body).encode()
    return (
        f"POST {path} HTTP/{version}\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(data)}\r\n\r\n"
    ).encode() + data


def chat(text: str) -> dict:
    return {"model": MODEL, "messages": [{"role": "user", "content": text}], "stream": True, **NO_THINK}


class Reader:
    """One HTTP/1.1 response after another from a socket, framing checked strictly."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = b""

    def _more(self) -> None:
        data = self.sock.recv(1 << 16)
        assert data, "the server closed the connection"
        self.buf += data

    def _until(self, sep: bytes) -> bytes:
        while sep not in self.buf:
            self._more()
        line, self.buf = self.buf.split(sep, 1)
        return line

    def _exactly(self, n: int) -> bytes:
        while len(self.buf) < n:
            self._more()
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    def response(self) -> tuple[int, dict[str, str], list[bytes]]:
        """(status, headers, body chunks) of the next response; a Content-Length body is one chunk."""
        head = self._until(b"\r\n\r\n").decode("latin-1").split("\r\n")
        status = int(head[0].split()[1])
        headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in head[1:])}
        if "content-length" in headers:
            return status, headers, [self._exactly(int(headers["content-length"]))]
        assert headers.get("transfer-encoding") == "chunked", headers
        chunks = []
        while True:
            size_line = self._until(b"\r\n")
            assert re.fullmatch(rb"[0-9a-f]+", size_line), size_line  # no extensions, no padding
            size = int(size_line, 16)
            if size == 0:
                assert self._exactly(2) == b"\r\n"  # no trailers
                return status, headers, chunks
            chunks.append(self._exactly(size))
            assert self._exactly(2) == b"\r\n"


def normalized(body: bytes) -> bytes:
    """A chat stream without what differs per request (its id and creation time)."""
    body = re.sub(rb'"id":"chatcmpl-[^"]+"', b'"id":"-"', body)
    return re.sub(rb'"created":\d+', b'"created":0', body)


def content(body: bytes) -> str:
    out = []
    for event in body.split(b"\n\n"):
        if event.startswith(b"data: {"):
            choice = json.loads(event[6:])["choices"][0]
            out.append(choice["delta"].get("content") or "")
    return "".join(out)


def exchange(url: str, *requests: bytes) -> list[tuple[int, dict[str, str], list[bytes]]]:
    """Send each request on one connection after the previous response; the responses."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        reader = Reader(sock)
        out = []
        for req in requests:
            sock.sendall(req)
            out.append(reader.response())
        return out


def test_a_stream_written_past_h11_is_the_stream_h11_writes(engine, tok, written, took):
    with ServerThread(app(engine, tok), http="h11") as plain:  # uvicorn's own h11: every chunk via send
        [(status, _, through_h11)] = exchange(plain.url, request("/v1/chat/completions", chat("[words]")))
    assert status == 200 and written == []
    with ServerThread(app(engine, tok)) as server:  # chatsieve serve's protocol
        [(status, headers, past_h11)] = exchange(server.url, request("/v1/chat/completions", chat("[words]")))
    assert status == 200 and headers["content-type"].startswith("text/event-stream")
    assert written and set(written) <= set(past_h11)  # the deltas went past h11
    assert took is None or took, "the compiled lane took no read"  # (it writes past ChunkedBody.write)
    assert normalized(b"".join(past_h11)) == normalized(b"".join(through_h11))
    assert content(b"".join(past_h11)) == WORDS


def test_the_connection_serves_the_next_requests_after_a_stream(engine, tok, written):
    with ServerThread(app(engine, tok)) as server:
        responses = exchange(
            server.url,
            request("/v1/chat/completions", chat("[paced]")),
            request("/v1/chat/completions", chat("[paced]")),
            request("/v1/models", None),
            request("/v1/chat/completions", {**chat("[paced]"), "stream": False}),
        )
    first, second, models, whole = responses
    assert [r[0] for r in responses] == [200, 200, 200, 200]
    assert content(b"".join(first[2])) == content(b"".join(second[2])) == "The answer is 42, and then some more words."
    assert json.loads(models[2][0])["data"][0]["id"] == MODEL
    assert json.loads(whole[2][0])["choices"][0]["message"]["content"] == "The answer is 42, and then some more words."
    assert written


def test_an_http_1_0_client_gets_its_stream_through_h11(engine, tok, written):
    with ServerThread(app(engine, tok)) as server:
        host, port = server.url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            sock.sendall(request("/v1/chat/completions", chat("[paced]"), version="1.0"))
            raw = b""
            while data := sock.recv(1 << 16):  # HTTP/1.0: the body ends with the connection
                raw += data
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200") and b"transfer-encoding" not in head.lower()
    assert written == []  # no chunk framing for this client: everything through h11
    assert content(body) == "The answer is 42, and then some more words." and body.endswith(b"data: [DONE]\n\n")


def test_a_client_that_stops_reading_gets_the_whole_stream_later(engine, tok, written):
    with ServerThread(app(engine, tok)) as server:
        host, port = server.url.removeprefix("http://").split(":")
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a small window: writes back up
            sock.settimeout(30)
            sock.connect((host, int(port)))
            sock.sendall(request("/v1/chat/completions", chat("[long]")))
            time.sleep(1.0)  # the engine streams on meanwhile; the server holds what the client does not take
            sock.sendall(request("/v1/models", None))  # pipelined: answered once the stream is done
            reader = Reader(sock)
            status, _, chunks = reader.response()
            after = reader.response()
    assert status == 200 and content(b"".join(chunks)) == LONG
    assert after[0] == 200 and json.loads(after[2][0])["data"][0]["id"] == MODEL
