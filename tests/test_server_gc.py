"""Cyclic garbage collection paused while requests are parsed and prepared
(`chatsieve.server.tuning.no_cycle_collection`): overlapping holds, the bounds that let it run
again under steady traffic, and every route's requests, small (prepared on the event loop) and
large (in a thread), prepared with it paused and answered with it running again."""

from __future__ import annotations

import gc
import threading
import time

import pytest
from models import DEV_INSTALL, require_module

require_module("uvicorn", DEV_INSTALL)
require_module("openai", DEV_INSTALL)
require_module("anthropic", DEV_INSTALL)

from fake_engines import FakeEngine, Script, ServerThread  # noqa: E402
from models import model_path, tokenizer  # noqa: E402
from three_routes import ROUTES, ask  # noqa: E402

from chatsieve.server import service as service_module  # noqa: E402
from chatsieve.server import tuning  # noqa: E402
from chatsieve.server.app import create_app  # noqa: E402
from chatsieve.server.config import ServerConfig  # noqa: E402
from chatsieve.server.intake import OFF_LOOP_BYTES  # noqa: E402

MODEL = "gc-model"


@pytest.fixture
def collector():
    """Collection on at the start; no hold left and the caller's setting back at the end."""
    was = gc.isenabled()
    gc.enable()
    try:
        yield
        assert tuning._gc_holds == 0 and tuning._gc_large_holds == 0
    finally:
        gc.enable() if was else gc.disable()


def test_paused_until_the_last_of_overlapping_holds_ends(collector):
    first, second = tuning.no_cycle_collection(), tuning.no_cycle_collection(large=True)
    first.__enter__()
    assert not gc.isenabled()
    second.__enter__()
    first.__exit__(None, None, None)
    assert not gc.isenabled(), "resumed while a request was still held"
    second.__exit__(None, None, None)
    assert gc.isenabled()


def test_left_paused_where_it_was_paused_before(collector):
    gc.disable()
    with tuning.no_cycle_collection():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_resumed_past_max_young_objects_unless_a_large_request_is_held(collector, monkeypatch):
    monkeypatch.setattr(tuning, "MAX_YOUNG", 1000)
    with tuning.no_cycle_collection(large=True):
        kept = [[] for _ in range(5000)]  # tracked objects the collector counts while paused
        assert gc.get_count()[0] > tuning.MAX_YOUNG
        with tuning.no_cycle_collection():
            assert not gc.isenabled(), "resumed, and so walked, a large request being prepared"
    assert gc.isenabled()
    with tuning.no_cycle_collection():
        gc.collect()
        assert gc.get_count()[0] < tuning.MAX_YOUNG
        with tuning.no_cycle_collection():
            assert not gc.isenabled()
        more = [[] for _ in range(5000)]
        assert gc.get_count()[0] > tuning.MAX_YOUNG
        with tuning.no_cycle_collection():
            assert gc.isenabled(), "still paused with more than MAX_YOUNG new objects"
        assert gc.isenabled()
    assert gc.isenabled()
    del kept, more


def test_a_large_request_pauses_it_again_where_the_young_bound_resumed_it(collector, monkeypatch):
    monkeypatch.setattr(tuning, "MAX_YOUNG", 1000)
    with tuning.no_cycle_collection():
        gc.collect()
        kept = [[] for _ in range(5000)]
        with tuning.no_cycle_collection():
            assert gc.isenabled()  # steady small traffic: the young bound resumed it
            with tuning.no_cycle_collection(large=True):
                assert not gc.isenabled(), "a large body parsed with collection running"
        assert not gc.isenabled()  # (until the holds end, or the young bound resumes it again)
        more = [[] for _ in range(5000)]
        with tuning.no_cycle_collection():
            assert gc.isenabled()
    assert gc.isenabled()
    del kept, more


def test_resumed_past_max_gc_off_seconds_even_with_a_large_request(collector, monkeypatch):
    monkeypatch.setattr(tuning, "MAX_GC_OFF", 0.01)
    with tuning.no_cycle_collection(large=True):
        with tuning.no_cycle_collection():
            assert not gc.isenabled()
        time.sleep(0.02)
        with tuning.no_cycle_collection():
            assert gc.isenabled()
    assert gc.isenabled()


# ---------------------------------------------------------------- through the server


@pytest.fixture(scope="module")
def tok():
    return tokenizer("qwen3")


@pytest.fixture(scope="module")
def server(tok):
    with FakeEngine(tok.decode, {"": Script(tok.encode("Done.<|im_end|>"))}).serving() as engine:
        config = ServerConfig(model_dir=model_path("qwen3"), format="qwen3", backend_url=engine.url,
                              served_model_name=MODEL, warm_up=False, max_model_len=32768)
        with ServerThread(create_app(config, tokenizer=tok)) as srv:
            yield srv


@pytest.mark.parametrize("size", ["small", "large"])
@pytest.mark.parametrize("route", ROUTES)
def test_every_route_prepares_with_collection_paused_and_answers_with_it_running(server, route, size, collector,
                                                                                 monkeypatch):
    seen: list[tuple[bool, bool]] = []  # (collection on, on the event loop) in each preparation
    prepare = service_module.ChatService._prepare

    def recording(self, req):
        seen.append((gc.isenabled(), threading.current_thread() is server.thread))
        return prepare(self, req)

    monkeypatch.setattr(service_module.ChatService, "_prepare", recording)
    system = "You review code. " * (OFF_LOOP_BYTES // 16 if size == "large" else 4)
    answer = ask(route, server.url, "Review the change.", model=MODEL, stream=True, system=system, max_tokens=50)
    assert answer.content + answer.reasoning == "Done.", answer  # (as reasoning where thinking is on)
    assert seen and not any(on for on, _ in seen), f"collection ran during a preparation: {seen}"
    # a small request is tried on the event loop first (a prompt the cache does not hold yet is then
    # prepared again in a thread), a large one, and every Responses request (its parse reads the
    # response store), only in a thread: both paths were held
    on_loop = [loop for _, loop in seen]
    assert on_loop[0] if size == "small" and route != "responses" else not any(on_loop), seen
    assert gc.isenabled(), "collection still paused after the answer"
