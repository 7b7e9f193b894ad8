"""`chatsieve serve` against hostile traffic, round 2 (issue 19): empty API keys, numbers forwarded
unchecked, ids outside the vocabulary in logprobs, request preparation off the event loop and its
bound, HTTP framing, log forging, /metrics. Real HTTP on loopback, a stand-in engine."""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import threading
import time

import httpx
import pytest
from fake_engines import FakeEngine, Script, ServerThread
from hypothesis import given, settings
from hypothesis import strategies as st
from models import model_path, tokenizer

import chatsieve
from chatsieve.protocols.openai_chat import RequestError, parse_chat_request
from chatsieve.server import build_parser, serve_main, uvicorn_options
from chatsieve.server.app import create_app
from chatsieve.server.config import ServerConfig
from chatsieve.server.metrics import _GAP_BUCKETS, Metrics
from chatsieve.server.security import SecurityMiddleware, SecurityPolicy

MODEL = "hostile-model"
NO_THINK = {"chat_template_kwargs": {"enable_thinking": False}}


def user(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


@pytest.fixture(scope="module")
def tok():
    return tokenizer("qwen3")


@pytest.fixture(scope="module")
def vocab(tok):
    return tok.hf.get_vocab_size(with_added_tokens=True)


@pytest.fixture(scope="module")
def engine(tok, vocab):
    enc = tok.encode
    scripts = {
        "[answer]": Script(enc("The answer is 42.<|im_end|>")),
        "[paced]": Script(enc("The answer is 42.<|im_end|>"), delay=0.02),  # one event per read
        # the last id of the vocabulary: the fake engine's alternatives are id+1, id+2 (beyond it)
        "[edge]": Script([*enc("Edge"), vocab - 1, *enc("<|im_end|>")]),
    }
    with FakeEngine(lambda ids: tok.decode([i for i in ids if 0 <= i < vocab]), scripts).serving() as engine:
        yield engine


def config(url: str, **kw) -> ServerConfig:
    base = {"model_dir": model_path("qwen3"), "format": "qwen3", "backend_url": url, "served_model_name": MODEL,
            "warm_up": False, "max_model_len": 4096,
            "security": SecurityPolicy(allowed_hosts=("127.0.0.1", "localhost"))}
    return ServerConfig(**{**base, **kw})


@pytest.fixture(scope="module")
def server(engine, tok):
    with ServerThread(create_app(config(engine.url), tokenizer=tok)) as s:
        yield s.url


def post(url: str, body: dict, **kw) -> httpx.Response:
    return httpx.post(url + "/v1/chat/completions", json={"model": MODEL, **body}, timeout=30, **kw)


def error_of(r: httpx.Response, status: int) -> dict:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    return err


# ---------------------------------------------------------------- item 3: empty API key


@pytest.mark.parametrize("key", ["", " ", "has space", "tab\tkey"])
def test_an_empty_or_unsendable_api_key_is_a_start_up_error(key, capsys, monkeypatch):
    monkeypatch.delenv("CHATSIEVE_API_KEY", raising=False)
    argv = ["--model-dir", str(model_path("qwen3")), "--format", "qwen3", "--backend", "http://127.0.0.1:9",
            "--host", "0.0.0.0", "--api-key", key]
    assert serve_main(argv) == 2
    assert "API key" in capsys.readouterr().err
    with pytest.raises(ValueError, match="API key"):
        SecurityMiddleware(lambda *a: None, SecurityPolicy(api_keys=("good", key)))


# ---------------------------------------------------------------- item 7: numbers and ids


@pytest.mark.parametrize("field,value", [
    ("logit_bias", {"²": 1}), ("logit_bias", {"①": 1}), ("logit_bias", {"٣": 1}),
    ("logit_bias", {"1" * 400: 1}), ("seed", 1e300), ("seed", 2**64), ("seed", -(2**63) - 1),
    ("top_k", 10**30),
])
def test_unforwardable_numbers_are_400(server, engine, field, value):
    engine.requests.clear()
    err = error_of(post(server, {"messages": user("[answer]"), field: value}), 400)
    assert err["param"] == field and err["type"] == "invalid_request_error"
    assert engine.requests == []


def test_ids_and_counts_past_the_vocabulary_are_400(server, engine, vocab):
    engine.requests.clear()
    for body in ({"logit_bias": {str(vocab): 5}}, {"top_k": vocab + 1}):
        err = error_of(post(server, {"messages": user("[answer]"), **body}), 400)
        assert err["param"] == next(iter(body)) and str(vocab) in err["message"]
    assert engine.requests == []
    # the edges are fine
    r = post(server, {"messages": user("[answer]"), "logit_bias": {str(vocab - 1): 5}, "top_k": vocab,
                      "seed": 2**63 - 1, **NO_THINK})
    assert r.status_code == 200, r.text


def test_parse_keeps_ascii_token_ids():
    r = parse_chat_request({"messages": user("x"), "logit_bias": {"42": -100, "7": 3.5}, "seed": -5})
    assert r.logit_bias == ((7, 3.5), (42, -100.0)) and r.seed == -5
    with pytest.raises(RequestError):
        parse_chat_request({"messages": user("x"), "logit_bias": {"+7": 1}})


@pytest.mark.parametrize("stream", [False, True])
def test_logprob_alternatives_past_the_vocabulary_are_502(server, stream, caplog):
    body = {"messages": user("[edge]"), "logprobs": True, "top_logprobs": 3, "stream": stream, **NO_THINK}
    r = post(server, body)
    if not stream:
        assert error_of(r, 502)["code"] == "backend_error"
    else:
        assert r.status_code == 200
        data = [line[6:] for line in r.text.splitlines() if line.startswith("data: ")]
        assert data[-1] == "[DONE]" and json.loads(data[-2])["error"]["code"] == "backend_error"
    assert "outside the tokenizer's vocabulary" in caplog.text


# ---------------------------------------------------------------- item 2: preparation off the loop


def deep_tool(depth: int) -> dict:
    s: dict = {"type": "string"}
    for _ in range(depth):
        s = {"type": ["object", "object"], "properties": {"a": s}, "anyOf": [{"required": ["a"]}, {"type": "object"}]}
    return {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"x": s}}}}


@pytest.fixture(scope="module")
def llamacpp_server(engine, tok):
    cfg = config(engine.url, backend_kind="llamacpp", check_engine_model=False, max_concurrent_prompts=1,
                 prompt_queue_timeout=0.2)
    with ServerThread(create_app(cfg, tokenizer=tok)) as s:
        yield s.url


def test_health_answers_while_a_request_is_prepared(llamacpp_server, monkeypatch):
    # The preparation of a worst-case request (a grammar for a deeply nested schema, which took
    # minutes before it was linear) is held inside the grammar builder until /health has answered:
    # on the event loop, /health could not answer until it finished.
    from chatsieve import preparation

    started, health_done = threading.Event(), threading.Event()
    real = preparation.constraint_plan

    def held(*a, **kw):
        started.set()
        health_done.wait(30)
        return real(*a, **kw)

    monkeypatch.setattr(preparation, "constraint_plan", held)
    body = {"messages": user("[answer]"), "tools": [deep_tool(14)], "tool_choice": "required", **NO_THINK}
    result: list[httpx.Response] = []
    worker = threading.Thread(target=lambda: result.append(post(llamacpp_server, body)))
    worker.start()
    try:
        assert started.wait(30), ("the request never reached the grammar", result and result[0].text)
        r = httpx.get(llamacpp_server + "/health", timeout=10)
        assert r.status_code == 200 and not result  # answered while the request was being prepared
        # the one preparation slot is taken: another request is a 503 after the queue timeout
        busy = post(llamacpp_server, {"messages": user("[answer]"), **NO_THINK})
        assert error_of(busy, 503)["code"] == "server_busy"
    finally:
        health_done.set()
        worker.join(60)
    assert result and result[0].status_code == 200, result[0].text if result else None
    assert post(llamacpp_server, {"messages": user("[answer]"), **NO_THINK}).status_code == 200


def test_a_grammar_past_the_bound_is_400(llamacpp_server, monkeypatch):
    from chatsieve import grammar

    monkeypatch.setattr(grammar, "MAX_GRAMMAR_BYTES", 2048)
    body = {"messages": user("[answer]"), "tools": [deep_tool(14)], "tool_choice": "required", **NO_THINK}
    err = error_of(post(llamacpp_server, body), 400)
    assert err["code"] == "grammar_too_large" and err["param"] == "tool_choice"


# ---------------------------------------------------------------- item 5: HTTP framing


@contextlib.contextmanager
def real_server(engine_url: str, tok, *extra: str):
    """The server as `chatsieve serve` runs it: its uvicorn options (the guarded, strict h11)."""
    args = build_parser().parse_args(
        ["--model-dir", "m", "--format", "qwen3", "--backend", engine_url, *extra])
    with ServerThread(create_app(config(engine_url), tokenizer=tok), **uvicorn_options(args)) as server:
        yield server.port


@pytest.fixture(scope="module")
def strict_port(engine, tok):
    with real_server(engine.url, tok) as port:
        yield port


CHAT = json.dumps({"model": MODEL, "messages": user("[answer]"), **NO_THINK}).encode()


def chat_head(extra: bytes = b"", *, line: bytes = b"POST /v1/chat/completions HTTP/1.1",
              host: bytes = b"127.0.0.1") -> bytes:
    return line + b"\r\nHost: " + host + b"\r\nContent-Type: application/json\r\n" + extra


def chunked(body: bytes) -> bytes:
    return b"%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n"


def exchange(port: int, data: bytes, *, follow: bytes = b"") -> tuple[bytes, bool]:
    """Send `data` in one write; the response bytes, and whether the server then closed the
    connection (checked by sending `follow`, a valid request, and reading until EOF or timeout)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(data)
        got = b""
        s.settimeout(5)
        try:
            while b"\r\n\r\n" not in got:
                part = s.recv(65536)
                if not part:
                    return got, True
                got += part
            time.sleep(0.2)
            with contextlib.suppress(OSError):
                s.sendall(follow or b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            while True:
                part = s.recv(65536)
                if not part:
                    return got, True
                got += part
        except TimeoutError:
            return got, False
        except (ConnectionResetError, BrokenPipeError):
            return got, True


MALFORMED = {
    "content-length and chunked": chat_head(b"Content-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n" % len(CHAT))
    + chunked(CHAT),
    "chunked folded onto a continuation line": chat_head(b"X-Pad: a\r\n Transfer-Encoding: chunked\r\n\r\n")
    + chunked(CHAT),
    "transfer-encoding value folded": chat_head(b"Transfer-Encoding:\r\n chunked\r\n\r\n") + chunked(CHAT),
    "bare LF line ends": b"GET /health HTTP/1.1\nHost: 127.0.0.1\n\n",
    "bare LF in one header": b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\nX-A: b\r\n\r\n",
    "HTTP/9.9": b"GET /health HTTP/9.9\r\nHost: 127.0.0.1\r\n\r\n",
    "HTTP/2.0 in a 1.1 head": b"GET /health HTTP/2.0\r\nHost: 127.0.0.1\r\n\r\n",
    "encoded slash in the path": chat_head(b"Content-Length: %d\r\n\r\n" % len(CHAT),
                                           line=b"POST /v1/chat%2Fcompletions HTTP/1.1") + CHAT,
    "encoded backslash in the path": b"GET /v1%5cmodels HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
    "host with text after the brackets": b"GET /v1/models HTTP/1.1\r\nHost: [::1]evil.example\r\n\r\n",
    "host with a bad port": b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1:80x\r\n\r\n",
    "98 KB head in one write": b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    + b"".join(b"X-Pad-%d: %s\r\n" % (i, b"a" * 1000) for i in range(98)) + b"\r\n",
    "blank lines, then content-length and chunked": b"\r\n\n\r\n" + chat_head(
        b"Content-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n" % len(CHAT)) + chunked(CHAT),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_framing_is_400_and_closed(strict_port, engine, case):
    engine.requests.clear()
    got, closed = exchange(strict_port, MALFORMED[case])
    assert got.startswith(b"HTTP/1.1 400 "), got[:200]
    assert got.count(b"HTTP/1.1 ") == 1 and closed, got  # nothing else was answered on it
    assert engine.requests == []


@pytest.mark.parametrize("data", [
    chat_head(b"Content-Length: %d\r\n\r\n" % len(CHAT)) + CHAT,
    chat_head(b"Transfer-Encoding: chunked\r\n\r\n") + chunked(CHAT),
    b"GET /health?next=%2Fa%2Fb HTTP/1.0\r\nHost: localhost:8000\r\n\r\n",  # encoded slashes in a query are data
], ids=["length", "chunked", "query-and-http-1.0"])
def test_well_formed_requests_are_served(strict_port, data):
    with socket.create_connection(("127.0.0.1", strict_port), timeout=10) as s:
        s.sendall(data)
        s.settimeout(10)
        got = s.recv(65536)
    assert got.startswith(b"HTTP/1.1 200 "), got[:300]


def test_a_pipelined_malformed_head_is_refused_too(strict_port):
    good = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    got, closed = exchange(strict_port, good + MALFORMED["content-length and chunked"])
    assert got.startswith(b"HTTP/1.1 200 ") and b"HTTP/1.1 400 " in got and closed, got


@pytest.mark.parametrize("host,ok", [
    ("127.0.0.1", True), ("localhost:8000", True), ("[::1]", True), ("[::1]:8000", True), ("llm.example.com", True),
    ("[::1]evil.example", False), ("[::1]:80x", False), ("[evil]", False), ("a b", False), ("a:b:c", False),
    ("a@b", False), ("127.0.0.1:²", False),
])
def test_host_syntax(host, ok):
    from chatsieve.server.security import _hostname, valid_host

    assert valid_host(host) is ok
    if not ok:
        assert _hostname(host) not in ("::1", "127.0.0.1", "localhost")


# ---------------------------------------------------------------- item 6: log forging


def test_request_text_cannot_forge_log_lines_and_query_values_are_not_logged(engine, tok, caplog):
    caplog.set_level(logging.INFO)
    cfg = config(engine.url, security=SecurityPolicy(api_keys=("k-123",), allowed_hosts=("127.0.0.1",)))
    with ServerThread(create_app(cfg, tokenizer=tok), access_log=False) as s:  # as `chatsieve serve` runs
        forged = "/v1/models%0D%0AINFO:%20chatsieve.server:%20forged%20line%E2%80%A8more"
        r = httpx.get(s.url + forged + "?api_key=SECRET-KEY-9&x=1", timeout=10)
        assert r.status_code == 401
        r = httpx.get(s.url + "/health?token=SECRET-TOKEN-7", timeout=10)
        assert r.status_code == 200
    messages = [rec.getMessage() for rec in caplog.records if rec.name.startswith("chatsieve")]
    assert any("refused: 401" in m for m in messages)
    assert all("\n" not in m and "\r" not in m and "\u2028" not in m for m in messages), messages
    assert not any("SECRET" in m for m in messages)
    access = [m for m in messages if "/health" in m or "/v1/models" in m]
    assert any("api_key=..." in m and "\\r\\n" in m for m in access), access
    assert any("token=..." in m and " 200 " in m for m in access), access


def test_serve_turns_off_uvicorns_access_log_which_prints_query_values():
    args = build_parser().parse_args(["--model-dir", "m", "--format", "qwen3", "--backend", "http://x"])
    assert uvicorn_options(args)["access_log"] is False


def test_max_concurrent_prompts_is_an_option():
    from chatsieve.server import config_from_args

    base = ["--model-dir", "m", "--format", "qwen3", "--backend", "http://x"]
    assert config_from_args(build_parser().parse_args(base), environ={}).max_concurrent_prompts == 8
    cfg = config_from_args(build_parser().parse_args([*base, "--max-concurrent-prompts", "2"]), environ={})
    assert cfg.max_concurrent_prompts == 2 and ServerConfig.from_json(cfg.to_json()).max_concurrent_prompts == 2


# ---------------------------------------------------------------- item 8: logprobs in streams


def test_a_streaming_parser_keeps_no_logprobs(tok):
    from chatsieve.events import TokenLogprob

    ids = tok.encode("The answer is 42, said the model, and it was right." * 20)
    lps = [TokenLogprob(i, tok.decode([i]), -0.5, tuple((str(j), -1.0) for j in range(20))) for i in ids]
    kept, sent = chatsieve.StreamParser("qwen3", tokenizer=tok, thinking=False), chatsieve.StreamParser(
        "qwen3", tokenizer=tok, thinking=False, keep_logprobs=False)
    out = {}
    for name, p in (("kept", kept), ("sent", sent)):
        events = [e for k in range(0, len(ids), 7) for e in p.feed(token_ids=ids[k:k + 7], logprobs=lps[k:k + 7])]
        events += p.finish()
        out[name] = [lp for e in events for lp in (getattr(e, "logprobs", None) or ())]
    assert out["kept"] == out["sent"] == lps  # the events carry every logprob either way
    assert kept.message.logprobs == lps and sent.message.logprobs is None
    assert kept.message.content == sent.message.content


@pytest.mark.parametrize("stream", [True, False])
def test_streamed_logprobs_still_reach_the_client(server, stream):
    body = {"messages": user("[answer]"), "logprobs": True, "top_logprobs": 2, "stream": stream, **NO_THINK}
    r = post(server, body)
    assert r.status_code == 200
    if stream:
        chunks = [json.loads(line[6:]) for line in r.text.splitlines()
                  if line.startswith("data: ") and line != "data: [DONE]"]
        entries = [e for c in chunks for ch in c["choices"] for e in ((ch.get("logprobs") or {}).get("content") or [])]
    else:
        entries = r.json()["choices"][0]["logprobs"]["content"]
    assert "".join(e["token"] for e in entries) == "The answer is 42."
    assert all(len(e["top_logprobs"]) == 2 for e in entries)


# ---------------------------------------------------------------- /metrics


def test_metrics_in_prometheus_format_behind_the_key(engine, tok):
    from prometheus_client.parser import text_string_to_metric_families

    cfg = config(engine.url, security=SecurityPolicy(api_keys=("k-1",), allowed_hosts=("127.0.0.1",)))
    auth = {"authorization": "Bearer k-1"}
    with ServerThread(create_app(cfg, tokenizer=tok)) as s:
        assert httpx.get(s.url + "/metrics", timeout=10).status_code == 401
        assert post(s.url, {"messages": user("[answer]"), **NO_THINK}, headers=auth).status_code == 200
        r = post(s.url, {"messages": user("[paced]"), "stream": True, **NO_THINK}, headers=auth)
        assert r.status_code == 200
        assert post(s.url, {"messages": user("[answer]"), "chat_template_kwargs": {"bos_token": "x"}},
                    headers=auth).status_code == 400
        assert httpx.get(s.url + "/v1/nothing%0Ahere", headers=auth, timeout=10).status_code == 404
        r = httpx.get(s.url + "/metrics", headers=auth, timeout=10)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    samples = {(x.name, tuple(sorted(x.labels.items()))): x.value
               for f in text_string_to_metric_families(r.text) for x in f.samples}
    route = "/v1/chat/completions"
    assert samples[("chatsieve_requests_total", (("route", route), ("status", "200")))] == 2
    assert samples[("chatsieve_requests_total", (("route", route), ("status", "400")))] == 1
    assert samples[("chatsieve_requests_total", (("route", "other"), ("status", "404")))] == 1
    assert samples[("chatsieve_refused_requests_total", (("reason", "invalid_template_variable"),))] == 1
    assert samples[("chatsieve_refused_requests_total", (("reason", "invalid_api_key"),))] == 1
    assert samples[("chatsieve_completion_tokens_total", ())] == 2 * len(tok.encode("The answer is 42.<|im_end|>"))
    assert samples[("chatsieve_prompt_tokens_total", ())] > 0
    assert samples[("chatsieve_time_to_first_token_seconds_count", ())] == 2
    assert samples[("chatsieve_inter_token_latency_seconds_count", ())] > 0
    assert samples[("chatsieve_in_flight_generations", ())] == 0
    assert samples[("chatsieve_engine_errors_total", ())] == 0


@settings(max_examples=50, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(_GAP_BUCKETS), st.floats(0, 100, allow_nan=False)), max_size=40))
def test_the_inter_token_histogram_exposes_what_prometheus_clients_histogram_does(values):
    """CheapHistogram (observed once per engine event) against prometheus_client's own Histogram:
    the same buckets (a value on a bound inside it), count and sum, in the same text."""
    from prometheus_client import CollectorRegistry, Histogram, generate_latest

    ours = Metrics()
    registry = CollectorRegistry()
    theirs = Histogram(ours.inter_token.name, ours.inter_token.documentation, buckets=_GAP_BUCKETS,
                       registry=registry)
    for v in values:
        ours.inter_token.observe(v)
        theirs.observe(v)

    def lines(text: bytes) -> list[str]:
        return [x for x in text.decode().splitlines() if "inter_token" in x and "_created" not in x]

    assert lines(ours.exposition()) == lines(generate_latest(registry))


def test_the_json_call_list_fallback_is_bounded_too(server, monkeypatch):
    # vLLM cannot name Qwen3's call tags in a grammar, so the calls go as a JSON Schema, which the
    # engine compiles: the same bound applies before it is sent
    from chatsieve import grammar

    monkeypatch.setattr(grammar, "MAX_SCHEMA_NODES", 20)
    body = {"messages": user("[answer]"), "tools": [deep_tool(14)], "tool_choice": "required", **NO_THINK}
    err = error_of(post(server, body), 400)
    assert err["code"] == "grammar_too_large"
