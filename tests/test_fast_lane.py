"""StreamParser's fast lane: plain text skips the pipeline's stages, with the events the
full pipeline gives (the fixtures check every case both ways; this checks the events
themselves on random outputs, and that the lane is really taken)."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from models import tokenizer

from chatsieve import StreamParser
from chatsieve.events import ContentDelta, ReasoningDelta, ToolCallArgsDelta, ToolCallStart
from chatsieve.lexer import MarkerLexer

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "write_file",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "n": {"type": "integer"}},
            },
        },
    }
]

# Pieces of model output for three families: markers, quoting and escaping characters,
# whitespace, and words; random sequences of them are outputs both paths must agree on.
FRAGMENTS = {
    "qwen3": [
        "<think>", "</think>", "<tool_call>", "</tool_call>", "<|im_end|>",
        '{"name": "write_file", "arguments": {"path": "', '", "n": 3}}', '"', "\\", "\\n", "\\u00e9",
        " the", " file", "中文", "\n", "\n\n", " ", "<", "tool", "{", "}",
    ],
    "qwen3_coder": [
        "<think>", "</think>", "<tool_call>", "</tool_call>", "<|im_end|>", "<function=write_file>",
        "</function>", "<parameter=path>", "<parameter=n>", "</parameter>", "\n", " the", " file",
        '"', "\\", "中文", "<", "3", "\n\n", "para", "meter>",
    ],
    "gemma4": [
        "<|channel>", "thought\n", "<channel|>", "<|tool_call>", "<tool_call|>", '<|"|>', "<turn|>",
        "call:write_file{path:", ",n:3}", '"', "\\", " the", " file", "中文", "\n", " ", "<", "thought", "{", "}",
    ],
    "gpt_oss": [
        "<|start|>", "assistant", "<|channel|>", "analysis", "commentary", "final", "<|message|>", "<|end|>",
        "<|call|>", "<|return|>", "<|constrain|>", " to=functions.write_file", "json", '{"path": "', '", "n": 3}',
        '"', "\\", " the", " file", "中文", "\n", " ", "<", "{", "}",
    ],
    "deepseek_v31": [
        "<think>", "</think>", "<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>",
        "<｜tool▁call▁end｜>", "<｜tool▁calls▁end｜>", "<｜end▁of▁sentence｜>", "write_file", '{"path": "',
        '", "n": 3}', '"', "\\", " the", " file", "中文", "\n", " ", "<", "{", "}",
    ],
    "kimi_k2": [
        "<think>", "</think>", "<|tool_calls_section_begin|>", "<|tool_call_begin|>", "functions.write_file:0",
        "<|tool_call_argument_begin|>", "<|tool_call_end|>", "<|tool_calls_section_end|>", "<|im_end|>",
        '{"path": "', '", "n": 3}', '"', "\\", " the", " file", "中文", "\n", " ", "<", "{", "}",
    ],
}


# stop strings that the fragments can complete, across deltas or not
STOPS = st.sampled_from([None, ["the f"], ["中文\n", "</"], ["e fi", "le"]])


def _norm(events: list) -> list:
    """Events with call ids (random) blanked."""
    return [ToolCallStart(e.index, "", e.name) if isinstance(e, ToolCallStart) else e for e in events]


def _run(fmt: str, chunks: list, fast: bool, tok=None, **options) -> list:
    p = StreamParser(fmt, tools=TOOLS, fast_lane=fast, tokenizer=tok, **options)
    events = []
    for ch in chunks:
        events += p.feed(token_ids=ch) if tok is not None else p.feed(ch)
    return _norm(events + p.finish())


@pytest.mark.parametrize("fmt", sorted(FRAGMENTS))
@pytest.mark.parametrize("stream_arguments", [False, True])
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_same_events_with_and_without_the_fast_lane(fmt, stream_arguments, data):
    parts = data.draw(st.lists(st.sampled_from(FRAGMENTS[fmt]), max_size=30))
    thinking = data.draw(st.booleans())
    stop = data.draw(STOPS)
    text = "".join(parts)
    cuts = sorted(data.draw(st.sets(st.integers(1, max(1, len(text) - 1)), max_size=len(text))))
    bounds = [0, *[c for c in cuts if c < len(text)], len(text)]
    chunks = [text[a:b] for a, b in zip(bounds, bounds[1:])]
    opts = {"stream_arguments": stream_arguments, "thinking": thinking, "stop": stop}
    assert _run(fmt, chunks, True, **opts) == _run(fmt, chunks, False, **opts)


_TOKENIZERS = {"qwen3_coder": "qwen3", "gpt_oss": "gpt-oss", "deepseek_v31": "deepseek"}


def _tokenizer(fmt: str):
    return tokenizer(_TOKENIZERS.get(fmt, fmt))


@pytest.mark.parametrize("fmt", sorted(FRAGMENTS))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_same_events_in_token_mode(fmt, data):
    tok = _tokenizer(fmt)
    text = "".join(data.draw(st.lists(st.sampled_from(FRAGMENTS[fmt]), max_size=30)))
    ids = tok.encode(text)
    size = data.draw(st.integers(1, 4))
    chunks = [ids[k : k + size] for k in range(0, len(ids), size)]
    opts = {"thinking": data.draw(st.booleans()), "stop": data.draw(STOPS)}
    fast, full = _run(fmt, chunks, True, tok, **opts), _run(fmt, chunks, False, tok, **opts)
    if size == 1:
        assert fast == full
    else:
        # The lane takes a batch id by id, so a stop string's held tail can come out in
        # other pieces than from a whole batch: the same deltas, cut differently.
        assert _merged(fast) == _merged(full)


@pytest.mark.parametrize("fmt", ["qwen3", "gpt_oss"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_same_events_feeding_ids_and_text_in_turn(fmt, data):
    """The lanes opened by text must not take ids while the detokenizer holds bytes, and
    the reverse: one output fed partly as ids, partly as text (a byte-split character
    among them), gives the same events both ways."""
    tok = _tokenizer(fmt)
    text = "".join(data.draw(st.lists(st.sampled_from([*FRAGMENTS[fmt], "é", "🌦", " naïve"]), max_size=30)))
    ids = tok.encode(text)
    as_text = data.draw(st.lists(st.booleans(), min_size=len(ids), max_size=len(ids)))
    events = {}
    for fast in (True, False):
        p = StreamParser(fmt, tools=TOOLS, fast_lane=fast, tokenizer=tok, stop_token_ids=[ids[-1]] if ids else None)
        out = []
        for i, t in zip(ids, as_text):
            out += p.feed(tok.decode([i])) if t else p.feed(token_ids=[i])
        events[fast] = _norm(out + p.finish())
    assert events[True] == events[False]


def _merged(events: list) -> list:
    """Events with adjacent deltas of one kind (one call's arguments) joined."""
    out: list = []
    for e in events:
        last = out[-1] if out else None
        if type(e) is type(last) and isinstance(e, ReasoningDelta | ContentDelta) and not e.logprobs:
            out[-1] = type(e)(last.text + e.text)
        elif isinstance(e, ToolCallArgsDelta) and isinstance(last, ToolCallArgsDelta) and e.index == last.index:
            out[-1] = ToolCallArgsDelta(e.index, last.json_text + e.json_text)
        else:
            out.append(e)
    return out


SENTENCE = " Let me write the notes file now, and then check it."
PATH = "/tmp/notes" + " and more notes here" * 5
OUTPUTS = {
    "qwen3": (
        f"<think>\n{SENTENCE * 5}\n</think>\n\n{SENTENCE * 5}",
        f'<tool_call>\n{{"name": "write_file", "arguments": {{"path": "{PATH}", "n": 3}}}}\n</tool_call>',
    ),
    "qwen3_coder": (
        f"<think>\n{SENTENCE * 5}\n</think>\n\n{SENTENCE * 5}",
        f"<tool_call>\n<function=write_file>\n<parameter=path>\n{PATH}\n</parameter>\n"
        "<parameter=n>\n3\n</parameter>\n</function>\n</tool_call>",
    ),
    "gemma4": (
        f"<|channel>thought\n{SENTENCE * 5}<channel|>{SENTENCE * 5}",
        f'<|tool_call>call:write_file{{path:<|"|>{PATH}<|"|>,n:3}}<tool_call|>',
    ),
    "gpt_oss": (
        f"<|channel|>analysis<|message|>{SENTENCE * 5}<|end|><|start|>assistant<|channel|>commentary<|message|>"
        f"{SENTENCE * 5}<|end|>",
        "<|start|>assistant to=functions.write_file<|channel|>commentary <|constrain|>json<|message|>"
        f'{{"path": "{PATH}", "n": 3}}<|call|>',
    ),
    "deepseek_v31": (
        f"{SENTENCE * 5}</think>{SENTENCE * 5}",
        f'<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>write_file<｜tool▁sep｜>{{"path": "{PATH}", "n": 3}}'
        "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
    ),
    "kimi_k2": (
        f"<think>{SENTENCE * 5}</think>{SENTENCE * 5}",
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.write_file:0<|tool_call_argument_begin|>"
        f'{{"path": "{PATH}", "n": 3}}<|tool_call_end|><|tool_calls_section_end|>',
    ),
}


@pytest.mark.parametrize("fmt", sorted(OUTPUTS))
@pytest.mark.parametrize("mode", ["text", "tokens"])
def test_the_lane_is_taken(fmt, mode, monkeypatch):
    """Most deltas of reasoning, content and an argument string never reach the lexer."""
    tok = _tokenizer(fmt)
    lexer_feeds, lane = [], []
    real_feed, real_plain = MarkerLexer.feed, StreamParser._plain
    monkeypatch.setattr(MarkerLexer, "feed", lambda self, piece: lexer_feeds.append(piece) or real_feed(self, piece))
    monkeypatch.setattr(StreamParser, "_plain", lambda self, *a: lane.append(a) or real_plain(self, *a))
    prose, call = OUTPUTS[fmt]
    ids = tok.encode(prose + call)
    p = StreamParser(fmt, tools=TOOLS, thinking=True, tokenizer=tok if mode == "tokens" else None)
    if mode == "tokens":
        for i in ids:
            p.feed(token_ids=[i])
    else:
        for i in ids:
            p.feed(tok.decode([i]))
    p.finish()
    msg = p.message
    assert msg.reasoning == msg.content == SENTENCE.strip() + SENTENCE * 4
    assert [c.name for c in msg.tool_calls] == ["write_file"]
    assert json.loads(msg.tool_calls[0].arguments) == {"path": PATH, "n": 3}
    assert len(lexer_feeds) < len(ids) / 4, f"{len(lexer_feeds)} of {len(ids)} deltas took the full pipeline"
    # and most deltas of reasoning and content take the hot lane, past even the lane's checks
    assert len(lane) < len(ids) / 2, f"{len(lane)} of {len(ids)} deltas took the fast lane, not the hot lane"
