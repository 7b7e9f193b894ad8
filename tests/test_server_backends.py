"""Engine clients against loopback fake vLLM / SGLang / llama.cpp servers replaying real Qwen3 ids."""

from __future__ import annotations

import asyncio
import contextlib
import lzma
import socket

import pytest
from models import DEV_INSTALL, require_module

require_module("starlette", DEV_INSTALL)
require_module("uvicorn", DEV_INSTALL)
tokenizers = require_module("tokenizers", DEV_INSTALL)

from fake_engines import FakeEngine, Script, fake_logprob, fake_top  # noqa: E402
from models import model_path  # noqa: E402

from chatsieve.server.backends import (  # noqa: E402
    Backend,
    BackendError,
    GenerationRequest,
    SglangReader,
    VllmReader,
)
from chatsieve.server.client import EngineHTTP  # noqa: E402

KINDS = ("vllm", "sglang", "llamacpp")
IM_END = 151645


@pytest.fixture(scope="module")
def qwen():
    path = model_path("qwen3/tokenizer.json.xz")
    return tokenizers.Tokenizer.from_str(lzma.open(path, "rt", encoding="utf-8").read())


@pytest.fixture(scope="module")
def answer_ids(qwen):
    return qwen.encode(
        "<think>\nhm</think>\n\nThe answer is 42, 你好 🚀.<|im_end|>", add_special_tokens=False
    ).ids


@pytest.fixture(scope="module")
def engine(qwen, answer_ids):
    def decode(ids):
        return qwen.decode(list(ids), skip_special_tokens=False)

    scripts = {
        "[case:b1]": Script(answer_ids, batch=1),
        "[case:b3]": Script(answer_ids, batch=3),
        "[case:slow]": Script(answer_ids, batch=1, delay=0.05),
        "[case:all]": Script(answer_ids, batch=len(answer_ids)),
        "[case:status]": Script(answer_ids, fail="status"),
        "[case:reject]": Script(answer_ids, fail="reject"),
        "[case:garbage]": Script(answer_ids, fail="garbage"),
        "[case:truncate]": Script(answer_ids, batch=2, fail="truncate"),
        "[case:error]": Script(answer_ids, batch=2, fail="error_event"),
        "[case:junk-after-stop]": Script(answer_ids + qwen.encode("JUNK").ids, batch=2),
    }
    with FakeEngine(decode, scripts).serving() as fake:
        yield fake


def _run(kind, url, qwen, req):
    async def go():
        client = EngineHTTP(read_timeout=10)
        try:
            backend = Backend(kind, url, client, lambda i: qwen.decode([i], skip_special_tokens=False))
            return [b async for b in backend.generate(req)]
        finally:
            await client.aclose()

    return asyncio.run(go())


def _prompt(qwen, case):
    return qwen.encode(f"<|im_start|>user\n{case} hi<|im_end|>\n<|im_start|>assistant\n").ids


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("case", ["[case:b1]", "[case:b3]", "[case:all]"])
def test_ids_arrive_whole_in_order(engine, qwen, answer_ids, kind, case):
    batches = _run(kind, engine.url, qwen, GenerationRequest(_prompt(qwen, case), stop_token_ids=(IM_END,)))
    ids = [t for b in batches for t in b.token_ids]
    assert ids == answer_ids
    assert batches[-1].finish_reason == "stop"
    assert all(b.finish_reason is None for b in batches[:-1])


@pytest.mark.parametrize("cumulative", [True, False])
def test_sglang_cumulative_and_incremental_output_ids(engine, qwen, answer_ids, cumulative):
    engine.sglang_cumulative = cumulative
    try:
        req = GenerationRequest(_prompt(qwen, "[case:b3]"), top_logprobs=1)
        batches = _run("sglang", engine.url, qwen, req)
    finally:
        engine.sglang_cumulative = False
    assert [t for b in batches for t in b.token_ids] == answer_ids
    lps = [lp for b in batches for lp in (b.logprobs or ())]
    assert [lp.token_id for lp in lps] == answer_ids
    assert [lp.logprob for lp in lps] == [fake_logprob(t) for t in answer_ids]


@pytest.mark.parametrize("kind", KINDS)
def test_logprobs_follow_their_tokens(engine, qwen, answer_ids, kind):
    req = GenerationRequest(_prompt(qwen, "[case:b3]"), top_logprobs=2)
    batches = _run(kind, engine.url, qwen, req)
    lps = [lp for b in batches for lp in (b.logprobs or ())]
    assert [lp.token_id for lp in lps] == answer_ids
    assert [lp.logprob for lp in lps] == [fake_logprob(t) for t in answer_ids]
    for lp in lps:
        assert lp.token == qwen.decode([lp.token_id], skip_special_tokens=False)
        want = [(qwen.decode([a], skip_special_tokens=False), v) for a, v in fake_top(lp.token_id, 2)]
        assert list(lp.top) == want


@pytest.mark.parametrize("kind", KINDS)
def test_max_tokens_gives_length(engine, qwen, answer_ids, kind):
    req = GenerationRequest(_prompt(qwen, "[case:b3]"), max_tokens=5)
    batches = _run(kind, engine.url, qwen, req)
    assert [t for b in batches for t in b.token_ids] == answer_ids[:5]
    assert batches[-1].finish_reason == "length"


def test_payloads_carry_ids_sampling_and_stop_ids(engine, qwen):
    engine.requests.clear()
    req = GenerationRequest(
        _prompt(qwen, "[case:all]"),
        max_tokens=50,
        temperature=0.3,
        top_p=0.9,
        seed=7,
        stop_token_ids=(IM_END, 151643),
    )
    for kind in KINDS:
        _run(kind, engine.url, qwen, req)
    by_path = dict(engine.requests)
    v = by_path["/v1/completions"]
    assert v["prompt"] == req.prompt_token_ids and v["stream"] is True
    assert v["return_token_ids"] is True and v["skip_special_tokens"] is False
    assert v["stop_token_ids"] == [IM_END, 151643]
    assert (v["max_tokens"], v["temperature"], v["top_p"], v["seed"]) == (50, 0.3, 0.9, 7)
    assert "stop" not in v  # stop strings are cut locally
    s = by_path["/generate"]
    assert s["input_ids"] == req.prompt_token_ids and s["stream"] is True
    sp = s["sampling_params"]
    assert sp["stop_token_ids"] == [IM_END, 151643] and sp["skip_special_tokens"] is False
    assert (sp["max_new_tokens"], sp["temperature"], sp["top_p"], sp["sampling_seed"]) == (50, 0.3, 0.9, 7)
    c = by_path["/completion"]
    assert c["prompt"] == req.prompt_token_ids and c["return_tokens"] is True and c["stream"] is True
    assert (c["n_predict"], c["temperature"], c["top_p"], c["seed"]) == (50, 0.3, 0.9, 7)


def test_unlimited_max_tokens_is_explicit(engine, qwen):
    engine.requests.clear()
    for kind in KINDS:
        _run(kind, engine.url, qwen, GenerationRequest(_prompt(qwen, "[case:all]")))
    by_path = dict(engine.requests)
    assert by_path["/v1/completions"]["max_tokens"] is None  # vLLM's own default would be 16
    assert by_path["/generate"]["sampling_params"]["max_new_tokens"] is None
    assert by_path["/completion"]["n_predict"] == -1


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    "case,message",
    [
        ("[case:status]", "HTTP 500: engine exploded"),
        ("[case:garbage]", "invalid JSON"),
        ("[case:truncate]", "closed the stream before finishing"),
        ("[case:error]", "reported an error"),
    ],
)
def test_engine_failures_raise_backend_error(engine, qwen, kind, case, message):
    with pytest.raises(BackendError, match=message):
        _run(kind, engine.url, qwen, GenerationRequest(_prompt(qwen, case)))


@pytest.mark.parametrize("kind", KINDS)
def test_unreachable_engine_raises_backend_error(qwen, kind):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(BackendError, match="cannot reach"):
        _run(kind, f"http://127.0.0.1:{port}", qwen, GenerationRequest([1, 2, 3]))


def test_sglang_reader_tells_cumulative_from_incremental():
    def text(i):
        return str(i)

    cum = SglangReader(text)
    # an ambiguous first event, then cumulative evidence via completion_tokens
    assert cum.read({"output_ids": [5], "meta_info": {"completion_tokens": 1}}).token_ids == (5,)
    assert cum.read({"output_ids": [5, 5], "meta_info": {"completion_tokens": 2}}).token_ids == (5,)
    assert cum.mode == "cumulative"
    assert cum.read({"output_ids": [5, 5, 7], "meta_info": {"completion_tokens": 3}}).token_ids == (7,)

    inc = SglangReader(text)
    inc.read({"output_ids": [5], "meta_info": {"completion_tokens": 1}})
    # [5, 6] starts with what was seen, but completion_tokens says it is new
    assert inc.read({"output_ids": [5, 6], "meta_info": {"completion_tokens": 3}}).token_ids == (5, 6)
    assert inc.mode == "incremental"

    bad = SglangReader(text)
    bad.read({"output_ids": [1, 2], "meta_info": {"completion_tokens": 2}})
    with pytest.raises(BackendError):
        bad.read({"output_ids": [9], "meta_info": {"completion_tokens": 9}})


def test_vllm_reader_rejects_text_without_ids():
    r = VllmReader(str)
    with pytest.raises(BackendError, match="return_token_ids"):
        r.read({"choices": [{"index": 0, "text": "hi", "finish_reason": None}]})
    with pytest.raises(BackendError, match="not a list of integers"):
        r.read({"choices": [{"index": 0, "text": "hi", "token_ids": ["a"], "finish_reason": None}]})


def test_engine_refusal_keeps_its_status(engine, qwen):
    with pytest.raises(BackendError, match="maximum context length") as info:
        _run("vllm", engine.url, qwen, GenerationRequest(_prompt(qwen, "[case:reject]")))
    assert info.value.status == 400


def test_wrong_route_hints_at_backend_kind(engine, qwen):
    with pytest.raises(BackendError, match="is --backend-kind right") as info:
        _run("vllm", engine.url + "/elsewhere", qwen, GenerationRequest(_prompt(qwen, "[case:b1]")))
    assert info.value.status == 404


@pytest.mark.parametrize("kind", KINDS)
def test_finished_generations_reuse_one_engine_connection(engine, qwen, answer_ids, kind):
    async def go():
        client = EngineHTTP(read_timeout=10)
        backend = Backend(kind, engine.url, client, lambda i: qwen.decode([i], skip_special_tokens=False))
        req = GenerationRequest(_prompt(qwen, "[case:b3]"), stop_token_ids=(IM_END,))
        for _ in range(4):
            assert [t async for b in backend.generate(req) for t in b.token_ids] == answer_ids
        assert (client.opened, client.idle()) == (1, 1)
        # leaving a generation early (a local stop, a client gone) closes its connection: the abort
        # (paced, so the answer cannot have arrived whole in the first read, which makes the
        # connection reusable after all)
        slow = GenerationRequest(_prompt(qwen, "[case:slow]"), stop_token_ids=(IM_END,))
        async with contextlib.aclosing(backend.generate(slow)) as stream:
            async for _ in stream:
                break
        assert client.idle() == 0
        await client.aclose()

    asyncio.run(go())


def _run_pushed(kind, url, qwen, req, take, read_timeout=10.0):
    """`Backend.generate` with a push: (how, batch) in arrival order, "pushed" for the batches
    `take` took in the connection's callback, "yielded" for the others."""
    seen: list[tuple[str, object]] = []

    def push(batch):
        if not take(batch):
            return False
        seen.append(("pushed", batch))
        return True

    async def go():
        client = EngineHTTP(read_timeout=read_timeout)
        try:
            backend = Backend(kind, url, client, lambda i: qwen.decode([i], skip_special_tokens=False))
            async for b in backend.generate(req, push):
                seen.append(("yielded", b))
        finally:
            await client.aclose()
        return seen

    return asyncio.run(go())


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("policy", ["all", "decline the third", "none"])
def test_pushed_and_yielded_batches_together_are_the_stream(engine, qwen, answer_ids, kind, policy):
    count = iter(range(1000))
    take = {"all": lambda b: True, "decline the third": lambda b: next(count) != 2, "none": lambda b: False}[policy]
    req = GenerationRequest(_prompt(qwen, "[case:slow]"), stop_token_ids=(IM_END,))
    seen = _run_pushed(kind, engine.url, qwen, req, take)
    assert [t for _, b in seen for t in b.token_ids] == answer_ids  # none lost, none twice, in order
    how, last = seen[-1]
    assert (how, last.finish_reason) == ("yielded", "stop")  # the end is never pushed
    pushed = [how == "pushed" for how, _ in seen]
    # paced, so the pushes came from the connection's callback; after a decline, none
    want = {"all": len(seen) - 1, "decline the third": 2, "none": 0}[policy]
    assert pushed == [True] * want + [False] * (len(seen) - want)


@pytest.mark.parametrize("kind", KINDS)
def test_a_push_that_raises_fails_the_stream_in_the_readers_task(engine, qwen, kind):
    count = iter(range(1000))

    def take(batch):
        if next(count) == 2:
            raise BackendError("the push failed")
        return True

    req = GenerationRequest(_prompt(qwen, "[case:slow]"), stop_token_ids=(IM_END,))
    with pytest.raises(BackendError, match="the push failed"):
        _run_pushed(kind, engine.url, qwen, req, take)


@pytest.mark.parametrize("kind", KINDS)
def test_pushed_bytes_move_the_read_timeout_on(engine, qwen, answer_ids, kind):
    # 50 ms between tokens, a second in all: a 0.3 s timeout counts from the last byte pushed
    req = GenerationRequest(_prompt(qwen, "[case:slow]"), stop_token_ids=(IM_END,))
    seen = _run_pushed(kind, engine.url, qwen, req, lambda b: True, read_timeout=0.3)
    assert [t for _, b in seen for t in b.token_ids] == answer_ids
    with pytest.raises(BackendError, match="timed out"):  # and a stall still times out
        _run_pushed(kind, engine.url, qwen, GenerationRequest(_prompt(qwen, "[case:slow]")), lambda b: True,
                    read_timeout=0.02)
