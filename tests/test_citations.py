"""Cohere `<co>…</co: …>` citations: the markup leaves the field, the text stays, and each
span is a `Citation` diagnostic with its sources -- the same at every split of the output."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from chatsieve import Citation, CitationSource, Dropped, StreamParser, parse

FORMAT = "cohere_command"


def _stream(chunks: list[str]):
    p = StreamParser(FORMAT)
    for c in chunks:
        p.feed(c)
    p.finish()
    return p.message


def test_citation_fields() -> None:
    text = (
        "<|START_THINKING|>Results show <co>rain</co: 0:[2]>.<|END_THINKING|>"
        "<|START_RESPONSE|>It <co>rained</co: 0:[1,2],1:[0]> and <co>was cold</co>.<|END_RESPONSE|>"
    )
    msg = parse(text, FORMAT)
    assert msg.reasoning == "Results show rain."
    assert msg.content == "It rained and was cold."
    assert msg.diagnostics == [
        Citation("<co>rain</co: 0:[2]>", "citation of 0:[2] in reasoning (markup removed, text kept)", "reasoning", "rain", (CitationSource(0, (2,)),)),
        Citation(
            "<co>rained</co: 0:[1,2],1:[0]>",
            "citation of 0:[1,2],1:[0] in content (markup removed, text kept)",
            "content",
            "rained",
            (CitationSource(0, (1, 2)), CitationSource(1, (0,))),
        ),
        Citation("<co>was cold</co>", "citation of no sources in content (markup removed, text kept)", "content", "was cold", ()),
    ]
    assert msg.to_dict()["diagnostics"][1]["citation"] == {
        "field": "content",
        "text": "rained",
        "sources": [{"tool_call": 0, "results": [1, 2]}, {"tool_call": 1, "results": [0]}],
    }
    for k in range(1, len(text)):
        assert _stream([text[:k], text[k:]]).diagnostics == msg.diagnostics, k
    one_by_one = _stream(list(text))
    assert (one_by_one.content, one_by_one.reasoning, one_by_one.diagnostics) == (msg.content, msg.reasoning, msg.diagnostics)


PLAIN = st.text(st.sampled_from("ab c.\n:[]0,/>"), max_size=8)
SOURCES = st.lists(
    st.tuples(st.integers(0, 12), st.lists(st.integers(0, 30), max_size=3)), min_size=0, max_size=3
)


def _tag(sources: list[tuple[int, list[int]]]) -> str:
    if not sources:
        return "</co>"
    return "</co: " + ",".join(f"{c}:[{','.join(map(str, r))}]" for c, r in sources) + ">"


@settings(max_examples=200, deadline=None)
@given(parts=st.lists(st.tuples(PLAIN, PLAIN, SOURCES), max_size=5), tail=PLAIN, data=st.data())
def test_spans_at_any_split(parts, tail: str, data) -> None:
    body = "".join(f"{before}<co>{cited}{_tag(src)}" for before, cited, src in parts) + tail
    text = f"<|START_RESPONSE|>x{body}x<|END_RESPONSE|>"
    want_content = "x" + "".join(before + cited for before, cited, _ in parts) + tail + "x"
    want = [(cited, tuple(CitationSource(c, tuple(r)) for c, r in src)) for _, cited, src in parts]
    cuts = data.draw(st.lists(st.integers(1, len(text) - 1), max_size=10), label="cuts")
    bounds = sorted({0, len(text), *cuts})
    for msg in (parse(text, FORMAT), _stream([text[a:b] for a, b in zip(bounds, bounds[1:])])):
        assert msg.content == want_content
        assert [(d.text, d.sources) for d in msg.diagnostics] == want
        assert all(isinstance(d, Citation) and d.field == "content" for d in msg.diagnostics)


@settings(max_examples=300, deadline=None)
@given(body=st.text(st.sampled_from("<co>/: [1,0]x"), max_size=40), data=st.data())
def test_no_character_lost(body: str, data) -> None:
    """Any text at all: what the content lost is exactly the markup the diagnostics name."""
    text = f"<|START_RESPONSE|>x{body}x<|END_RESPONSE|>"
    cuts = data.draw(st.lists(st.integers(1, len(text) - 1), max_size=10), label="cuts")
    bounds = sorted({0, len(text), *cuts})
    batch = parse(text, FORMAT)
    msg = _stream([text[a:b] for a, b in zip(bounds, bounds[1:])])
    assert msg.content == batch.content and msg.diagnostics == batch.diagnostics
    removed = sum(len(d.raw) - len(d.text) if isinstance(d, Citation) else len(d.raw) for d in msg.diagnostics)
    assert all(isinstance(d, Dropped) for d in msg.diagnostics)
    assert len(msg.content) + removed == len(body) + 2


FRAGMENTS = [
    "<|START_THINKING|>", "<|END_THINKING|>", "<|START_RESPONSE|>", "<|END_RESPONSE|>", "<|END_OF_TURN_TOKEN|>",
    "<co>", "</co: 0:[1]>", "</co: 1:[0,2],2:[3]>", "</co>", "<c", "o>", "</co", ": 4:[", "5]>", "<", "/",
    " the", " tree", "中文", "\n", " ", "Hyperion", ".",
]  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(parts=st.lists(st.sampled_from(FRAGMENTS), max_size=30), data=st.data())
def test_same_events_with_and_without_the_fast_lane(parts, data) -> None:
    text = "".join(parts)
    cuts = sorted(data.draw(st.sets(st.integers(1, max(1, len(text) - 1)), max_size=len(text)), label="cuts"))
    bounds = [0, *[c for c in cuts if c < len(text)], len(text)]
    chunks = [text[a:b] for a, b in zip(bounds, bounds[1:])]
    thinking = data.draw(st.booleans(), label="thinking")
    runs = []
    for fast in (True, False):
        p = StreamParser(FORMAT, fast_lane=fast, thinking=thinking)
        runs.append([e for c in chunks for e in p.feed(c)] + p.finish())
    assert runs[0] == runs[1]
