"""Markers spelled around one control token (DeepSeek V4's `<｜DSML｜tool_calls>`): they
count only when that token arrives as its id, at any chunking; the resolution of such
gates from real tokenizers."""

from __future__ import annotations

import dataclasses
import warnings

import models
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chatsieve import formats
from chatsieve.events import Piece
from chatsieve.lexer import GatedText, Marker, MarkerLexer, Text
from chatsieve.parser import StreamParser, resolve_gates
from chatsieve.spec import FormatSpec

C, CID = "｜DSML｜", 128825
OPEN = GatedText("<｜DSML｜tool_calls>", CID, "<", C, "tool_calls>")
CLOSE = GatedText("</｜DSML｜tool_calls>", CID, "</", C, "tool_calls>")


def ctrl(text: str = C, tid: int = CID) -> Piece:
    return Piece(text, (tid,), special=True)


def lex(pieces, gated=(OPEN, CLOSE), text_markers=(), id_markers=None, control_ids=()):
    lexer = MarkerLexer(text_markers, id_markers, control_ids, gated)
    segs = []
    for p in pieces:
        segs += lexer.feed(p if isinstance(p, Piece) else Piece(p, (1,)))
    return segs + lexer.finish()


def merged(segs) -> list:
    """Adjacent Text segments joined: the lexer may cut text anywhere."""
    out: list = []
    for s in segs:
        if isinstance(s, Text) and out and isinstance(out[-1], Text):
            out[-1] = Text(out[-1].text + s.text, out[-1].start)
        else:
            out.append(s)
    return out


def check_offsets(segs, whole: str) -> None:
    pos = 0
    for s in segs:
        assert s.start == pos, (s, pos)
        pos += len(s.text)
    assert "".join(s.text for s in segs) == whole


def test_the_tag_counts_when_the_control_arrives_as_its_id():
    segs = lex(["Check.\n\n<", ctrl(), "tool_calls>\n<", ctrl(), "invoke"])
    check_offsets(segs, "Check.\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke")
    assert merged(segs) == [
        Text("Check.\n\n", 0),
        Marker("<｜DSML｜tool_calls>", 8),
        Text("\n<｜DSML｜invoke", 26),  # the same control in an inner tag passes on as text
    ]


def test_spelled_control_is_text():
    segs = lex(["<", "｜DSML｜", "tool_calls>", "x"])
    assert merged(segs) == [Text("<｜DSML｜tool_calls>x", 0)]


def test_closing_tag_and_longest_before():
    segs = lex(["a</", ctrl(), "tool_calls>b"])
    assert merged(segs) == [Text("a", 0), Marker("</｜DSML｜tool_calls>", 1), Text("b", 20)]


@pytest.mark.parametrize("after", ["tool_callz>", "tool_calls", "", "tool"])
def test_an_incomplete_or_wrong_tail_is_text(after):
    segs = lex(["x<", ctrl(), after])
    assert not any(isinstance(s, Marker) for s in segs)
    check_offsets(segs, "x<" + C + after)


def test_the_control_without_its_prefix_is_text():
    assert merged(lex(["say ", ctrl(), "tool_calls>"])) == [Text("say ｜DSML｜tool_calls>", 0)]


def test_another_id_during_the_tail_settles_it_first():
    segs = lex(
        ["<", ctrl(), "tool_", Piece("<think>", (7,), special=True), "calls>"], id_markers={7: "<think>"}
    )
    assert merged(segs) == [Text("<｜DSML｜tool_", 0), Marker("<think>", 12), Text("calls>", 19)]


def test_an_added_token_that_is_no_control_is_text_in_the_tail():
    # e.g. Gemma's whitespace runs are added tokens: they arrive as pieces of their own
    segs = lex(["<", ctrl(), Piece("tool_calls>", (5,), special=True), "!"])
    assert merged(segs) == [Marker("<｜DSML｜tool_calls>", 0), Text("!", 18)]


def test_a_special_control_that_gates_a_tag_is_not_dropped_as_unknown():
    # a special (not just added) control token: in a tag it gates it; elsewhere it is text
    segs = lex(["<", ctrl(), "tool_calls>", ctrl(), "!"], control_ids=[CID])
    assert merged(segs) == [Marker("<｜DSML｜tool_calls>", 0), Text("｜DSML｜!", 18)]


def test_with_text_markers_beside_it():
    segs = lex(["<think>a<", ctrl(), "tool_calls>"], text_markers=["<think>"])
    assert merged(segs) == [Marker("<think>", 0), Text("a", 7), Marker("<｜DSML｜tool_calls>", 8)]


# -- property: any chunking, any mix of spelled and genuine controls --------------------------

_WORDS = st.sampled_from(
    ["<", "</", "/", "tool_calls>", "tool_", "calls>", "x", " ", "<<", "tool_calls>\n", "｜DSML｜"]
)


@st.composite
def streams(draw):
    """A list of (text, genuine) parts: genuine parts are the control as its id."""
    parts = draw(st.lists(st.one_of(_WORDS.map(lambda w: (w, False)), st.just((C, True))), max_size=14))
    return parts


def expected_markers(parts) -> list[tuple[str, int]]:
    """The reference: a genuine control at p makes a marker when the text right before
    it (since the last genuine control or marker) ends with `before` and the text right
    after it (up to the next genuine control) starts with `after`; the longest wins."""
    whole = "".join(t for t, _ in parts)
    ids, pos = [], 0
    for t, genuine in parts:
        if genuine:
            ids.append(pos)
        pos += len(t)
    found, floor = [], 0
    for k, p in enumerate(ids):
        end = ids[k + 1] if k + 1 < len(ids) else len(whole)
        tail = whole[p + len(C) : end]
        cands = [
            g for g in (OPEN, CLOSE)
            if p - len(g.before) >= floor and whole[p - len(g.before) : p] == g.before and tail.startswith(g.after)
        ]  # fmt: skip
        if cands:
            g = max(cands, key=lambda g: len(g.marker))
            found.append((g.marker, p - len(g.before)))
            floor = p + len(C) + len(g.after)
        else:
            floor = p + len(C)
    return found


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(parts=streams(), data=st.data())
def test_any_chunking_matches_the_reference(parts, data):
    whole = "".join(t for t, _ in parts)
    pieces: list = []
    for t, genuine in parts:
        if genuine:
            pieces.append(ctrl())
        else:  # ordinary text, cut anywhere (as tokens and deltas cut it)
            cuts = sorted(data.draw(st.sets(st.integers(1, max(1, len(t) - 1)), max_size=3)))
            bounds = [0, *[c for c in cuts if c < len(t)], len(t)]
            pieces += [t[a:b] for a, b in zip(bounds, bounds[1:]) if b > a]
    segs = lex(pieces)
    check_offsets(segs, whole)
    assert [(s.text, s.start) for s in segs if isinstance(s, Marker)] == expected_markers(parts)


# -- gate resolution with the real tokenizers ------------------------------------------


def test_deepseek_v4_gates_the_dsml_block_tags_by_its_control_token():
    tok = models.tokenizer("deepseek_v4")
    gates, spelled = resolve_gates(formats.get("deepseek_v4"), tok)
    assert gates["<｜DSML｜tool_calls>"] == gates["</｜DSML｜tool_calls>"] == 128825
    assert gates["<think>"] == 128821 and gates["</think>"] == 128822
    assert {(g.marker, g.before, g.control, g.after) for g in spelled} == {
        ("<｜DSML｜tool_calls>", "<", C, "tool_calls>"),
        ("</｜DSML｜tool_calls>", "</", C, "tool_calls>"),
        # the call's own tags too (issue 18: a parameter's close spelled inside a value is text)
        ("<｜DSML｜parameter name=", "<", C, "parameter name="),
        ("</｜DSML｜parameter>", "</", C, "parameter>"),
        ("</｜DSML｜invoke>", "</", C, "invoke>"),
    }


def test_a_delimiter_with_no_control_token_inside_stays_text_with_a_warning():
    # the R1-era vocabulary has no `｜DSML｜` token: V3.2's tags are matched as text there
    tok = models.tokenizer("deepseek")
    # a renamed copy: gates are resolved (and warned about) once per tokenizer and format
    spec = dataclasses.replace(formats.get("deepseek_v32"), name="deepseek_v32_warning_test")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        p = StreamParser(spec, tokenizer=tok)
    assert p.gated["<｜DSML｜function_calls>"] is None and p.gated["<think>"] == 128798
    assert any("<｜DSML｜function_calls>" in str(w.message) and "matched as text" in str(w.message) for w in caught)


def test_two_control_tokens_inside_is_not_gated():
    tok = models.tokenizer("deepseek_v4")
    spec = FormatSpec(name="two_controls_test", call_open=("<｜DSML｜x｜DSML｜>",))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gates, spelled = resolve_gates(spec, tok)
    assert gates == {"<｜DSML｜x｜DSML｜>": None} and spelled == ()
