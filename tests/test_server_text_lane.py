"""The stream's text lane gives the client the bytes the layered path gives.

A token id the parser's hot lane takes (`StreamParser.take_id`) goes from the engine connection's
callback to the client's transport as text: the reader's `one_id`, the generation's `push_id`,
`ToolCallFilter.passes_text` and the encoder's `encode_text`, without the batch, event and list
objects of the layered path (`push`, `_accept`, `feed`, `apply`, `deliver`, `encode`); an id it
adds to a call's held arguments goes no further (the layered path makes no event of it). Here
every route's whole stream is run both ways on the same engine bytes, cut into reads anywhere
(most reads one whole event, as a paced engine's are) and with the client falling behind
between any two reads, for requests that reach each check the lane makes: strict tools (a held
call), max_tokens, a reasoning budget (a second engine request), stop token ids, vLLM and
llama.cpp events, in Qwen3's format and gpt-oss's (harmony's own hot lane); the bytes must be
equal up to the random ids, and the lane must have taken tokens, those of the call's arguments
among them where the stream reaches the call (else the comparison proves nothing).
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import json
import re
import types
from contextlib import ExitStack
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lanes import Transport, compiled_lane, counting_lane
from models import DEV_INSTALL, model_path, require_module

require_module("starlette", DEV_INSTALL)
require_module("httptools", DEV_INSTALL)
require_module("tokenizers", DEV_INSTALL)

from chatsieve import StreamParser, load_tokenizer  # noqa: E402
from chatsieve._json import loads_strict  # noqa: E402
from chatsieve.protocols.anthropic import ANTHROPIC  # noqa: E402
from chatsieve.protocols.common import ResponseInfo, ToolCallFilter  # noqa: E402
from chatsieve.protocols.openai_chat import OPENAI_CHAT  # noqa: E402
from chatsieve.protocols.openai_responses import OPENAI_RESPONSES  # noqa: E402
from chatsieve.server import backends  # noqa: E402
from chatsieve.server import client as engine_client  # noqa: E402
from chatsieve.server.backends import SseParser, _EventReader  # noqa: E402
from chatsieve.server.chunked_body import ChunkedBody  # noqa: E402
from chatsieve.server.config import ServerConfig  # noqa: E402
from chatsieve.server.generation import Generation  # noqa: E402
from chatsieve.server.metrics import CheapHistogram  # noqa: E402
from chatsieve.server.service import ChatService  # noqa: E402
from chatsieve.server.streaming import StreamOut, _Pending, write_event_stream  # noqa: E402

HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"

TOOL = {
    "name": "write_file",
    "description": "Write a file.",
    "parameters": {
        "type": "object",
        "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
        "required": ["path", "content"],
        "additionalProperties": False,
    },
}
# (with whitespace runs inside: the lane holds them back, and sends them with the text after them)
REASONING = "The user wants the notes written down,\n\nso I will write them to the file first.  Then check."
CONTENT = "I will write the notes to the file now,\nand then tell you what it holds.\n\n  It is short."
ARGS = {"path": "/tmp/notes.txt", "content": "Meeting at ten. Bring the plans and the budget."}


def request(route: str, variant: str, stop_id: int) -> dict:
    """The request body of `route` for `variant` (which check of the lane it reaches)."""
    strict = variant == "strict"
    user = [{"role": "user", "content": "Write the notes file."}]
    if route == "chat":
        body = {"model": "m", "messages": user, "stream": True,
                "tools": [{"type": "function", "function": {**TOOL, "strict": strict}}]}
    elif route == "messages":
        body = {"model": "m", "messages": user, "stream": True, "max_tokens": 4000,
                "thinking": {"type": "enabled", "budget_tokens": 2048},
                "tools": [{"name": TOOL["name"], "description": TOOL["description"],
                           "input_schema": TOOL["parameters"], "strict": strict}]}
    else:
        body = {"model": "m", "input": "Write the notes file.", "stream": True,
                "reasoning": {"effort": "medium", "summary": "auto"},
                "tools": [{"type": "function", **TOOL, "strict": strict}]}
    if variant == "max_tokens":  # cut in the content
        body["max_output_tokens" if route == "responses" else "max_tokens"] = 30
        if route == "messages":
            body["thinking"]["budget_tokens"] = 29
    elif variant == "budget":  # run out in the reasoning
        if route == "messages":
            body["thinking"]["budget_tokens"] = 9
        else:
            body["thinking_token_budget"] = 9
    elif variant == "stop_ids":
        body["stop_token_ids"] = [stop_id]
    return body


PARSE = {"chat": OPENAI_CHAT, "messages": ANTHROPIC, "responses": OPENAI_RESPONSES}


class Body:
    """The client's side: keeps the bytes; while `slow`, not ready until the test lets it read."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.ready = True
        self._read = asyncio.Event()

    def write(self, data: bytes) -> None:
        self.parts.append(data)

    async def drain(self) -> None:
        while not self.ready:
            self._read.clear()
            await self._read.wait()

    def slow(self) -> None:
        self.ready = False

    def catch_up(self) -> None:
        self.ready = True
        self._read.set()


class Flow:
    """uvicorn's flow control of a cycle: `write_paused` while the client does not read."""

    def __init__(self) -> None:
        self.write_paused = False
        self._read = asyncio.Event()

    async def drain(self) -> None:
        while self.write_paused:
            self._read.clear()
            await self._read.wait()


class Chunked(ChunkedBody):
    """A real ChunkedBody (its `ready` and `write`, which the compiled lane does itself) on a
    stand-in cycle: the client's side as `Body` is, the bytes framed as they go to the transport."""

    def __init__(self) -> None:
        super().__init__(types.SimpleNamespace(transport=Transport(), flow=Flow(), disconnected=False))

    @property
    def parts(self) -> list[bytes]:
        """The chunks' data, the framing checked."""
        data, out = b"".join(self._transport.sent), []
        while data:
            size, _, rest = data.partition(b"\r\n")
            assert re.fullmatch(rb"[0-9a-f]+", size) and rest[int(size, 16):int(size, 16) + 2] == b"\r\n"
            out.append(rest[:int(size, 16)])
            data = rest[int(size, 16) + 2:]
        return out

    def slow(self) -> None:
        self._flow.write_paused = True

    def catch_up(self) -> None:
        self._flow.write_paused = False
        self._flow._read.set()


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(data), data)


def vllm_events(ids: list[int], decode) -> list[bytes]:
    out = []
    for i, t in enumerate(ids):
        last = i == len(ids) - 1
        choice = {"index": 0, "text": decode([t]), "token_ids": [t], "logprobs": None,
                  "finish_reason": "stop" if last else None, "stop_reason": None}
        event = {"id": "cmpl-1", "object": "text_completion", "created": 0, "model": "m", "choices": [choice]}
        out.append(chunk(b"data: " + json.dumps(event, ensure_ascii=False).encode() + b"\n\n"))
    return [*out, chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"]


def llamacpp_events(ids: list[int], decode) -> list[bytes]:
    out = []
    for t in ids:
        event = {"index": 0, "content": decode([t]), "tokens": [t], "stop": False, "id_slot": 0}
        out.append(chunk(b"data: " + json.dumps(event, ensure_ascii=False).encode() + b"\n\n"))
    end = {"index": 0, "content": "", "tokens": [], "stop": True, "stop_type": "eos", "timings": {"cache_n": 0}}
    return [*out, chunk(b"data: " + json.dumps(end).encode() + b"\n\n") + b"0\r\n\r\n"]


# each family's answer: reasoning, content, then the call; and, after a reasoning budget runs out,
# what the second engine request answers
ANSWERS = {
    "qwen3": (
        "qwen3",
        "<think>\n{r}\n</think>\n\n{c}\n<tool_call>\n{{\"name\": \"write_file\", \"arguments\": {a}}}\n"
        "</tool_call><|im_end|>",
        "{c}<|im_end|>",
    ),
    "gpt_oss": (
        "gpt-oss",
        "<|channel|>analysis<|message|>{r}<|end|><|start|>assistant<|channel|>commentary<|message|>{c}<|end|>"
        "<|start|>assistant to=functions.write_file<|channel|>commentary <|constrain|>json<|message|>{a}<|call|>",
        "<|channel|>final<|message|>{c}<|return|>",  # (the budget's close ends with "<|start|>assistant")
    ),
}


@functools.cache
def family(name: str):
    """The family's tokenizer, its answer's ids and the budget's second answer, a stop id (a token
    of the content) and its model directory."""
    directory, answer, rest = ANSWERS[name]
    tok = load_tokenizer(model_path(directory))
    answer_ids = tok.encode(answer.format(r=REASONING, c=CONTENT, a=json.dumps(ARGS)))
    stop_id = tok.encode(" tell")[0]
    assert stop_id in answer_ids
    return tok, answer_ids, tok.encode(rest.format(c=CONTENT)), stop_id, model_path(directory)


def normalized(data: bytes) -> str:
    """The stream with its random ids numbered in order of appearance, and no timestamps."""
    text = data.decode()
    seen: dict[str, str] = {}

    def name(m: re.Match) -> str:
        return seen.setdefault(m.group(0), f"{m.group(1)}#{len(seen)}")

    text = re.sub(r"\b(chatcmpl-|msg_|call_|toolu_|rs_|fc_|resp_)[A-Za-z0-9_]+", name, text)
    return re.sub(r'"(created|created_at)":\d+', r'"\1":0', text)


async def run_stream(service: ChatService, body: dict, route: str, scripts: list[list[bytes]],
                     cuts: list[set[int]], slow: list[bool], connections: list, client_type: type) -> bytes:
    """One whole stream; the engine's n-th request answered with `scripts[n]`, cut into reads at
    `cuts[n]` (positions in its bytes), the client falling behind before read k where `slow[k]`."""
    protocol = PARSE[route]
    parse = (lambda b, lim: ANTHROPIC.parse(b, lim, format=service.config.format)) if route == "messages" \
        else protocol.parse
    parsed = parse(body, service.limits)
    gen = await service.prepare(parsed.chat)
    info = ResponseInfo(model="m", prompt_tokens=gen.prompt_tokens, token_bytes=service.token_bytes)
    client = client_type()
    task = asyncio.create_task(write_event_stream(gen, protocol.encoder(parsed, info), None, StreamOut(None, client)))
    connections.clear()
    k = 0
    for n, script in enumerate(scripts):
        while len(connections) <= n or not connections[n].transport.sent:
            if task.done():
                break
            await asyncio.sleep(0)
        if task.done():
            break
        conn = connections[n]
        conn.data_received(HEAD)
        data = b"".join(script)
        edges = [0, *sorted(c for c in cuts[n] if 0 < c < len(data)), len(data)]
        for a, b in zip(edges, edges[1:]):
            if conn.transport.closed:
                break  # the stream cancelled this engine request
            if slow[k % len(slow)]:
                client.slow()
            k += 1
            conn.data_received(data[a:b])
            for _ in range(3):
                await asyncio.sleep(0)
            client.catch_up()
    await asyncio.wait_for(task, 10)
    return b"".join(client.parts)


def both_ways(fmt: str, kind: str, body: dict, route: str, scripts: list[list[bytes]], cuts, slow,
              compiled: type | None = None, client_type: type = Body,
              taken: list[bytes] | None = None) -> tuple[str, str, int, int, int, int, int]:
    """The stream with the text lane and without it, normalized; the tokens the lane took in Python
    (and of them, those it added to a call's held arguments, and those after whitespace it held
    back), the engine requests made, and the reads the compiled lane took (`compiled`:
    chatsieve._lane.Lane and the compiled engine connection, else the lane and the connection in
    Python only; the layered path's connection is the plain one), the client's body a `client_type`;
    those reads are appended to `taken` too."""
    connections: list = []
    took: list[bytes] = [] if taken is None else taken

    kind_of_connection = [engine_client._Connection if compiled else engine_client._PlainConnection]

    async def connection(self, key):  # EngineHTTP._connection without a socket
        conn = kind_of_connection[0]()
        conn.connection_made(Transport())
        connections.append(conn)
        return conn, False

    taken, held, spaced, requests = [0], [0], [0], [0]
    take_id = StreamParser.take_id

    def counting(self, tid):
        warm = self._warm is not None  # (whitespace held back: the text after it goes with it)
        text = take_id(self, tid)
        taken[0] += text is not None
        held[0] += text == ""
        spaced[0] += warm and text is not None
        return text

    async def go() -> tuple[bytes, bytes]:
        tok, *_, directory = family(fmt)
        config = ServerConfig(model_dir=directory, format=fmt, backend_url="http://127.0.0.1:9",
                              backend_kind=kind, warm_up=False)
        service = ChatService(config, tokenizer=tok)
        await service.start()
        try:
            with mock.patch.object(StreamParser, "take_id", counting), \
                    mock.patch.object(backends, "compiled_lane", counting_lane(compiled, took) if compiled else None):
                lane = await run_stream(service, body, route, scripts, cuts, slow, connections, client_type)
            requests[0] = len(connections)
            kind_of_connection[0] = engine_client._PlainConnection
            with mock.patch.object(Generation, "_id_pusher", lambda *a: None):
                layered = await run_stream(service, body, route, scripts, cuts, slow, connections, client_type)
        finally:
            await service.stop()
        return lane, layered

    with ExitStack() as stack:
        stack.enter_context(mock.patch.object(engine_client.EngineHTTP, "_connection", connection))
        lane, layered = asyncio.run(go())
    return normalized(lane), normalized(layered), taken[0], held[0], spaced[0], requests[0], len(took)


def reads(sizes: list[int]) -> st.SearchStrategy:
    """Cut positions: most event boundaries kept (a paced engine's reads), some dropped (reads of
    several events), and a few anywhere (an event split over reads)."""
    bounds = [sum(sizes[: i + 1]) for i in range(len(sizes) - 1)]
    total = sum(sizes)
    return st.builds(
        lambda drop, extra: {b for i, b in enumerate(bounds) if i not in drop} | set(extra),
        st.sets(st.integers(0, len(bounds) - 1), max_size=len(bounds) // 3),
        st.lists(st.integers(1, total - 1), max_size=6),
    )


def each_event_a_read(scripts: list[list[bytes]]) -> list[set[int]]:
    """Cut positions for reads of one whole engine event each (a paced engine's)."""
    return [set(itertools.accumulate(len(e) for e in script[:-1])) for script in scripts]


ROUTES = ("chat", "messages", "responses")
CASES = [("qwen3", route, variant, "vllm") for route in ROUTES
         for variant in ("plain", "strict", "max_tokens", "budget", "stop_ids")
         if (route, variant) != ("responses", "budget")]  # (the Responses API has no reasoning budget)
CASES += [("qwen3", route, "plain", "llamacpp") for route in ROUTES]
CASES += [("gpt_oss", route, variant, "vllm") for route in ROUTES for variant in ("plain", "budget")
          if (route, variant) != ("responses", "budget")]


# the compiled lane (chatsieve._lane) where the server builds it: the chat route's encoder, vLLM events;
# with a ChunkedBody, the server's (whose checks and framing the lane does itself; the tests below
# run it with the test's body too)
COMPILED = [case for case in CASES if case[1] == "chat" and case[3] == "vllm"]
LANES = [(*case, False, "body") for case in CASES] + [(*case, True, "chunked") for case in COMPILED]


@pytest.mark.parametrize(("fmt", "route", "variant", "kind", "compiled", "client"), LANES)
def test_the_text_lane_writes_what_the_layered_path_writes(fmt, route, variant, kind, compiled, client):
    tok, answer, rest, stop_id, _ = family(fmt)
    body = request(route, variant, stop_id)
    events = vllm_events if kind == "vllm" else llamacpp_events
    scripts = [events(answer, tok.decode), events(rest, tok.decode)]

    lane_type = compiled_lane() if compiled else None
    took_all = 0

    @settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(cuts=st.tuples(*(reads([len(e) for e in s]) for s in scripts)),
           slow=st.lists(st.booleans(), min_size=1, max_size=40))
    def check(cuts, slow):
        nonlocal took_all
        lane, layered, taken, held, _, requests, took = both_ways(fmt, kind, body, route, scripts, list(cuts),
                                                                  slow, lane_type, Chunked if client == "chunked" else Body)
        took_all += took
        assert lane == layered
        assert taken + took > 0, "the lane took no token: the comparison proves nothing"
        if variant in ("plain", "strict"):  # (the others end before the call)
            assert held > 0, "the lane took no token of the call's arguments"
        assert requests == (2 if variant == "budget" else 1)  # the budget's second engine request

    check()
    if compiled:  # (in all: in one example the client may be behind at every read)
        assert took_all > 0, "the compiled lane took no read"


@pytest.mark.parametrize(("route", "kind", "compiled"), [
    *((route, kind, False) for route in ROUTES for kind in ("vllm", "llamacpp")), ("chat", "vllm", True)])
def test_the_text_lane_takes_the_text_after_whitespace_it_held_back(route, kind, compiled):
    """Each engine event its own read (a paced engine's): the lane takes the tokens after the
    whitespace runs of the reasoning and the content (a few: random reads above may merge them all
    away), and the bytes are the layered path's."""
    tok, answer, rest, stop_id, _ = family("qwen3")
    events = vllm_events if kind == "vllm" else llamacpp_events
    scripts = [events(answer, tok.decode), events(rest, tok.decode)]
    cuts = each_event_a_read(scripts)
    taken: list[bytes] = []
    lane, layered, _, _, spaced, _, took = both_ways("qwen3", kind, request(route, "plain", stop_id), route,
                                                     scripts, cuts, [False], compiled_lane() if compiled else None,
                                                     taken=taken)
    assert lane == layered
    if not compiled:
        assert spaced > 0, "the lane took no token after whitespace it held back"
        return
    # the compiled lane takes them itself (but the first of each id, whose text Python looks up), and
    # the whitespace it holds back: reads of both among those it took
    ids = [json.loads(read[len(b"data: "):])["choices"][0]["token_ids"][0] for read in taken]
    texts = [tok.decode([i]) for i in ids]
    assert any(t.endswith((" ", "\n")) for t in texts), "the compiled lane took no whitespace"
    after = {b for a, b in itertools.pairwise(answer + rest) if tok.decode([a]).endswith((" ", "\n"))}
    assert after & set(ids), "the compiled lane took no token after whitespace it held back"


@pytest.mark.parametrize(("client", "compiled"), [("body", False), ("body", True), ("chunked", True)])
def test_the_lane_takes_characters_cut_over_several_ids_and_held_arguments(client, compiled):
    """Each engine event its own read, with characters cut over several ids in the reasoning, the
    content and the call's held arguments: the bytes are the layered path's. The ids the C does not
    take itself (those, the held arguments, an id seen for the first time) it hands to `take_id` and
    writes what that returns, without the Python callback."""
    tok, *_, stop_id, _ = family("qwen3")
    _, answer, rest = ANSWERS["qwen3"]
    cut = "明天有小雨 😀 🦜"
    args = {"path": "/tmp/notes.txt", "content": f"{cut} notes {cut}, then the plans."}
    answer_ids = tok.encode(answer.format(r=f"{REASONING} {cut}", c=f"{CONTENT} {cut}", a=json.dumps(args, ensure_ascii=False)))
    scripts = [vllm_events(answer_ids, tok.decode), vllm_events(tok.encode(rest.format(c=CONTENT)), tok.decode)]
    taken: list[bytes] = []
    lane, layered, _, held, *_ = both_ways("qwen3", "vllm", request("chat", "plain", stop_id), "chat", scripts,
                                           each_event_a_read(scripts), [False], compiled_lane() if compiled else None,
                                           Chunked if client == "chunked" else Body, taken=taken)
    assert lane == layered
    if not compiled:
        assert held > 0, "the lane took no token of the call's arguments"
        return
    took = [json.loads(read[len(b"data: "):])["choices"][0]["token_ids"][0] for read in taken]
    start, end = answer_ids.index(tok.encode("<tool_call>")[0]), answer_ids.index(tok.encode("</tool_call>")[0])
    in_args = set(answer_ids[start + 1:end]) & set(took)
    assert len(in_args) > len(set(answer_ids[start + 1:end])) // 2, "the compiled lane took few of the call's ids"
    pieces = {i for i in answer_ids[:start] if "\ufffd" in tok.decode([i])}
    assert pieces, "no character is cut over several ids here: the test proves nothing"
    assert pieces & set(took), "the compiled lane took no id of a character cut over several"


class FailingBody(Body):
    """A client whose sixth write fails, once (a bug below the stream, say): the stream must end as
    the layered path ends it, with the compiled lane writing too."""

    failed = False

    def write(self, data: bytes) -> None:
        if len(self.parts) == 5 and not self.failed:
            self.failed = True
            raise RuntimeError("the write failed")
        super().write(data)


@pytest.mark.parametrize("compiled", [False, True])
def test_a_write_that_fails_ends_the_stream_as_the_layered_path_ends_it(compiled):
    tok, answer, rest, stop_id, _ = family("qwen3")
    scripts = [vllm_events(answer, tok.decode), vllm_events(rest, tok.decode)]
    cuts = each_event_a_read(scripts)
    for _ in range(2):  # (the second time the hot lane knows every token's text: the lane writes the sixth)
        lane, layered, *_, took = both_ways("qwen3", "vllm", request("chat", "plain", stop_id), "chat", scripts,
                                            cuts, [False], compiled_lane() if compiled else None, FailingBody)
        assert lane == layered
    assert "error" in lane.rsplit("data: ", 2)[-2]  # the stream's last event before [DONE]
    if compiled:
        assert took, "the compiled lane took no read"


@pytest.mark.parametrize("compiled", [False, True])
def test_an_unreadable_event_ends_the_stream_as_the_layered_path_ends_it(compiled):
    """An event that is not JSON, in the lane's usual read: the lane leaves it to the Python
    callback, which fails the stream as the layered path does."""
    tok, answer, rest, stop_id, _ = family("qwen3")
    first = vllm_events(answer, tok.decode)
    scripts = [[*first[:12], chunk(b'data: {"choices": [\n\n'), *first[12:]], vllm_events(rest, tok.decode)]
    cuts = each_event_a_read(scripts)
    for _ in range(2):  # (the second time the hot lane knows every token's text)
        lane, layered, *_, took = both_ways("qwen3", "vllm", request("chat", "plain", stop_id), "chat", scripts,
                                            cuts, [False], compiled_lane() if compiled else None)
        assert lane == layered
        assert "error" in lane.rsplit("data: ", 2)[-2]  # the stream's last event before [DONE]
    if compiled:
        assert took, "the compiled lane took no read"


def test_what_the_compiled_lane_reads_per_token_is_in_slots():
    """The compiled lane reaches the attributes its SLOTS list names by their slots' offsets (by name
    where a class has no slot for one: the same result, only slower): each is in its class's
    `__slots__`, under the name the C interns for it."""
    compiled_lane()
    source = (Path(backends.__file__).parents[1] / "_lane.c").read_text()
    names = dict(re.findall(r'X\((s_\w+), "(\w+)"\)', source))
    block = source[source.index("#define SLOTS(X)"):]
    block = block[: block.index("\n\n")]
    pairs = re.findall(r"X\((\w+), (s_\w+)\)", block)
    classes = {"gen": Generation, "parser": StreamParser, "calls": ToolCallFilter, "pending": _Pending,
               "reader": _EventReader, "sse": SseParser, "histogram": CheapHistogram}
    assert len(pairs) >= 25 and {obj for obj, _ in pairs} == set(classes)
    missing = [(obj, names[var]) for obj, var in pairs if names[var] not in classes[obj].__slots__]
    assert not missing, missing


# ---- the event's id read from its bytes (`chatsieve._lane.event_id`, the lane's read without objects)

def reference_id(data: bytes) -> int:
    """What the lane reads with objects: `one_id(loads_strict(data))`, as the C gives it (-1: none)."""
    try:
        event = loads_strict(data)
    except ValueError:
        return -1
    tid = backends.VllmReader(None).one_id(event) if type(event) is dict else None
    return tid if tid is not None and 0 <= tid < 2**63 else -1


def event_id():
    compiled_lane()
    from chatsieve import _lane

    return _lane.event_id


TEXTS = st.text(st.characters(codec="utf-8"), max_size=12) | st.sampled_from(
    [" the", "明天", "\n", '"', "\\", "\u2028", "😀", "\x00", "\x1f\x7f", "error"])
SMALL = st.integers(-3, 300_000) | st.sampled_from([0, 10**18 - 1, 10**18, 2**63, 2**64 + 1])
ODD = st.none() | st.booleans() | SMALL | TEXTS | st.just(1.5) | st.just([]) | st.just({}) | st.just([{}])


@st.composite
def event_bytes(draw) -> bytes:
    """An event as an engine may write it: half of them the usual one of one id (any text, any
    key order, spacing and escaping, members absent or null), the others with any member odd; a
    key given twice (the last counts), or a byte changed, added or dropped (mostly invalid JSON)."""
    usual = draw(st.booleans())

    def some(strategy: st.SearchStrategy) -> st.SearchStrategy:
        return strategy if usual else strategy | ODD

    choice = {"index": 0, "text": draw(TEXTS), "token_ids": draw(some(st.lists(SMALL, min_size=1, max_size=1)))}
    for key, value in (("logprobs", st.none()), ("finish_reason", st.none()), ("stop_reason", ODD)):
        if draw(st.booleans()):
            choice[key] = draw(some(value))
    event = {"id": "cmpl-1", "choices": [choice] if usual or draw(st.booleans()) else draw(st.lists(ODD, max_size=2) | ODD)}
    for key, value in (("object", st.sampled_from(["text_completion", "error", "err\tor"])), ("created", SMALL),
                       ("model", TEXTS), ("error", st.none() | st.sampled_from([False, 0, "", [], {}])),
                       ("usage", st.none())):
        if draw(st.booleans()):
            event[key] = draw(some(value))
    items = draw(st.permutations(list(event.items())))
    if draw(st.integers(0, 4)) == 0:  # a key given twice
        items.insert(draw(st.integers(0, len(items))), (draw(st.sampled_from(list(event))), draw(ODD)))
    comma, colon = draw(st.sampled_from([(",", ":"), (", ", ": "), (" ,\t", "\r\n:  ")]))
    ascii_ = draw(st.booleans())
    body = comma.join(json.dumps(k, ensure_ascii=ascii_) + colon
                      + json.dumps(v, ensure_ascii=ascii_, separators=(comma, colon)) for k, v in items)
    data = bytearray(draw(st.sampled_from(["", " ", "\t"])) + "{" + body + "}", "utf-8")
    cut = draw(st.integers(0, 9))  # (1-4: a byte dropped, changed or added, or one after the end; 5: bytes
    if cut == 5 and (at := data.find(b'"text"')) >= 0:  # in the text, valid UTF-8 or not)
        at = data.index(b'"', at + 6) + 1
        data[at:at] = draw(st.sampled_from([b"\xe6\x98\x8e", b"\xf0\x9f\x98\x80", b"\xed\x9f\xbf", b"\xee\x80\x80",
                                            b"\xf4\x8f\xbf\xbf", b"\xed\xa0\x80", b"\xc0\x80", b"\xc1\xbf", b"\xe0\x9f\xbf",
                                            b"\xf0\x8f\xbf\xbf", b"\xf4\x90\x80\x80", b"\xf5\x80\x80\x80", b"\xe6\x98",
                                            b"\x80", b"\xe6\x98\x22", b"\x7f"]))
    elif cut == 4:
        data += draw(st.sampled_from([b"}", b",", b" x", b"\x00", b"{}"]))
    elif 1 <= cut <= 3:
        at = draw(st.integers(0, len(data) - 1))
        if cut == 1:
            del data[at]
        elif cut == 2:
            data[at] = draw(st.integers(0, 255))
        elif cut == 3:
            data.insert(at, draw(st.sampled_from(b'{}[],:"\\ 0-e.\x00\x80\xed\xff')))
    return bytes(data)


@settings(max_examples=3000, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(event_bytes())
def test_the_lane_reads_an_events_id_from_its_bytes_as_orjson_and_one_id_read_it(data):
    """Where `event_id` reads an id, it is the one the lane read with objects; it declines (-1) only
    what is outside its subset (a \\u escape, a number over 18 digits or with a fraction) or has no
    one id, so the usual event is read without objects."""
    got, want = event_id()(data), reference_id(data)
    if got != -1:
        assert got == want
    elif want != -1:
        assert re.search(rb"\\u|\d{19}|\d[.eE]", data), "declined an event in the subset"


def test_the_lane_reads_the_ids_of_an_engines_paced_events_without_objects():
    """Every event of a real stream (a Qwen3 answer with CJK, line breaks and quotes, as the stand-in
    engine and vLLM's compact JSON write it) but the last (its finish) is read from its bytes."""
    tok = load_tokenizer(model_path("qwen3"))
    ids = tok.encode('The "notes" file:\n\n明天有小雨，下午转晴。 😀 a\\b\t')
    events = vllm_events(ids, tok.decode)
    compact = [json.dumps({"id": "cmpl-x", "object": "text_completion", "created": 1733000000, "model": "m",
                           "choices": [{"index": 0, "text": tok.decode([t]), "logprobs": None, "finish_reason": None,
                                        "stop_reason": None, "token_ids": [t], "prompt_token_ids": None}],
                           "usage": None}, ensure_ascii=False, separators=(",", ":")).encode() for t in ids]
    datas = [re.search(rb"data: (.*)\n\n", e, re.S).group(1) for e in events if b"[DONE]" not in e]
    read = event_id()
    assert [read(d) for d in datas[:-1] + compact] == ids[:-1] + ids
    assert read(datas[-1]) == -1 and reference_id(datas[-1]) == -1  # (finish_reason "stop")


def test_the_lane_reads_utf_8_in_an_events_text_as_orjson_does():
    """Every lead byte with up to three bytes after it from the edges of the continuation range (so
    every overlong form, surrogate, code point past U+10FFFF and cut sequence), in an otherwise usual
    event's text: read where orjson reads it, declined where orjson refuses it."""
    read = event_id()
    edges = [0x22, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0]
    head, tail = b'{"choices":[{"text":"a', b'b","token_ids":[7],"logprobs":null}]}'
    tails = [b""] + [bytes(t) for n in (1, 2, 3) for t in itertools.product(edges, repeat=n)]
    wrong = [seq for lead in range(0x80, 0x100) for t in tails
             if read(data := head + (seq := bytes([lead]) + t) + tail) != reference_id(data)]
    assert not wrong, wrong[:10]
    assert read(head + "明😀".encode() + tail) == 7
