"""Token mode end to end with the real Qwen3 tokenizer: the gate, stop conditions,
finish reasons and logprobs (issue 3's must-pass list beyond the fixtures)."""

from __future__ import annotations

import json
import warnings

import models
import pytest

from chatsieve import ContentDelta, StreamParser, TokenLogprob, ToolCallStart, parse
from chatsieve.fixtures import encode_spelled

CALL = '{"name": "get_weather", "arguments": {"city": "Paris"}}'


@pytest.fixture(scope="module")
def qwen():
    return models.tokenizer("qwen3")


def run(tok, ids, size, **kw):
    p = StreamParser("qwen3", tokenizer=tok, thinking=False, **kw)
    events = []
    for k in range(0, len(ids), size):
        events += p.feed(token_ids=ids[k : k + size])
    events += p.finish(kw.pop("finish_reason", None))
    return p, events


SIZES = [1, 3, 10_000]


def test_every_delimiter_is_gated_by_its_id(qwen):
    p = StreamParser("qwen3", tokenizer=qwen)
    assert p.gated["<tool_call>"] == 151657
    assert p.gated["</tool_call>"] == 151658
    assert p.gated["<think>"] == 151667
    assert all(v is not None for v in p.gated.values())


def test_a_delimiter_that_is_no_token_falls_back_to_text_with_a_warning(qwen):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        p = StreamParser("gemma4", tokenizer=qwen)
    assert p.gated["<|tool_call>"] is None
    assert any("not single tokens" in str(w.message) for w in caught)
    # text matching still works for the ungated delimiter
    ids = qwen.encode('<|tool_call>call:f{a:1}<tool_call|>')
    p.feed(token_ids=ids)
    p.finish()
    assert [c.name for c in p.message.tool_calls] == ["f"]


@pytest.mark.parametrize("size", SIZES)
def test_incomplete_utf8_before_a_genuine_id_does_not_flip_the_gate(qwen, size):
    lone = qwen.token_to_id("â")  # the first byte of a 3-byte character, alone
    assert lone is not None
    ids = encode_spelled(qwen, "<tool_call>") + [lone] + qwen.encode(f"<tool_call>{CALL}</tool_call>")
    p, _ = run(qwen, ids, size)
    m = p.message
    assert [c.name for c in m.tool_calls] == ["get_weather"]
    assert m.content == qwen.decode(encode_spelled(qwen, "<tool_call>") + [lone])
    assert "<tool_call>" in m.content and m.content.endswith("\ufffd")


@pytest.mark.parametrize("size", SIZES)
def test_two_parallel_genuine_calls_in_one_batch(qwen, size):
    ids = qwen.encode(f"<tool_call>{CALL}</tool_call>\n<tool_call>{CALL.replace('Paris', 'Rome')}</tool_call>")
    p, _ = run(qwen, ids, size)
    assert [json.loads(c.arguments)["city"] for c in p.message.tool_calls] == ["Paris", "Rome"]
    assert p.message.finish_reason == "tool_calls"


@pytest.mark.parametrize("size", SIZES)
def test_gate_holds_with_argument_streaming(qwen, size):
    ids = encode_spelled(qwen, f"<tool_call>{CALL}</tool_call>") + qwen.encode("ok")
    p, events = run(qwen, ids, size, stream_arguments=True)
    assert not any(isinstance(e, ToolCallStart) for e in events)
    assert p.message.finish_reason == "stop"


@pytest.mark.parametrize("size", SIZES)
def test_stop_token_ends_generation_and_never_shows(qwen, size):
    ids = qwen.encode("Hello there.<|im_end|>ignored text")
    p, _ = run(qwen, ids, size, stop_token_ids=[151645])
    assert p.message.content == "Hello there."
    assert p.stopped and p.message.finish_reason == "stop"
    assert p.message.diagnostics == []


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("include", [False, True])
def test_stop_string_cuts_at_first_match(qwen, size, include):
    ids = qwen.encode("one, two, STOP here, STOP again")
    p, _ = run(qwen, ids, size, stop=["STOP"], include_stop_str_in_output=include)
    assert p.message.content == ("one, two, STOP" if include else "one, two,")
    assert p.message.finish_reason == "stop"


@pytest.mark.parametrize("size", SIZES)
def test_stop_string_starting_with_a_delimiter_does_not_swallow_a_call(qwen, size):
    stop = ['<tool_call>{"name": "forbidden"']
    ids = qwen.encode(f"<tool_call>{CALL}</tool_call>")
    p, _ = run(qwen, ids, size, stop=stop)
    assert [c.name for c in p.message.tool_calls] == ["get_weather"]
    ids = qwen.encode('Before.<tool_call>{"name": "forbidden", "arguments": {}}</tool_call>')
    p, _ = run(qwen, ids, size, stop=stop)
    assert p.message.tool_calls == [] and p.message.content == "Before." and p.stopped


def test_finish_reason_from_the_engine_and_for_calls(qwen):
    assert parse("partial answ", "hermes", finish_reason="length").finish_reason == "length"
    assert parse("done", "hermes").finish_reason == "stop"
    assert parse(f"<tool_call>{CALL}</tool_call>", "hermes", finish_reason="stop").finish_reason == "tool_calls"


def _lp(tok, ids):
    return [TokenLogprob(i, tok.decode([i]), -0.01 * (k + 1)) for k, i in enumerate(ids)]


@pytest.mark.parametrize("size", SIZES)
def test_logprobs_follow_their_text_and_drop_with_suppressed_tokens(qwen, size):
    ids = qwen.encode(f"Sure thing.<tool_call>{CALL}</tool_call>Bye<|im_end|>")
    lps = _lp(qwen, ids)
    p = StreamParser("qwen3", tokenizer=qwen, thinking=False)
    events = []
    for k in range(0, len(ids), size):
        events += p.feed(token_ids=ids[k : k + size], logprobs=lps[k : k + size])
    events += p.finish()
    got = [lp.token_id for e in events if isinstance(e, ContentDelta) and e.logprobs for lp in e.logprobs]
    visible = qwen.encode("Sure thing.") + qwen.encode("Bye")
    assert got == visible
    assert [lp.token_id for lp in p.message.logprobs] == visible
    # each delta carries exactly the logprobs of the tokens whose text it shows
    for e in events:
        if isinstance(e, ContentDelta) and e.logprobs:
            assert "".join(lp.token for lp in e.logprobs).strip() in e.text or e.text in "".join(
                lp.token for lp in e.logprobs
            )


def test_logprobs_cut_with_a_stop_string(qwen):
    ids = qwen.encode("alpha beta gamma delta")
    lps = _lp(qwen, ids)
    p = StreamParser("hermes", tokenizer=qwen, stop=[" gamma"])
    p.feed(token_ids=ids, logprobs=lps)
    p.finish()
    assert p.message.content == "alpha beta"
    assert [lp.token for lp in p.message.logprobs] == [qwen.decode([i]) for i in qwen.encode("alpha beta")]


def test_engine_text_with_ids_is_accepted(qwen):
    ids = qwen.encode(f"Hi<tool_call>{CALL}</tool_call>")
    p = StreamParser("hermes", tokenizer=qwen)
    for i in ids:
        p.feed(qwen.decode([i]), token_ids=[i])
    p.finish()
    assert p.message.content == "Hi" and len(p.message.tool_calls) == 1


def test_token_ids_without_a_tokenizer_is_a_clear_error():
    with pytest.raises(ValueError, match="need a tokenizer"):
        StreamParser("qwen3").feed(token_ids=[1, 2])
