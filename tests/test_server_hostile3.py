"""`chatsieve serve` against hostile traffic, round 3 (issue 33): who is calling (one identity for
the API key in either header: auth, the response store, the prompt cache, the log), the Responses
store (chains bounded and loaded off the event loop, each turn stored once, a byte bound, space
given back, private files), bodies parsed off the loop, streamed logprobs held as bytes, left-out
tool names in a header and the log, `max_tool_calls`. Real HTTP on loopback, a stand-in engine."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import stat
import threading
import tracemalloc
import urllib.parse
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from fake_engines import FakeEngine, Script, ServerThread
from models import model_path, tokenizer

from chatsieve import prefix_cache
from chatsieve.server import serve_main
from chatsieve.server.app import create_app
from chatsieve.server.config import ServerConfig
from chatsieve.server.security import SecurityPolicy

MODEL = "hostile3-model"
OFF = {"effort": "none"}
KEYS = ("sk-alice", "sk-bob")
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "%s"}}\n</tool_call>'
TOOL = {"type": "function", "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}


@pytest.fixture(scope="module")
def tok():
    return tokenizer("qwen3")


@pytest.fixture(scope="module")
def engine(tok):
    enc = tok.encode
    scripts = {
        "[hi]": Script(enc("Hello there.<|im_end|>")),
        "[three]": Script(enc("\n".join(CALL % c for c in ("Paris", "London", "Rome")) + "<|im_end|>")),
    }
    with FakeEngine(tok.decode, scripts).serving() as engine:
        yield engine


def config(url: str, **kw) -> ServerConfig:
    base = {"model_dir": model_path("qwen3"), "format": "qwen3", "backend_url": url, "served_model_name": MODEL,
            "warm_up": False, "max_model_len": 4096,
            "security": SecurityPolicy(api_keys=KEYS, allowed_hosts=("127.0.0.1", "localhost"))}
    return ServerConfig(**{**base, **kw})


@contextlib.contextmanager
def served(engine, tok, tmp_path: Path, **kw):
    cfg = config(engine.url, response_store=str(tmp_path / "store" / "responses.db"), **kw)
    with ServerThread(create_app(cfg, tokenizer=tok)) as s:
        yield s.url


@pytest.fixture(scope="module")
def server(engine, tok, tmp_path_factory):
    with served(engine, tok, tmp_path_factory.mktemp("hostile3")) as url:
        yield url


def bearer(key: str) -> dict:
    return {"authorization": f"Bearer {key}"}


def x_api_key(key: str) -> dict:
    return {"x-api-key": key}


HEADERS: dict[str, Callable[[str], dict]] = {"bearer": bearer, "x-api-key": x_api_key}


def respond(url: str, headers: dict, **body) -> httpx.Response:
    body = {"model": MODEL, "reasoning": OFF, **body}
    return httpx.post(url + "/v1/responses", json=body, headers=headers, timeout=60)


def created(url: str, headers: dict, **body) -> str:
    r = respond(url, headers, **{"input": "[hi] hello", **body})
    assert r.status_code == 200, r.text
    return r.json()["id"]


def error_of(r: httpx.Response, status: int) -> dict:
    assert r.status_code == status, r.text
    return r.json()["error"]


# ---------------------------------------------------------------- 1: who is calling


def store_op(url: str, op: str, rid: str, headers: dict) -> httpx.Response:
    if op == "retrieve":
        return httpx.get(f"{url}/v1/responses/{rid}", headers=headers, timeout=30)
    if op == "input_items":
        return httpx.get(f"{url}/v1/responses/{rid}/input_items", headers=headers, timeout=30)
    if op == "continue":
        return respond(url, headers, input="[hi] again", previous_response_id=rid)
    assert op == "delete"
    return httpx.delete(f"{url}/v1/responses/{rid}", headers=headers, timeout=30)


STORE_OPS = ("retrieve", "input_items", "continue", "delete")


@pytest.mark.parametrize("op", STORE_OPS)
@pytest.mark.parametrize("other", sorted(HEADERS))
@pytest.mark.parametrize("creator", sorted(HEADERS))
def test_a_stored_response_is_its_callers_whichever_header_carries_the_key(server, creator, other, op):
    rid = created(server, HEADERS[creator]("sk-alice"))
    # another key, in either header, finds nothing (and deletes nothing)
    err = error_of(store_op(server, op, rid, HEADERS[other]("sk-bob")), 404)
    assert err["code"] == "not_found" and rid in err["message"]
    # the same key is the same caller in either header
    r = store_op(server, op, rid, HEADERS[other]("sk-alice"))
    assert r.status_code == 200, r.text


def test_two_different_keys_in_one_request_are_refused(server):
    both = {**bearer("sk-alice"), **x_api_key("sk-bob")}
    err = error_of(httpx.get(server + "/v1/models", headers=both, timeout=10), 401)
    assert err["code"] == "invalid_api_key" and "two different" in err["message"]
    # the same key twice, or a valid key beside an invalid one, is the valid key's caller
    rid = created(server, {**bearer("sk-alice"), **x_api_key("sk-alice")})
    assert store_op(server, "retrieve", rid, {**bearer("sk-alice"), **x_api_key("junk")}).status_code == 200
    assert store_op(server, "retrieve", rid, {**bearer("junk"), **x_api_key("sk-alice")}).status_code == 200


def test_the_access_log_names_the_caller_not_the_key(engine, tok, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="chatsieve.access")
    with served(engine, tok, tmp_path) as url:
        for headers in (bearer("sk-alice"), x_api_key("sk-alice"), x_api_key("sk-bob")):
            assert httpx.get(url + "/v1/models", headers=headers, timeout=10).status_code == 200
    lines = [r.getMessage() for r in caplog.records if r.name == "chatsieve.access" and "/v1/models" in r.getMessage()]
    callers = [line.rsplit(" ", 1)[-1] for line in lines]
    assert len(lines) == 3 and callers[0] == callers[1] != callers[2], lines
    assert not any("sk-" in line for line in lines)


# ---------------------------------------------------------------- 8: the prompt cache per caller


SYSTEM = "You are a careful assistant. " + " ".join(f"rule {i}: be exact." for i in range(200))
ROUTES = {  # route -> (path, body for a system prompt and a user text)
    "chat": ("/v1/chat/completions", lambda system, text: {
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": text}],
        "chat_template_kwargs": {"enable_thinking": False}, "max_tokens": 8}),
    "messages": ("/v1/messages", lambda system, text: {
        "system": system, "messages": [{"role": "user", "content": text}], "max_tokens": 8}),
    "count_tokens": ("/v1/messages/count_tokens", lambda system, text: {
        "system": system, "messages": [{"role": "user", "content": text}]}),
    "responses": ("/v1/responses", lambda system, text: {"instructions": system, "input": text, "reasoning": OFF}),
}


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_no_caller_reuses_a_prompt_prefix_another_caller_cached(server, tok, route):
    """The prefix cache's hits are a timing oracle (issue 33, item 8): a caller's prompt reuses
    only the prefixes its own earlier prompts left (bob's earlier prompts of other tests may give
    him the template's opening control token, never alice's system prompt)."""
    path, body = ROUTES[route]
    cache = prefix_cache.cache_for(tok.hf)
    system = f"[{route} {os.urandom(4).hex()}] {SYSTEM}"  # a system prompt no earlier test cached
    tokens = len(tok.encode(system))

    def send(key: str, text: str) -> int:
        before = cache.reused_tokens
        r = httpx.post(server + path, json={"model": MODEL, **body(system, text)}, headers=x_api_key(key),
                       timeout=60)
        assert r.status_code == 200, r.text
        return cache.reused_tokens - before  # the ids reused from the cache

    send("sk-alice", "[hi] first")
    assert send("sk-bob", "[hi] first") < 8  # bob's prompt, alice's prefix: not reused
    assert send("sk-alice", "[hi] second") >= tokens  # alice's own prefix is reused


# ---------------------------------------------------------------- 2: chains


def reasoning_step(size: int, text: str) -> list[dict]:
    """A step whose bulk renders nothing (an earlier turn's reasoning, which Qwen3's template
    drops): what only a byte bound can stop."""
    return [{"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "x" * size}]},
            {"role": "user", "content": text}]


def test_a_chain_is_bounded_by_bytes(engine, tok, tmp_path):
    policy = SecurityPolicy(api_keys=KEYS, allowed_hosts=("127.0.0.1",), max_body_bytes=64 * 1024)
    with served(engine, tok, tmp_path, security=policy) as url:
        first = created(url, bearer("sk-alice"), input=reasoning_step(40_000, "[hi] one"))
        r = respond(url, bearer("sk-alice"), input=reasoning_step(40_000, "[hi] two"), previous_response_id=first)
        err = error_of(r, 400)
        assert err["param"] == "previous_response_id" and err["code"] == "conversation_too_long"
        assert "bytes" in err["message"]
        # a small continuation still fits
        assert respond(url, bearer("sk-alice"), input="[hi] two", previous_response_id=first).status_code == 200


def test_a_chain_is_bounded_by_items(engine, tok, tmp_path):
    with served(engine, tok, tmp_path, response_chain_max_items=5) as url:
        rid = created(url, bearer("sk-alice"))  # 2 items: the input, the answer
        rid = created(url, bearer("sk-alice"), previous_response_id=rid, input="[hi] 2")  # 4
        empty = {"type": "reasoning", "summary": [], "content": []}  # items that render nothing
        r = respond(url, bearer("sk-alice"), previous_response_id=rid, input=[empty, empty, empty])
        err = error_of(r, 400)
        assert err["code"] == "conversation_too_long" and "items" in err["message"]


def held(monkeypatch, target: object, name: str) -> tuple[threading.Event, threading.Event]:
    """Patch `target.name` to wait (in whichever thread calls it) until released; returns (called,
    release)."""
    called, release = threading.Event(), threading.Event()
    real = getattr(target, name)

    def hold(*a, **kw):
        called.set()
        release.wait(15)
        return real(*a, **kw)

    monkeypatch.setattr(target, name, hold)
    return called, release


def health_while_held(url: str, called: threading.Event, release: threading.Event, send: Callable) -> httpx.Response:
    result: list = []
    worker = threading.Thread(target=lambda: result.append(send()))
    worker.start()
    try:
        assert called.wait(30), result and result[0].text
        health = httpx.get(url + "/health", timeout=5)
        assert health.status_code == 200 and not result  # answered while the work was held
    finally:
        release.set()
        worker.join(60)
    assert result
    return result[0]


def test_a_continuation_is_loaded_and_converted_off_the_event_loop(server, monkeypatch):
    from chatsieve.protocols import openai_responses_request

    rid = created(server, bearer("sk-alice"))
    called, release = held(monkeypatch, openai_responses_request, "items_to_messages")
    r = health_while_held(server, called, release,
                          lambda: respond(server, bearer("sk-alice"), input="[hi] more", previous_response_id=rid))
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("stream", [False, True])
def test_a_response_is_stored_off_the_event_loop(server, monkeypatch, stream):
    from chatsieve.server.response_store import ResponseStore

    called, release = held(monkeypatch, ResponseStore, "put")
    r = health_while_held(server, called, release,
                          lambda: respond(server, bearer("sk-alice"), input="[hi] store me", stream=stream))
    assert r.status_code == 200 and "Hello there." in r.text


# ---------------------------------------------------------------- 3: bodies parsed off the loop


PARSERS = {  # route -> (path, a body over the small size); every route's parse checks it first (Fields.of)
    "chat": ("/v1/chat/completions",
             {"messages": [{"role": "user", "content": "[hi] " + "pad " * 40_000}], "max_tokens": 4}),
    "messages": ("/v1/messages",
                 {"messages": [{"role": "user", "content": "[hi] " + "pad " * 40_000}], "max_tokens": 4}),
    "count_tokens": ("/v1/messages/count_tokens",
                     {"messages": [{"role": "user", "content": "[hi] " + "pad " * 40_000}]}),
    "responses": ("/v1/responses", {"input": "[hi] " + "pad " * 40_000, "reasoning": OFF}),
}


@pytest.mark.parametrize("route", sorted(PARSERS))
def test_a_large_body_is_decoded_and_parsed_off_the_event_loop(server, monkeypatch, route):
    from chatsieve.protocols import common

    path, body = PARSERS[route]
    called, release = held(monkeypatch, common, "check_json_depth")
    r = health_while_held(server, called, release, lambda: httpx.post(
        server + path, json={"model": MODEL, **body}, headers=x_api_key("sk-alice"), timeout=60))
    assert r.status_code in (200, 400), r.text  # answered (too long for the context is fine)


MANY = 5_000  # parts in a body: each a dict or two for the cyclic collector to walk
MANY_PARTS = {
    "chat": ("/v1/chat/completions", {"messages": [{"role": "user", "content": [{"type": "text", "text": "[hi]"}]}] * MANY,
                                      "max_tokens": 4}),
    "messages": ("/v1/messages", {"messages": [{"role": "user", "content": [{"type": "text", "text": "[hi]"}] * MANY}],
                                  "max_tokens": 4}),
    "count_tokens": ("/v1/messages/count_tokens",
                     {"messages": [{"role": "user", "content": [{"type": "text", "text": "[hi]"}] * MANY}]}),
    "responses": ("/v1/responses", {"input": [{"role": "user", "content": "[hi]"}] * MANY, "reasoning": OFF}),
}


@pytest.mark.parametrize("refused_at", ["parse", "prompt"])
@pytest.mark.parametrize("route", sorted(MANY_PARTS))
def test_a_refused_body_is_freed_at_once_not_by_the_cycle_collector(server, route, refused_at, caplog):
    """A refusal raised in a worker thread held the request's whole body in a reference cycle
    (through the awaited future) until the cyclic collector walked it, GIL held, on two busy cores
    for up to a second at a time."""
    import gc
    import time

    caplog.set_level(logging.INFO, logger="chatsieve.access")
    path, body = MANY_PARTS[route]
    if refused_at == "parse":
        body = {**body, "temperature": "hot"}
    gc.collect()
    gc.disable()
    try:
        r = httpx.post(server + path, json={"model": MODEL, **body}, headers=x_api_key("sk-alice"), timeout=60)
        # a small request next: its preparation takes the worker thread the refusal came from,
        # which holds the last exception it raised until then
        small = httpx.post(server + "/v1/chat/completions", headers=x_api_key("sk-alice"), timeout=60, json={
            "model": MODEL, "messages": [{"role": "user", "content": "[hi]"}], "max_tokens": 4})
        rids = (r.headers["x-request-id"], small.headers["x-request-id"])
        deadline = time.monotonic() + 30  # an access log line is written once its route has returned
        while time.monotonic() < deadline and not all(
                any(rid in rec.getMessage() for rec in caplog.records) for rid in rids):
            time.sleep(0.01)
        collected = gc.collect()
    finally:
        gc.enable()
    assert r.status_code == 400, r.text
    assert ("context is" in r.json()["error"]["message"]) is (refused_at == "prompt"), r.text
    assert collected < MANY // 2, collected


# ---------------------------------------------------------------- 4: the store's size


def store_files(path: Path) -> int:
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))


def test_each_turn_is_stored_once(engine, tok, tmp_path):
    with served(engine, tok, tmp_path) as url:
        sent, rid = 0, None
        for i in range(8):
            body = {"input": reasoning_step(50_000, f"[hi] step {i}"), "previous_response_id": rid}
            sent += len(json.dumps(body))
            rid = created(url, bearer("sk-alice"), **body)
        # the last step's conversation holds every step's items
        items = httpx.get(f"{url}/v1/responses/{rid}/input_items", params={"limit": 100}, headers=bearer("sk-alice"),
                          timeout=30).json()["data"]
        assert len(items) == 8 * 2 + 7  # each step's two items, each earlier step's answer
    # every file of the store (database, WAL): about what was sent, not a copy of the history per row
    assert store_files(tmp_path / "store" / "responses.db") <= 1.5 * sent


# ---------------------------------------------------------------- 6: left-out tool names


LEFT_OUT_NAMES = ["日本語サーバー", "☃", "crlf\r\nX-Injected: 1", "nl\nERROR:     chatsieve.server: forged", "a, b%2C"]


def left_out_request(route: str, names: list[str], stream: bool) -> tuple[str, dict]:
    if route == "responses":
        tools = [{"type": "mcp", "server_label": n, "server_url": "https://x.example"} for n in names[::2]]
        tools += [{"type": "custom", "name": n} for n in names[1::2]]
        return "/v1/responses", {"input": "[hi] x", "tools": tools, "reasoning": OFF, "stream": stream}
    tools = [{"type": "tool_search_tool_regex_20251119", "name": n} for n in names]
    return "/v1/messages", {"messages": [{"role": "user", "content": "[hi] x"}], "tools": tools, "max_tokens": 16,
                            "stream": stream}


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("route", ["responses", "messages"])
def test_left_out_tool_names_are_percent_encoded_in_the_header_and_escaped_in_the_log(server, route, stream, caplog):
    from chatsieve.protocols.common import LEFT_OUT_HEADER

    caplog.set_level(logging.INFO)
    path, body = left_out_request(route, LEFT_OUT_NAMES, stream)
    r = httpx.post(server + path, json={"model": MODEL, **body}, headers=x_api_key("sk-alice"), timeout=30)
    assert r.status_code == 200, r.text
    assert "Hello" in r.text  # answered (a stream may send the text in several deltas)
    raw = r.headers.get_list(LEFT_OUT_HEADER)
    assert len(raw) == 1 and raw[0].isascii() and "\r" not in raw[0] and "\n" not in raw[0]
    assert "x-injected" not in r.headers
    names = [urllib.parse.unquote(n) for n in raw[0].split(", ")]
    if route == "responses":
        expected = [f"mcp:{n}" for n in LEFT_OUT_NAMES[::2]] + [f"custom:{n}" for n in LEFT_OUT_NAMES[1::2]]
    else:
        expected = LEFT_OUT_NAMES
    assert names == expected
    messages = [rec.getMessage() for rec in caplog.records if rec.name.startswith("chatsieve")]
    assert any("日本語" in urllib.parse.unquote(m) or "\\u65e5" in m for m in messages), messages
    assert all("\n" not in m and "\r" not in m for m in messages), messages


# ---------------------------------------------------------------- 7: private files


def modes(path: Path) -> dict[str, int]:
    return {p.name: stat.S_IMODE(p.stat().st_mode) for p in path.parent.glob(path.name + "*")}


def test_the_store_is_private_to_its_account(engine, tok, tmp_path):
    with served(engine, tok, tmp_path) as url:
        created(url, bearer("sk-alice"))
        db = tmp_path / "store" / "responses.db"
        assert stat.S_IMODE(db.parent.stat().st_mode) == 0o700
        found = modes(db)
        assert {"responses.db", "responses.db-wal", "responses.db-shm"} <= set(found), found
        assert set(found.values()) == {0o600}, found


@pytest.mark.parametrize("which", ["responses.db", "responses.db-wal"])
def test_a_store_readable_by_others_is_refused_at_start_up(tmp_path, capsys, which):
    from chatsieve.server.response_store import ResponseStore

    db = tmp_path / "responses.db"
    ResponseStore(db).close()
    loose = tmp_path / which
    loose.touch()
    loose.chmod(0o644)
    with pytest.raises(ValueError, match="chmod"):
        ResponseStore(db)
    argv = ["--model-dir", str(model_path("qwen3")), "--format", "qwen3", "--backend", "http://127.0.0.1:9",
            "--response-store", str(db)]
    assert serve_main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("chatsieve serve: error: --response-store") and "chmod" in err and which in err


# ---------------------------------------------------------------- extras


@pytest.mark.parametrize("stream", [False, True])
def test_max_tool_calls_keeps_that_many_calls(server, stream):
    r = respond(server, bearer("sk-alice"), input="[three] weather", tools=[TOOL], max_tool_calls=2, stream=stream)
    assert r.status_code == 200, r.text
    if stream:
        final = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: ")][-1]["response"]
    else:
        final = r.json()
    cities = [json.loads(o["arguments"])["city"] for o in final["output"] if o["type"] == "function_call"]
    assert cities == ["Paris", "London"] and final["max_tool_calls"] == 2


def test_a_memory_store_with_several_workers_is_refused(capsys):
    argv = ["--model-dir", str(model_path("qwen3")), "--format", "qwen3", "--backend", "http://127.0.0.1:9",
            "--response-store", ":memory:", "--workers", "2"]
    assert serve_main(argv) == 2
    err = capsys.readouterr().err
    assert "--workers" in err and ":memory:" in err


# ---------------------------------------------------------------- 5: streamed logprobs


def test_a_streamed_answer_holds_its_logprobs_as_bytes(tok):
    """Growth while a long answer with logprobs streams: what the stream holds is not per-token
    Python objects (about 14 times the closing event before), and the closing event carries
    every delta's entries."""
    from chatsieve.events import ContentDelta, TokenLogprob
    from chatsieve.protocols.openai_responses_request import ResponsesRequest
    from chatsieve.protocols.openai_responses_stream import ResponseStream

    req = ResponsesRequest(input=[], logprobs=True, top_logprobs=3)
    out = ResponseStream(req.skeleton(id="resp_x", model="m"), logprobs=True, top_logprobs=3,
                         token_bytes=lambda i: b"ab")
    tracemalloc.start()
    try:
        out.start()
        deltas = []
        for i in range(20_000):
            lp = TokenLogprob(i, "ab", -0.5, (("ab", -0.5), ("cd", -1.5), ("ef", -2.5)))
            data = out.encode([ContentDelta("ab", logprobs=(lp,))])
            if i < 3:
                deltas.append(data)
        held = tracemalloc.get_traced_memory()[0]
        closing = out.finish(usage={})
    finally:
        tracemalloc.stop()
    events = [json.loads(line[6:]) for line in closing.decode().splitlines() if line.startswith("data: ")]
    done = next(e for e in events if e["type"] == "response.output_text.done")
    completed = events[-1]["response"]
    assert len(done["logprobs"]) == 20_000 and completed["output"][0]["content"][0]["logprobs"] == done["logprobs"]
    sent = [json.loads(line[6:]) for d in deltas for line in d.decode().splitlines() if line.startswith("data: ")]
    first = [e["logprobs"][0] for e in sent if e["type"] == "response.output_text.delta"]
    assert done["logprobs"][:3] == first
    assert held < len(closing) / 2, (held, len(closing))
