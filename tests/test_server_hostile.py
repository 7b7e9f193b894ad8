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
import uvicorn
from fake_engines import FakeEngine, Script, ServerThread
from models import model_path

import chatsieve
from chatsieve.protocols.openai_chat import RequestError, parse_chat_request
from chatsieve.server import build_parser, serve_main, uvicorn_options
from chatsieve.server.app import ServerConfig, create_app
from chatsieve.server.security import SecurityMiddleware, SecurityPolicy

MODEL = "hostile-model"
NO_THINK = {"chat_template_kwargs": {"enable_thinking": False}}


def user(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


@pytest.fixture(scope="module")
def tok():
    return chatsieve.load_tokenizer(model_path("qwen3"))


@pytest.fixture(scope="module")
def vocab(tok):
    return tok.hf.get_vocab_size(with_added_tokens=True)


@pytest.fixture(scope="module")
def engine(tok, vocab):
    enc = tok.encode
    scripts = {
        "[answer]": Script(enc("The answer is 42.<|im_end|>")),
        # the last id of the vocabulary: the fake engine's alternatives are id+1, id+2 (beyond it)
        "[edge]": Script([*enc("Edge"), vocab - 1, *enc("<|im_end|>")]),
    }
    engine = FakeEngine(lambda ids: tok.decode([i for i in ids if 0 <= i < vocab]), scripts)
    with ServerThread(engine.app) as server:
        engine.url = server.url
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
