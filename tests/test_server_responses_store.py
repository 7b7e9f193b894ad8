"""Stored responses through `chatsieve serve` as a user runs it: one key cannot see another's
responses, a restart keeps them (previous_response_id continues across it), the count bound
evicts the oldest, and two worker processes share one database without corrupting it."""

from __future__ import annotations

import concurrent.futures
import contextlib
import sqlite3

import openai
import pytest
from fake_engines import FakeEngine, Script, ServerThread, serve_process
from models import chat_tokenizer, model_path

MODEL = "store-model"
OFF = {"effort": "none"}


@pytest.fixture(scope="module")
def engine():
    tok = chat_tokenizer("qwen3")
    scripts = {
        "[store:hello]": Script(tok.encode("Hello there.<|im_end|>")),
        "[store:again, longer key]": Script(tok.encode("Again, hello.<|im_end|>")),
    }
    fake = FakeEngine(tok.decode, scripts)
    with ServerThread(fake.app) as server:
        yield fake, server.url


@contextlib.contextmanager
def serve(engine_url: str, *argv: str):
    args = ["--model-dir", str(model_path("qwen3")), "--format", "qwen3", "--backend", engine_url]
    with serve_process(*args, "--served-model-name", MODEL, "--log-level", "warning", *argv) as (_, _, url):
        yield url


def client(url: str, key: str = "none") -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key=key, max_retries=0, timeout=60)


def hello(c: openai.OpenAI, **kw):
    return c.responses.create(model=MODEL, input="[store:hello] hi", reasoning=OFF, **kw)


def test_a_key_cannot_see_another_keys_response(engine, tmp_path):
    _, engine_url = engine
    with serve(
        engine_url, "--api-key", "sk-alice", "--api-key", "sk-bob", "--response-store", str(tmp_path / "r.db")
    ) as url:
        alice, bob = client(url, "sk-alice"), client(url, "sk-bob")
        r = hello(alice)
        assert alice.responses.retrieve(r.id).output_text == "Hello there."
        for attempt in (
            lambda: bob.responses.retrieve(r.id),
            lambda: bob.responses.input_items.list(r.id),
            lambda: bob.responses.delete(r.id),
            lambda: bob.responses.create(
                model=MODEL, previous_response_id=r.id, input="[store:again, longer key]", reasoning=OFF
            ),
        ):
            with pytest.raises(openai.NotFoundError) as info:
                attempt()
            assert r.id in info.value.body["message"] and info.value.body["code"] == "not_found"
        assert alice.responses.retrieve(r.id).id == r.id  # bob's delete removed nothing
        with pytest.raises(openai.AuthenticationError):
            client(url, "sk-mallory").responses.retrieve(r.id)
    db = (tmp_path / "r.db").read_bytes()
    assert b"sk-alice" not in db and b"sk-bob" not in db


def test_restart_keeps_responses_and_continues_them(engine, tmp_path):
    fake, engine_url = engine
    store = str(tmp_path / "kept.db")
    with serve(engine_url, "--response-store", store) as url:
        first = hello(client(url))
    with serve(engine_url, "--response-store", store) as url:  # a new process, the same file
        c = client(url)
        assert c.responses.retrieve(first.id).output_text == "Hello there."
        second = c.responses.create(
            model=MODEL, previous_response_id=first.id, input="[store:again, longer key]", reasoning=OFF
        )
        assert second.output_text == "Again, hello." and second.previous_response_id == first.id
    prompt = fake.decode(fake.requests[-1][1]["prompt"])
    assert (
        prompt.index("[store:hello]")
        < prompt.index("Hello there.")
        < prompt.index("[store:again, longer key]")
    )


def test_count_bound_evicts_the_oldest(engine, tmp_path):
    _, engine_url = engine
    with serve(
        engine_url, "--response-store", str(tmp_path / "small.db"), "--response-store-max", "2"
    ) as url:
        c = client(url)
        ids = [hello(c).id for _ in range(3)]
        with pytest.raises(openai.NotFoundError):
            c.responses.retrieve(ids[0])
        assert [c.responses.retrieve(i).id for i in ids[1:]] == ids[1:]


def test_two_workers_share_the_store(engine, tmp_path):
    _, engine_url = engine
    store = tmp_path / "shared.db"
    with serve(engine_url, "--response-store", str(store), "--workers", "2") as url:
        c = client(url)
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            ids = list(pool.map(lambda _: hello(c).id, range(40)))
        # each retrieve may land on either worker: both see every row
        assert all(c.responses.retrieve(i).output_text == "Hello there." for i in ids)
    db = sqlite3.connect(store)
    assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert db.execute("SELECT COUNT(*) FROM responses").fetchone() == (40,)


def test_store_option_errors_are_one_line(tmp_path, capsys):
    from chatsieve.server import serve_main

    base = ["--model-dir", str(model_path("qwen3")), "--format", "qwen3", "--backend", "http://127.0.0.1:9"]
    (tmp_path / "junk.db").write_bytes(b"not a database" * 200)
    assert serve_main([*base, "--response-store", str(tmp_path / "junk.db")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("chatsieve serve: error: --response-store") and "junk.db" in err
    assert serve_main([*base, "--response-store-max", "0"]) == 2
    assert "--response-store-max" in capsys.readouterr().err
