"""The engine-side HTTP client (keep-alive pool) and the server-sent-event parser, against a small
scripted HTTP server on loopback."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import socket
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lanes import Transport, compiled_connection
from models import DEV_INSTALL, require_module

require_module("httptools", DEV_INSTALL)

from chatsieve.events import TokenLogprob  # noqa: E402
from chatsieve.server.backends import Backend, SseParser, TokenBatch, VllmReader, _EventReader, merge  # noqa: E402
from chatsieve.server.client import (  # noqa: E402
    ConnectFailed,
    Disconnected,
    EngineHTTP,
    ReadTimeout,
    _PlainConnection,
    compiled,
)

# ---------------------------------------------------------------- SSE parsing

line_text = st.text(st.characters(blacklist_characters="\r\n", blacklist_categories=("Cs",)), max_size=12)
data_event = st.lists(line_text, min_size=1, max_size=3).map(lambda lines: ("data", lines))
error_event = line_text.map(lambda t: t.strip()).filter(bool).map(lambda t: ("error", [t]))
noise = st.sampled_from([[], [": keep-alive"], ["event: message"], ["id: 7", "retry: 10"]])


def wire(events, noises, newline: str, end_blank: bool) -> bytes:
    blocks = []
    for (field, lines), extra in zip(events, noises):
        if field == "data":
            blocks.append(newline.join(extra + [f"data: {x}" for x in lines]))
        else:
            blocks.append(newline.join(extra + [f"error: {lines[0]}"]))
    text = (newline * 2).join(blocks)
    if end_blank:
        text += newline * 2
    return text.encode()


def expected(events) -> list[tuple[str, bytes]]:
    return [(field, "\n".join(lines).encode()) for field, lines in events]


def parse_in_pieces(data: bytes, cuts: list[int]) -> list[tuple[str, bytes]]:
    parser = SseParser()
    out, last = [], 0
    for cut in sorted(set(cuts)) + [len(data)]:
        out += parser.feed(data[last:cut])
        last = cut
    return out + parser.finish()


@settings(max_examples=300, deadline=None)
@given(
    events=st.lists(st.one_of(data_event, error_event), min_size=1, max_size=6),
    noises=st.lists(noise, min_size=6, max_size=6),
    newline=st.sampled_from(["\n", "\r\n", "\r"]),
    end_blank=st.booleans(),
    cuts=st.lists(st.integers(0, 400), max_size=12),
)
def test_sse_parser_gives_the_same_events_however_the_bytes_are_cut(events, noises, newline, end_blank, cuts):
    data = wire(events, noises, newline, end_blank)
    cuts = [c for c in cuts if c <= len(data)]
    assert parse_in_pieces(data, cuts) == expected(events)
    assert parse_in_pieces(data, list(range(len(data)))) == expected(events)  # byte by byte


def test_sse_parser_data_fields():
    p = SseParser()
    assert p.feed(b'data: {"a": 1}\n\ndata:[DONE]\n\n') == [("data", b'{"a": 1}'), ("data", b"[DONE]")]
    assert p.feed(b"data:  two spaces\n\n") == [("data", b" two spaces")]  # one space is the separator
    assert p.feed(b"data: a\r\ndata: b\r\n\r\n") == [("data", b"a\nb")]
    assert p.feed(b"data: half") == []
    assert p.feed(b"\n") == []
    assert p.finish() == [("data", b"half")]


def vllm_event(ids: list[int]) -> bytes:
    choice = {"index": 0, "text": "", "token_ids": ids, "logprobs": None, "finish_reason": None}
    return json.dumps({"choices": [choice]}, separators=(",", ":")).encode()


@settings(max_examples=200, deadline=None)
@given(
    events=st.lists(
        st.tuples(st.lists(st.integers(0, 99), min_size=1, max_size=3), st.booleans()), min_size=1, max_size=8
    ),
    newline=st.sampled_from([b"\n", b"\r\n"]),
    done=st.booleans(),
    cuts=st.lists(st.integers(0, 800), max_size=10),
    at=st.sampled_from(["events", "lines", "anywhere"]),
    lone_cr=st.booleans(),
)
def test_event_reader_reads_the_same_ids_from_whole_events_and_from_any_cut(events, newline, done, cuts, at,
                                                                           lone_cr):
    """A read holding exactly one one-line event takes a shortcut past SseParser; reads cut at
    event boundaries (the paced engine's case), at line ends (an event of two data lines, the
    second of which alone looks like a one-line event) or anywhere give the ids, event count
    and end of one read of everything. A lone CR ends a line too, even inside what ends in LF LF."""
    blocks = []
    for ids, two_lines in events:
        body = vllm_event(ids)
        if two_lines:  # the same JSON over two data lines (joined by a newline, which JSON skips)
            body = body.replace(b'"choices":', b'"choices":' + (b"\r" if lone_cr else newline) + b"data: ", 1)
        blocks.append(b"data: " + body + newline * 2)
    blocks += [b"data: [DONE]" + newline * 2] if done else []
    data = b"".join(blocks)
    if at == "events":  # one read per event, the shortcut's case (\r\n line ends must not take it)
        cuts += [sum(len(b) for b in blocks[: i + 1]) for i in range(len(blocks))]
    elif at == "lines":  # after each line end that is not the first half of a blank line
        ends = [i + len(newline) for i in range(len(data)) if data.startswith(newline, i)]
        cuts += [e for e in ends if not data.startswith(newline, e)]
    cuts = sorted({c for c in cuts if 0 < c < len(data)}) + [len(data)]

    def read(pieces: list[bytes]) -> tuple[list[int], int, bool]:
        reader = _EventReader(Backend("vllm", "http://127.0.0.1:1", None, str), VllmReader(str))
        ids: list[int] = []
        for piece in pieces:
            batch = reader.feed(piece)
            if batch is not None:
                ids += batch.token_ids
            if reader.done:
                break
        return ids, reader.count, reader.done

    whole = read([data])
    assert whole == ([i for ids, _ in events for i in ids], len(blocks), done)
    assert read([data[a:b] for a, b in zip([0, *cuts], cuts)]) == whole


def test_merge_joins_ids_logprobs_and_keeps_the_last_finish_reason():
    lp = [TokenLogprob(i, str(i), -0.5, ()) for i in range(4)]
    a = TokenBatch((0, 1), tuple(lp[:2]))
    b = TokenBatch((2,), (lp[2],))
    c = TokenBatch((3,), (lp[3],), "stop")
    assert merge([a]) is a
    assert merge([a, b, c]) == TokenBatch((0, 1, 2, 3), tuple(lp), "stop")
    # logprobs for some events only cannot be lined up with the ids: none rather than wrong ones
    assert merge([a, TokenBatch((2,))]) == TokenBatch((0, 1, 2), None, None)


# ---------------------------------------------------------------- the HTTP client


class Scripted:
    """An HTTP/1.1 server on loopback; `answer(n)` says what to do with the n-th request."""

    def __init__(self, answer) -> None:
        self.answer = answer
        self.connections = 0
        self.open = 0
        self.most_open = 0
        self.requests = 0
        self.disconnects = 0

    async def __aenter__(self) -> Scripted:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc) -> None:
        self.server.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.open += 1
        self.most_open = max(self.most_open, self.open)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                await reader.readexactly(length)
                self.requests += 1
                if not await self.answer(self.requests, writer):
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            self.disconnects += 1
        finally:
            self.open -= 1
            writer.close()


LAST_CHUNK = b"0\r\n\r\n"


def chunked(*events: bytes, close: bool = False) -> bytes:
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n"
    head += b"connection: close\r\n\r\n" if close else b"\r\n"
    return head + b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in events) + LAST_CHUNK


def unended(*events: bytes) -> bytes:
    """The head and `events` of a chunked response, without its last chunk."""
    return chunked(*events)[: -len(LAST_CHUNK)]


async def pushed_and_read(script, push) -> tuple[list[bytes], list[bytes]]:
    """One response of `script`: the bytes pushed to `push` (each kept, then `push(data)` says
    whether to go on) and those `chunks()` read after."""
    async with Scripted(script) as srv:
        client = EngineHTTP()
        pushed: list[bytes] = []
        async with await client.post(srv.url, b"{}") as resp:
            resp.push_to(lambda data: pushed.append(data) or push(pushed))
            read = [p async for p in resp.chunks()]
        assert client.idle() == 1
        return pushed, read


async def stream_ok(n: int, writer) -> bool:
    writer.write(chunked(b"data: 1\n\n", b"data: 2\n\n"))
    await writer.drain()
    return True


async def body(client: EngineHTTP, url: str) -> bytes:
    async with await client.post(url + "/x", b"{}") as resp:
        assert resp.status == 200
        return await resp.read()


def run(coro):
    return asyncio.run(coro)


def test_connections_are_kept_alive_and_reused():
    async def go():
        async with Scripted(stream_ok) as srv:
            client = EngineHTTP()
            for _ in range(5):
                assert await body(client, srv.url) == b"data: 1\n\ndata: 2\n\n"
            assert (srv.connections, srv.requests, client.opened, client.idle()) == (1, 5, 1, 1)
            await client.aclose()

    run(go())


def test_the_pool_never_opens_more_than_max_connections():
    async def slow(n, writer):
        await asyncio.sleep(0.05)
        return await stream_ok(n, writer)

    async def go():
        async with Scripted(slow) as srv:
            client = EngineHTTP(max_connections=2)
            results = await asyncio.gather(*(body(client, srv.url) for _ in range(8)))
            assert all(r == b"data: 1\n\ndata: 2\n\n" for r in results)
            assert srv.most_open <= 2 and srv.connections == 2 and srv.requests == 8
            await client.aclose()

    run(go())


def test_leaving_a_response_early_closes_its_connection():
    async def endless(n, writer):
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
        while True:
            writer.write(b"9\r\ndata: 1\n\n\r\n")
            await writer.drain()
            await asyncio.sleep(0.01)

    async def go():
        async with Scripted(endless) as srv:
            client = EngineHTTP()
            async with await client.post(srv.url, b"{}") as resp:
                async for data in resp.chunks():
                    assert data.startswith(b"data: 1")  # the body, de-chunked
                    break
            for _ in range(100):
                if srv.disconnects:
                    break
                await asyncio.sleep(0.02)
            assert srv.disconnects == 1 and client.idle() == 0  # the engine saw the abort

    run(go())


def test_a_connection_the_engine_closes_is_not_reused():
    async def close_after(n, writer):
        writer.write(chunked(b"data: 1\n\n", close=True))
        await writer.drain()
        return False

    async def go():
        async with Scripted(close_after) as srv:
            client = EngineHTTP()
            for _ in range(3):
                assert await body(client, srv.url) == b"data: 1\n\n"
            assert srv.connections == 3 and client.opened == 3 and client.idle() == 0

    run(go())


def test_a_stale_kept_alive_connection_is_replaced_once():
    # the engine answers the first request, then drops the connection when the next one comes
    # (as an engine does whose keep-alive timer fired just as the request was sent)
    async def first_only(n, writer):
        if n == 2:
            return False
        return await stream_ok(n, writer)

    async def go():
        async with Scripted(first_only) as srv:
            client = EngineHTTP()
            assert await body(client, srv.url) == b"data: 1\n\ndata: 2\n\n"
            assert await body(client, srv.url) == b"data: 1\n\ndata: 2\n\n"
            assert client.opened == 2 and srv.requests == 3

    run(go())


def test_a_fresh_connection_closed_before_answering_is_an_error():
    async def hang_up(n, writer):
        return False

    async def go():
        async with Scripted(hang_up) as srv:
            with pytest.raises(Disconnected):
                await EngineHTTP().post(srv.url, b"{}")
            assert srv.requests == 1  # a request that may have reached the engine is not sent again

    run(go())


def test_idle_connections_expire_before_the_engines_keep_alive():
    async def go():
        async with Scripted(stream_ok) as srv:
            client = EngineHTTP(keepalive_expiry=0.0)
            for _ in range(3):
                await body(client, srv.url)
            assert srv.connections == 3

    run(go())


def test_a_stalled_engine_times_out_and_a_closed_port_fails_to_connect():
    async def stall(n, writer):
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
        await asyncio.sleep(30)

    async def go():
        async with Scripted(stall) as srv:
            client = EngineHTTP(read_timeout=0.2)
            async with await client.post(srv.url, b"{}") as resp:
                with pytest.raises(ReadTimeout):
                    await resp.read()
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        with pytest.raises(ConnectFailed):
            await EngineHTTP().post(f"http://127.0.0.1:{port}/x", b"{}")

    run(go())


def test_a_body_cut_mid_chunk_is_disconnected():
    async def cut(n, writer):
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n9\r\ndata: 1\n\n\r\n5\r\nda")
        await writer.drain()
        return False

    async def go():
        async with Scripted(cut) as srv:
            async with await EngineHTTP().post(srv.url, b"{}") as resp:
                got = b""
                with pytest.raises(Disconnected):
                    async for data in resp.chunks():
                        got += data
                assert got.startswith(b"data: 1\n\n")

    run(go())


def test_a_body_without_length_ends_with_the_connection():
    async def old_style(n, writer):
        writer.write(b"HTTP/1.0 200 OK\r\ncontent-type: text/event-stream\r\n\r\ndata: 1\n\n")
        await writer.drain()
        writer.write(b"data: 2\n\n")
        await writer.drain()
        return False

    async def go():
        async with Scripted(old_style) as srv:
            client = EngineHTTP()
            assert await body(client, srv.url) == b"data: 1\n\ndata: 2\n\n"
            assert client.idle() == 0

    run(go())


def test_a_large_buffered_body_is_handed_over_in_steps_in_order():
    from chatsieve.server.client import STEP_BYTES

    events = [b"data: %06d\n\n" % i for i in range(20000)]  # 280 kB, written at once

    async def flood(n, writer):
        writer.write(chunked(*events))
        await writer.drain()
        return True

    async def go():
        async with Scripted(flood) as srv:
            client = EngineHTTP()
            await asyncio.sleep(0)
            async with await client.post(srv.url, b"{}") as resp:
                await asyncio.sleep(0.3)  # let it all arrive before reading
                pieces = [p async for p in resp.chunks()]
            assert b"".join(pieces) == b"".join(events)
            assert len(pieces) > 1 and max(map(len, pieces)) <= STEP_BYTES + len(events[0])
            assert client.idle() == 1

    run(go())


def test_pushed_bytes_are_every_byte_of_a_read_however_large_and_the_end_is_read():
    from chatsieve.server.client import STEP_BYTES

    events = [b"data: %06d\n\n" % i for i in range(20000)]  # 280 kB, written at once, then a pause
    pushed_before_the_end: list[int] = []

    async def burst(n, writer):
        writer.write(unended(*events))
        await writer.drain()
        await asyncio.sleep(0.3)  # the burst arrives; the end does not
        pushed_before_the_end.append(len(pushed_so_far))
        writer.write(LAST_CHUNK)
        await writer.drain()
        return True

    pushed_so_far: list[bytes] = []

    def push(pushed: list[bytes]) -> bool:
        pushed_so_far[:] = pushed
        return True

    pushed, read = run(pushed_and_read(burst, push))
    # what came with the head the reader took at once; the rest of the burst was pushed, all of
    # it before the end was sent (none left for a later read), and the end came to the reader
    assert b"".join(pushed[: pushed_before_the_end[0]]).endswith(events[-1])
    assert pushed_before_the_end[0] == len(pushed) > 1
    assert b"".join(read) + b"".join(pushed) == b"".join(events)
    assert max(map(len, pushed)) <= STEP_BYTES + len(events[0])


def test_a_push_that_gives_up_hands_the_rest_to_the_reader():
    events = [b"data: %d\n\n" % i for i in range(6)]

    async def paced(n, writer):
        writer.write(unended())  # the head
        await asyncio.sleep(0.05)
        for e in events:  # one event per write
            writer.write(b"%x\r\n%s\r\n" % (len(e), e))
            await writer.drain()
            await asyncio.sleep(0.02)
        writer.write(LAST_CHUNK)
        await writer.drain()
        return True

    pushed, read = run(pushed_and_read(paced, lambda pushed: len(pushed) < 3))
    assert b"".join(pushed) == b"".join(events[:3])  # the third was pushed, then it gave up
    assert b"".join(read) == b"".join(events[3:]) and b"" in read  # its wake-up: b"", then the rest


# ---------------------------------------------------------------- whole chunks past the parser
# (the compiled engine connection: chatsieve._lane.ConnectionBase)


class _Clock:
    """The loop's `time`, all a connection's pushed reads ask of it."""

    def time(self) -> float:
        return 7.0


class _CountingParser:
    """An HTTP parser's stand-in that counts the reads it was given."""

    def __init__(self, parser) -> None:
        self.parser, self.fed = parser, 0

    def feed_data(self, data: bytes) -> None:
        self.fed += 1
        self.parser.feed_data(data)

    def __getattr__(self, name):
        return getattr(self.parser, name)


def _connection(kind, push: bool, give_up_at: int | None):
    conn = kind()
    conn.transport, conn.loop = Transport(), _Clock()
    conn.start()
    conn.parser = _CountingParser(conn.parser)
    conn.pushed: list[bytes] = []
    conn.woken = 0
    if push:

        def pushing(data: bytes) -> bool:
            conn.pushed.append(data)
            return give_up_at is None or len(conn.pushed) < give_up_at

        conn.push = pushing
    conn.timeout = 5.0
    return conn


HEAD = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"


@pytest.mark.parametrize(
    "data, body",
    [
        (b"3\r\nabc\r\n", b"abc"),
        (b"3\r\nabc\r\n2\r\nde\r\n", b"abcde"),
        (b"A\r\n0123456789\r\n", b"0123456789"),  # upper-case digits
        (b"0003\r\nabc\r\n", b"abc"),  # leading zeros
        (b"4\r\na\r\nb\r\n", b"a\r\nb"),  # a CRLF inside the payload
        (b"3;x=1\r\nabc\r\n", None),  # an extension: the parser reads it
        (b"3 \r\nabc\r\n", None),
        (b" 3\r\nabc\r\n", None),
        (b"+3\r\nabc\r\n", None),
        (b"0x3\r\nabc\r\n", None),
        (b"\r\nabc\r\n", None),  # no size
        (b"3\r\nabc", None),  # cut before the chunk's CRLF
        (b"3\r\nabc\r", None),
        (b"3\r\nabcd\r\n", None),  # longer than its size
        (b"3\r\nabc\r\n2\r\nd", None),  # a whole chunk, then part of one
        (b"3\r\nabc\r\n1", None),  # a whole chunk, then part of a size line
        (b"0\r\n\r\n", None),  # the last chunk: the end is the parser's to read
        (b"3\r\nabc\r\n0\r\n\r\n", None),
        (b"123456789\r\nx\r\n", None),  # more than 8 digits
        (b"", None),
    ],
)
def test_only_whole_plain_chunks_pass_the_parser(data, body):
    """At a chunk's start with a callback taking pushes, a read of whole plain chunks goes to the
    callback past the parser, the read timeout moved on; any other read goes to the parser."""
    conn = _connection(compiled_connection(), True, None)
    conn.data_received(HEAD + b"1\r\nx\r\n")  # the head and a first chunk: through the parser
    assert conn.at_chunk_start and conn.pushed == [b"x"] and conn.parser.fed == 1
    conn.deadline = 0.0
    conn.data_received(data)
    if body is None:
        assert conn.parser.fed == 2
    else:
        assert conn.parser.fed == 1 and conn.pushed == [b"x", body] and conn.at_chunk_start
        assert conn.deadline == 12.0 and conn.received_any


@pytest.mark.parametrize("size", [32 << 10, (32 << 10) + 1])
def test_a_read_longer_than_a_push_goes_through_the_parser(size):
    conn = _connection(compiled_connection(), True, None)
    conn.data_received(HEAD + b"1\r\nx\r\n")
    payload = b"y" * (size - len(b"%x\r\n\r\n" % (size - 8)))
    data = b"%x\r\n%b\r\n" % (len(payload), payload)
    assert len(data) == size
    conn.data_received(data)
    assert conn.parser.fed == (1 if size <= 32 << 10 else 2) and conn.pushed[-1] == payload


def test_a_push_that_raises_raises_out_of_the_read():
    """As from the plain connection: the event loop's protocol callback fails (it closes the
    transport); nothing is pushed back."""
    conn = _connection(compiled_connection(), True, None)
    conn.data_received(HEAD + b"1\r\nx\r\n")

    def failing(data: bytes) -> bool:
        raise RuntimeError("boom")

    conn.push = failing
    with pytest.raises(RuntimeError, match="boom"):
        conn.data_received(b"1\r\ny\r\n")
    assert conn.parser.fed == 1 and conn.push is failing and not conn.pushed_back


@settings(max_examples=300, deadline=None)
@given(
    chunks=st.lists(
        st.tuples(st.binary(min_size=1, max_size=24), st.sampled_from(["plain", "upper", "zeros", "extension"])),
        max_size=8,
    ),
    trailer=st.booleans(),
    cutting=st.sampled_from(["chunks", "size lines", "anywhere"]),
    cuts=st.lists(st.integers(0, 400), max_size=12),
    push=st.booleans(),
    give_up_at=st.one_of(st.none(), st.integers(1, 6)),
)
def test_reads_past_the_parser_leave_what_the_parser_alone_leaves(chunks, trailer, cutting, cuts, push, give_up_at):
    """However the response is cut into reads, the compiled connection, which takes whole chunks
    apart itself, pushes the same bytes, read by read, keeps the same body, ends and wakes its reader
    as the plain one, whose every read goes through the parser; where reads are whole chunks, the
    parser sees none after the first."""
    size_line = {"plain": b"%x", "upper": b"%X", "zeros": b"00%x", "extension": b"%x;q=1"}
    pieces = [HEAD] + [size_line[style] % len(p) + b"\r\n" + p + b"\r\n" for p, style in chunks]
    pieces.append(b"0\r\nx-trailer: 1\r\n\r\n" if trailer else b"0\r\n\r\n")
    data = b"".join(pieces)
    if cutting == "chunks":  # each chunk its own read, as an engine writes one per token
        reads = pieces
    elif cutting == "size lines":  # each chunk's read cut after its size's first digit
        reads = [HEAD] + [part for piece in pieces[1:] for part in (piece[:1], piece[1:])]
    else:
        at = sorted({c for c in cuts if 0 < c < len(data)})
        reads = [data[a:b] for a, b in zip([0, *at], [*at, len(data)])]
    fast, plain = (_connection(kind, push, give_up_at) for kind in (compiled_connection(), _PlainConnection))
    for conn in (fast, plain):
        wake = conn._wake

        def counted(conn=conn, wake=wake) -> None:
            conn.woken += 1
            wake()

        conn._wake = counted
    starts = set(itertools.accumulate(map(len, pieces)))  # where chunks begin (and the end)
    consumed = 0
    for r in reads:
        fast.data_received(r)
        consumed += len(r)
        assert not fast.at_chunk_start or consumed in starts, "the parser does not stand at a chunk's start"
        plain.data_received(r)
        assert fast.pushed == plain.pushed and fast.woken == plain.woken
    assert fast.body == plain.body and fast.buffered == plain.buffered
    assert (fast.complete, fast.error, fast.keep_alive, fast.pushed_back, fast.push is None) == (
        plain.complete, plain.error, plain.keep_alive, plain.pushed_back, plain.push is None,
    )  # fmt: skip
    assert fast.complete and fast.error is None
    # what was not pushed is the reader's, in order (the end is never pushed)
    assert b"".join(fast.pushed) + b"".join(fast.body) == b"".join(p for p, _ in chunks)
    plain_sizes = [style != "extension" for _, style in chunks]
    if cutting == "chunks" and push and give_up_at is None and len(chunks) >= 2 and all(plain_sizes):
        # the head, the first chunk (from which the parser stands at the next one's start), the end
        assert fast.parser.fed == 3, fast.parser.fed
    assert plain.parser.fed == len(reads)


def test_chatsieve_compiled_lane_0_turns_the_compiled_connection_off():
    """The documented switch: the plain connection and the Python lane, in a server started with it."""
    compiled_connection()
    check = ("from chatsieve.server import backends, client; "
             "print(client._Connection is client._PlainConnection, backends.compiled_lane is None)")
    for value, expected in (("0", "True True"), ("1", "False False")):
        out = subprocess.run([sys.executable, "-c", check], env={**os.environ, "CHATSIEVE_COMPILED_LANE": value},
                             capture_output=True, text=True, check=True).stdout.split()
        assert " ".join(out) == expected, (value, out)


def test_a_name_an_older_extension_lacks_falls_back_to_python():
    """An extension built from an older source (an editable install not rebuilt) has no newer type:
    the server then runs the Python path for it instead of failing to import."""
    compiled_connection()
    assert compiled("ConnectionBase") is not None and compiled("NoSuchTypeInAnOlderBuild") is None
