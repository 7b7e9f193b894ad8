"""StreamParser's fast lane: plain text skips the pipeline's stages, with the events the
full pipeline gives (the fixtures check every case both ways; this checks the events
themselves on random outputs, and that the lane is really taken)."""

from __future__ import annotations

import functools
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
#
# characters a byte-level vocabulary cuts over two or three tokens (which, varies by family)
CUT = [" 天", "𝔘", "鼯鼠", "🙂"]
FRAGMENTS = {
    "qwen3": [
        "<think>", "</think>", "<tool_call>", "</tool_call>", "<|im_end|>",
        '{"name": "write_file", "arguments": {"path": "', '", "n": 3}}', '"', "\\", "\\n", "\\u00e9",
        " the", " file", "中文", "\n", "\n\n", " ", "<", "tool", "{", "}",
        *CUT,
    ],
    "qwen3_coder": [
        "<think>", "</think>", "<tool_call>", "</tool_call>", "<|im_end|>", "<function=write_file>",
        "</function>", "<parameter=path>", "<parameter=n>", "</parameter>", "\n", " the", " file",
        '"', "\\", "中文", "<", "3", "\n\n", "para", "meter>",
        *CUT,
    ],
    "gemma4": [
        "<|channel>", "thought\n", "<channel|>", "<|tool_call>", "<tool_call|>", '<|"|>', "<turn|>",
        "call:write_file{path:", ",n:3}", '"', "\\", " the", " file", "中文", "\n", " ", "<", "thought", "{", "}",
        *CUT,
    ],
    "gpt_oss": [
        "<|start|>", "assistant", "<|channel|>", "analysis", "commentary", "final", "<|message|>", "<|end|>",
        "<|call|>", "<|return|>", "<|constrain|>", " to=functions.write_file", "json", '{"path": "', '", "n": 3}',
        '"', "\\", " the", " file", "中文", "\n", " ", "<", "{", "}",
        *CUT,
    ],
    "deepseek_v31": [
        "<think>", "</think>", "<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>",
        "<｜tool▁call▁end｜>", "<｜tool▁calls▁end｜>", "<｜end▁of▁sentence｜>", "write_file", '{"path": "',
        '", "n": 3}', '"', "\\", " the", " file", "中文", "\n", " ", "<", "{", "}", "。 ", " a \n", "  ",
        *CUT,
    ],
    "kimi_k2": [
        "<think>", "</think>", "<|tool_calls_section_begin|>", "<|tool_call_begin|>", "functions.write_file:0",
        "<|tool_call_argument_begin|>", "<|tool_call_end|>", "<|tool_calls_section_end|>", "<|im_end|>",
        '{"path": "', '", "n": 3}', '"', "\\", " the", " file", "中文", "\n", " ", "<", "{", "}", "。 ", " a \n", "  ",
        *CUT,
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


def _taking(p: StreamParser, ids: list[int], twin: StreamParser) -> tuple[list, list[int]]:
    """The events of feeding `ids` one by one, each through `take_id` where it takes it (the
    server's text lane), and the ids it took. `twin`, a parser made as `p` was, is fed each id
    with `feed`: where `take_id` takes an id, its text must be `feed`'s deltas joined, all of the
    kind `lane` names (their events are what is returned); elsewhere `p.feed` must give what
    `twin.feed` gives."""
    events, taken = [], []
    for t in ids:
        text = p.take_id(t)
        want = twin.feed(token_ids=[t])
        if text is None:
            assert _norm(p.feed(token_ids=[t])) == _norm(want)
        else:
            kind = ReasoningDelta if p.lane == "reasoning" else ContentDelta
            assert all(type(e) is kind for e in want), want
            assert "".join(e.text for e in want) == text, (want, text)
            taken.append(t)
        events += want
    finished = p.finish()
    assert _norm(finished) == _norm(twin.finish())
    return _norm(events + finished), taken


@pytest.mark.parametrize("fmt", sorted(FRAGMENTS))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_take_id_is_feed_of_that_id_where_it_takes_it(fmt, data):
    """Where `take_id` takes an id, its text is the one delta `feed` would give, and the parser
    is left as `feed` would leave it: a whole output's events are those of the full pipeline.
    A stop token is never taken."""
    tok = _tokenizer(fmt)
    ids = tok.encode("".join(data.draw(st.lists(st.sampled_from(FRAGMENTS[fmt]), max_size=30))))
    stop_ids = sorted(data.draw(st.sets(st.sampled_from(ids), max_size=2))) if ids else []
    opts = {"thinking": data.draw(st.booleans()), "stop": data.draw(STOPS), "stop_token_ids": stop_ids}
    make = functools.partial(StreamParser, fmt, tools=TOOLS, tokenizer=tok, **opts)
    events, _ = _taking(make(), ids, make())
    assert events == _run(fmt, [[t] for t in ids], False, tok, **opts)


def test_take_id_takes_the_ids_of_the_open_reasoning_and_content():
    tok = _tokenizer("qwen3")
    ids = tok.encode("<think>the file the file the file</think>the file the file the file<|im_end|>")
    p = StreamParser("qwen3", tools=TOOLS, tokenizer=tok)
    events, taken = _taking(p, ids, StreamParser("qwen3", tools=TOOLS, tokenizer=tok))
    assert len(taken) >= 6  # the repeats of " the" and " file" on either side
    assert p.message.reasoning == "the file the file the file"
    assert p.message.content == "the file the file the file"
    with_stop = functools.partial(StreamParser, "qwen3", tools=TOOLS, tokenizer=tok, stop=["zz"])
    assert _taking(with_stop(), ids, with_stop()) == (events, [])  # stop strings: never (the text must be matched)


# each byte-level family's answer: reasoning, then content, both with characters its vocabulary
# cuts over several tokens (see CUT)
CUT_ANSWERS = {
    "qwen3": "<think>{t}</think>{t}<|im_end|>",
    "deepseek_v31": "<think>{t}</think>{t}<｜end▁of▁sentence｜>",
    "kimi_k2": "<think>{t}</think>{t}<|im_end|>",
    "gpt_oss": "<|channel|>analysis<|message|>{t}<|end|><|start|>assistant<|channel|>final<|message|>{t}<|return|>",
}


@pytest.mark.parametrize("fmt", sorted(CUT_ANSWERS))
def test_take_id_takes_the_ids_of_characters_cut_over_tokens(fmt):
    """In the open reasoning and content, the ids of a character cut over several tokens are
    taken: the first ones held (no delta, as the detokenizer holds them), the last with the
    character's text; the events are the full pipeline's."""
    tok = _tokenizer(fmt)
    words = "the 𝔘 file 鼯鼠 the 🙂 file 天 the file 天 and  𝔘\n\n鼯鼠 end"
    ids = tok.encode(CUT_ANSWERS[fmt].format(t=words))
    cut = [t for t in ids if not tok.is_added(t) and tok.plain_text(t) is None]
    assert len(cut) >= 4, "no character of the text is cut over tokens: the test proves nothing"
    make = functools.partial(StreamParser, fmt, tools=TOOLS, tokenizer=tok, thinking=True)
    events, took = _taking(make(), ids, make())
    assert events == _run(fmt, [[t] for t in ids], False, tok, thinking=True)
    assert _merged(events)[:2] == [ReasoningDelta(words), ContentDelta(words)]
    missed = [t for t in cut if t not in took]
    assert len(missed) <= len(cut) // 4, (len(missed), len(cut))  # (those right after a field opens)


# a call to write_file whose path is "the file the file the file", in each family's syntax
HELD_CALLS = {
    "qwen3": '<tool_call>{{"name": "write_file", "arguments": {{"path": "{p}"}}}}</tool_call><|im_end|>',
    "qwen3_coder": "<tool_call><function=write_file><parameter=path>{p}</parameter></function></tool_call><|im_end|>",
    "gemma4": '<|tool_call>call:write_file{{path:<|"|>{p}<|"|>}}<tool_call|><turn|>',
    "gpt_oss": '<|start|>assistant to=functions.write_file<|channel|>commentary json<|message|>{{"path": "{p}"}}<|call|>',
    "deepseek_v31": '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>write_file<｜tool▁sep｜>{{"path": "{p}"}}'
                    "<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜>",
    "kimi_k2": '<|tool_calls_section_begin|><|tool_call_begin|>functions.write_file:0<|tool_call_argument_begin|>'
               '{{"path": "{p}"}}<|tool_call_end|><|tool_calls_section_end|><|im_end|>',
}


@pytest.mark.parametrize("fmt", sorted(HELD_CALLS))
def test_take_id_takes_the_ids_of_a_held_argument_string(fmt):
    """Inside a call's argument string, with the arguments held until the call ends (the
    server's parser), `take_id` takes the ids that only add to them, making no delta; with
    stream_arguments (each fragment an event) it takes none there."""
    tok = _tokenizer(fmt)
    ids = tok.encode(HELD_CALLS[fmt].format(p="the file the file the file"))
    opts = {"thinking": False}
    make = functools.partial(StreamParser, fmt, tools=TOOLS, tokenizer=tok, **opts)
    events, taken = _taking(make(), ids, make())
    assert events == _run(fmt, [[t] for t in ids], False, tok, **opts)
    [call] = [e for e in events if isinstance(e, ToolCallArgsDelta)]
    assert json.loads(call.json_text) == {"path": "the file the file the file"}
    assert len(taken) >= 4, taken  # the repeats of " the" and " file" inside the string
    streamed = functools.partial(make, stream_arguments=True)
    assert _taking(streamed(), ids, streamed())[1] == []


@pytest.mark.parametrize("fmt", ["qwen3", "qwen3_coder", "gpt_oss", "deepseek_v31", "kimi_k2"])
def test_take_id_takes_the_ids_of_characters_cut_over_tokens_in_held_arguments(fmt):
    """Inside a call's held argument string, the ids of a character cut over several tokens (a
    byte-level vocabulary's) are taken too: the first held, the last adding the character to the
    arguments; the events are the full pipeline's."""
    tok = _tokenizer(fmt)
    words = "the 𝔘 file 鼯鼠 the 🙂 file 天 end"
    ids = tok.encode(HELD_CALLS[fmt].format(p=words))
    cut = [t for t in ids if not tok.is_added(t) and tok.plain_text(t) is None]
    assert len(cut) >= 4, "no character of the text is cut over tokens: the test proves nothing"
    make = functools.partial(StreamParser, fmt, tools=TOOLS, tokenizer=tok, thinking=False)
    events, took = _taking(make(), ids, make())
    assert events == _run(fmt, [[t] for t in ids], False, tok, thinking=False)
    [call] = [e for e in events if isinstance(e, ToolCallArgsDelta)]
    assert json.loads(call.json_text) == {"path": words}
    missed = [t for t in cut if t not in took]
    assert len(missed) <= len(cut) // 4, (len(missed), len(cut))


def test_take_id_holds_no_character_of_held_arguments_while_the_detokenizer_holds_bytes():
    """A character's first bytes fed inside a call's held arguments (`feed`) stay with the
    detokenizer: `take_id` declines the first id of the next character (its text would come out
    before theirs), and the arguments are the full pipeline's, the unfinished character
    included."""
    tok = _tokenizer("qwen3")
    first, second = tok.encode(" 明"), tok.encode(" 天")
    assert len(first) == len(second) == 2
    head = tok.encode('<tool_call>{"name": "write_file", "arguments": {"path": "the file')
    tail = tok.encode(' the file"}}</tool_call><|im_end|>')
    p = StreamParser("qwen3", tools=TOOLS, tokenizer=tok, thinking=False)
    for t in head:
        if p.take_id(t) is None:
            p.feed(token_ids=[t])
    p.feed(token_ids=first[:1])  # (明 never finished)
    assert p.take_id(second[0]) is None
    for t in second + tail:
        if p.take_id(t) is None:
            p.feed(token_ids=[t])
    p.finish()
    full = StreamParser("qwen3", tools=TOOLS, tokenizer=tok, thinking=False, fast_lane=False)
    full.feed(token_ids=head + first[:1] + second + tail)
    full.finish()
    assert [(c.name, c.arguments) for c in p.message.tool_calls] == [(c.name, c.arguments) for c in full.message.tool_calls]
    assert json.loads(full.message.tool_calls[0].arguments)["path"] == "the file \ufffd 天 the file"


@pytest.mark.parametrize("fmt", ["qwen3", "gpt_oss", "deepseek_v31", "kimi_k2"])
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


# outputs where a message's first text must be joined to the field's earlier text (a newline
# between two messages of one field), which the lane must leave to the full pipeline
JOINED = [
    "<|channel|>analysis<|message|>First thought.<|end|><|start|>assistant<|channel|>analysis<|message|>Second."
    "<|end|><|start|>assistant<|channel|>commentary<|message|>Preamble.<|end|>"
    "<|start|>assistant<|channel|>final<|message|>The answer.<|return|>",
    "<|channel|>analysis<|message|>Maybe call it:<|start|>assistant to=functions.write_file<|channel|>commentary"
    ' json<|message|>{"path": "/tmp/a"}<|call|>',
]


@pytest.mark.parametrize("output", JOINED)
@pytest.mark.parametrize("mode", ["chars", "tokens"])
def test_same_events_where_messages_are_joined(output, mode):
    tok = _tokenizer("gpt_oss")
    chunks = [[i] for i in tok.encode(output)] if mode == "tokens" else list(output)
    use = tok if mode == "tokens" else None
    assert _run("gpt_oss", chunks, True, use) == _run("gpt_oss", chunks, False, use)


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


# Reasoning and content whose deltas often end in whitespace (a space or a newline token of
# its own, as DeepSeek's and Kimi's tokenizers give "。 " or ". " before a word): the hot lane
# holds that whitespace back as the field would (`StreamParser._spaced`), and gives it up to
# the stages before a marker, a stop string, a batch of ids or the end of the output.
SPACED_PROSE = " Rain at nine. 明天有小雨。 Then  sun,\n\nclear. \n  Done."
SPACED = {
    "deepseek_v31": (
        f"{SPACED_PROSE}  \n</think>{SPACED_PROSE} \n",
        '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>write_file<｜tool▁sep｜>{"path": "/tmp/a b", "n": 3}'
        "<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜>",
    ),
    "kimi_k2": (
        f"<think>{SPACED_PROSE} \n</think>{SPACED_PROSE}\n\n",
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.write_file:0<|tool_call_argument_begin|>"
        '{"path": "/tmp/a b", "n": 3}<|tool_call_end|><|tool_calls_section_end|><|im_end|>',
    ),
    "qwen3": (
        f"<think>{SPACED_PROSE} \n</think>{SPACED_PROSE}\n\n",
        '<tool_call>\n{"name": "write_file", "arguments": {"path": "/tmp/a b", "n": 3}}\n</tool_call><|im_end|>',
    ),
    "gpt_oss": (
        f"<|channel|>analysis<|message|>{SPACED_PROSE} \n<|end|><|start|>assistant<|channel|>final<|message|>"
        f"{SPACED_PROSE}\n\n",
        "<|return|>",
    ),
}
SPACED_STOPS = [None, ["n. "], ["\n\nc"]]


def _token_texts(tok, text: str) -> list[str]:
    """`text` as its tokens' texts (a character split across tokens in the last of them)."""
    pieces, done, ids = [], "", []
    for i in tok.encode(text):
        ids.append(i)
        now = tok.decode(ids)
        if not now.endswith("\ufffd"):
            pieces.append(now[len(done) :])
            done = now
    return pieces


@pytest.mark.parametrize("fmt", sorted(SPACED))
@pytest.mark.parametrize("stop", SPACED_STOPS)
@pytest.mark.parametrize("ending", ["call", "cut"])
def test_held_whitespace_at_every_split_point_text(fmt, stop, ending):
    """Text mode: the output's token texts, one per delta, with the delta around each
    character offset cut there; the same events with and without the fast lane."""
    tok = _tokenizer(fmt)
    prose, call = SPACED[fmt]
    pieces = _token_texts(tok, prose + call if ending == "call" else prose)
    opts = {"thinking": True, "stop": stop}
    full_text = "".join(pieces)
    at = 0
    for i, piece in enumerate(pieces):
        for cut in range(len(piece)):
            chunks = [*pieces[:i], *([piece[:cut]] if cut else []), piece[cut:], *pieces[i + 1 :]]
            assert "".join(chunks) == full_text
            assert _run(fmt, chunks, True, **opts) == _run(fmt, chunks, False, **opts), (at + cut, chunks)
        at += len(piece)


@pytest.mark.parametrize("fmt", sorted(SPACED))
@pytest.mark.parametrize("stop", SPACED_STOPS)
@pytest.mark.parametrize("ending", ["call", "cut"])
def test_held_whitespace_at_every_split_point_tokens(fmt, stop, ending):
    """Token mode: one id per delta, except that at each split point the next three ids
    come as one batch; and the whole output cut in two there. Both lanes agree (with a stop
    string, on the deltas joined: see `test_same_events_in_token_mode`)."""
    tok = _tokenizer(fmt)
    prose, call = SPACED[fmt]
    ids = tok.encode(prose + call if ending == "call" else prose)
    opts = {"thinking": True, "stop": stop}
    for k in range(len(ids) + 1):
        singles = [[i] for i in ids[:k]] + [ids[k : k + 3]] + [[i] for i in ids[k + 3 :]]
        singles = [c for c in singles if c]
        fast, full = _run(fmt, singles, True, tok, **opts), _run(fmt, singles, False, tok, **opts)
        assert _merged(fast) == _merged(full), k
        if stop is None:
            assert fast == full, k
        halves = [c for c in (ids[:k], ids[k:]) if c]
        fast, full = _run(fmt, halves, True, tok, **opts), _run(fmt, halves, False, tok, **opts)
        assert _merged(fast) == _merged(full), k
        if stop is None:
            assert fast == full, k


@pytest.mark.parametrize("fmt", sorted(SPACED))
@pytest.mark.parametrize("mode", ["text", "tokens"])
def test_whitespace_deltas_stay_in_the_hot_lane(fmt, mode, monkeypatch):
    """A delta that ends in whitespace, and the one after it, no longer leave the hot lane."""
    tok = _tokenizer(fmt)
    lane = []
    real_plain = StreamParser._plain
    monkeypatch.setattr(StreamParser, "_plain", lambda self, *a: lane.append(a) or real_plain(self, *a))
    prose = SPACED[fmt][0].replace(SPACED_PROSE, SPACED_PROSE * 20)
    ids = tok.encode(prose)
    if mode == "tokens":
        p = StreamParser(fmt, tools=TOOLS, thinking=True, tokenizer=tok)
        for i in ids:
            p.feed(token_ids=[i])
    else:
        p = StreamParser(fmt, tools=TOOLS, thinking=True)
        for piece in _token_texts(tok, prose):
            p.feed(piece)
    p.finish()
    assert p.message.content == p.message.reasoning == (SPACED_PROSE * 20).strip()
    spaced = sum(1 for i in ids if tok.decode([i])[-1:].isspace())
    assert spaced > 40
    # (each of them and the delta after it used to; a character cut across ids still leaves it)
    assert len(lane) < spaced / 2, f"{len(lane)} of {len(ids)} deltas ({spaced} ending in whitespace) left the hot lane"
