"""Fuzzing every registered family: random mixes of its control markers, label
words and text never raise, never show a control marker's text, and stream the
same as batch."""

from __future__ import annotations

import models
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chatsieve import StreamParser, formats, parse
from chatsieve.fixtures import encode_spelled, normalized

WORDS = [
    "thought", "thought\n", "tho", "\n", " ", "call:", "get_weather", "{", "}", ":", ",", '"', "[", "]",
    "name", "arguments", '{"name": "f", "arguments": {"a": 1}}', "<", "|", ">", "=", "x", "你好", "🙂",
    "true", "12", "functions.f:0", "to=functions.f", "analysis", "final", "commentary", "json",
    "<function=f>", "<parameter=a>", "</parameter>", "</function>", "<arg_key>", "</arg_key>", "<arg_value>",
    "</arg_value>", "function", "```json\n", "\n```", "f(a=1)", "[ARGS]", "None", "'x'", ";",
    "```tool_code\n", "```", "[f(a=1)]",
]  # fmt: skip
TOOLS = [{"name": "f", "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}}]
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def items_for(spec):
    markers = st.sampled_from(spec.delimiters).map(lambda m: (m, True)) if spec.delimiters else st.nothing()
    words = st.sampled_from(WORDS).map(lambda w: (w, False))
    return st.lists(st.one_of(markers, words, words), max_size=40)


def is_subsequence(small: str, big: str) -> bool:
    it = iter(big)
    return all(c in it for c in small)


def check_visible_text(msg, items, spec) -> None:
    # inside a reasoning block a call marker is reasoning text, unless calls may sit there
    thought = set() if spec.calls_inside_reasoning else {*spec.call_open, *spec.call_close, *spec.inner}
    for name in ("content", "reasoning"):
        # a call's tag outside any call region may be text (FormatSpec.literal_outside)
        allowed = (thought if name == "reasoning" else set()) | set(spec.literal_outside)
        # gpt-oss joins messages one per line (docs/policies.md): a newline may stand where a marker was
        joiner = "\n" if spec.name == "gpt_oss" else ""
        plain = "".join(t if not is_marker or t in allowed else joiner for t, is_marker in items)
        value = getattr(msg, name) or ""
        assert is_subsequence(value, plain), f"{name} {value!r} shows text that was not plain text"


@pytest.mark.parametrize("name", formats.names())
@SETTINGS
@given(data=st.data())
def test_text_mode_fuzz(name, data):
    spec = formats.get(name)
    items = data.draw(items_for(spec), label="items")
    thinking = data.draw(st.sampled_from([None, True, False]), label="thinking")
    stream = data.draw(st.booleans(), label="stream_arguments")
    text = "".join(t for t, _ in items)
    batch = parse(text, name, tools=TOOLS, thinking=thinking, stream_arguments=stream)
    check_visible_text(batch, items, spec)
    cuts = sorted(set(data.draw(st.lists(st.integers(0, len(text)), max_size=8), label="cuts")))
    p = StreamParser(name, tools=TOOLS, thinking=thinking, stream_arguments=stream)
    for a, b in zip([0, *cuts], [*cuts, len(text)]):
        p.feed(text[a:b])
    p.finish()
    assert normalized(p.message) == normalized(batch)


TOKEN_FAMILIES = [
    ("gemma4", "gemma4"),
    ("qwen3", "qwen3"),
    ("deepseek_r1", "deepseek"),
    ("deepseek_v31", "deepseek"),
    ("kimi_k2", "kimi_k2"),
    ("gpt_oss", "gpt-oss"),
    ("gemma3", "gemma3"),
]


@pytest.mark.parametrize(("name", "tok_name"), TOKEN_FAMILIES)
@SETTINGS
@given(data=st.data())
def test_token_mode_fuzz(name, tok_name, data):
    tok = models.tokenizer(tok_name)
    spec = formats.get(name)
    drawn = data.draw(items_for(spec), label="items")
    # a delimiter that is no single token of this tokenizer can only arrive as text
    items = [(t, is_marker and tok.single_token_id(t) is not None) for t, is_marker in drawn]
    ids: list[int] = []
    for t, is_marker in items:
        ids += [tok.single_token_id(t)] if is_marker else encode_spelled(tok, t)
    size = data.draw(st.sampled_from([1, 2, 5, 1000]), label="batch")
    p = StreamParser(name, tools=TOOLS, tokenizer=tok)
    for k in range(0, len(ids), size):
        p.feed(token_ids=ids[k : k + size])
    p.finish()
    check_visible_text(p.message, items, spec)
