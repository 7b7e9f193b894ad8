"""Detokenizer and StopChecker: pieces equal one decode() for every split; stops cut right."""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path

import pytest
import tokenizers
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from models import gemma4_tokenizer_json, model_path
from test_tokenizer import tok_for as shared_tok_for

from chatsieve.detok import Detokenizer, StopChecker
from chatsieve.events import Piece, TokenLogprob
from chatsieve.tokenizer import Tokenizer, load_tokenizer

FFFD = "\ufffd"

# Test-only variants of the derived Gemma 4 tokenizer with the decoders other
# SentencePiece-style vocabularies use: Llama 2 (strip one leading space of the output)
# and Metaspace (drop the first token's leading "▁").
_DECODER_VARIANTS = {
    "gemma4-strip": lambda d: d.Sequence(
        [d.Replace("▁", " "), d.ByteFallback(), d.Fuse(), d.Strip(" ", 1, 0)]
    ),
    "gemma4-metaspace": lambda d: d.Sequence([d.ByteFallback(), d.Metaspace("▁", "always", True)]),
}


@functools.cache
def _load(name: str) -> Tokenizer:
    if name == "qwen3-vocab":  # vocab.json + merges.txt, linked beside no tokenizer.json
        src = model_path("qwen3")
        with tempfile.TemporaryDirectory() as d:
            for f in ("vocab.json", "merges.txt", "tokenizer_config.json"):
                (Path(d) / f).symlink_to(src / f)
            return load_tokenizer(d)
    if name == "gemma4-variant":
        return load_tokenizer(tokenizers.Tokenizer.from_str(gemma4_tokenizer_json()))
    return shared_tok_for(name)  # the real tokenizers, loaded once for both test modules


def tok_for(name: str) -> Tokenizer:
    if name in _DECODER_VARIANTS:
        # One more Gemma 4 copy shared by the variants: its decoder is set on each use.
        tok = _load("gemma4-variant")
        tok.hf.decoder = _DECODER_VARIANTS[name](tokenizers.decoders)
        return tok
    return _load(name)


BYTE_LEVEL = ["qwen3", "llama3", "deepseek", "gpt-oss", "glm/glm-5", "kimi-k2", "llama4", "hunyuan"]  # the last three: tiktoken files
ALL = ["gemma4", *BYTE_LEVEL]


def run(tok: Tokenizer, ids: list[int], cuts=(), logprobs=None) -> list[Piece]:
    """Feed `ids` split at `cuts`; check each step's output is final text; return all pieces."""
    final = tok.decode(ids)
    d = Detokenizer(tok)
    pieces: list[Piece] = []
    bounds = [0, *sorted(set(cuts)), len(ids)]
    for a, b in zip(bounds, bounds[1:]):
        pieces += d.feed(ids[a:b], None if logprobs is None else logprobs[a:b])
        # What is out is out for good: a prefix of the whole decode().
        assert final.startswith("".join(p.text for p in pieces))
    pieces += d.finish()
    return pieces


def check(tok: Tokenizer, ids: list[int], pieces: list[Piece]) -> None:
    assert "".join(p.text for p in pieces) == tok.decode(ids)
    assert [i for p in pieces for i in p.token_ids] == ids
    for p in pieces:
        if p.special:
            assert len(p.token_ids) == 1 and tok.is_added(p.token_ids[0])
        else:
            assert p.token_ids and not any(tok.is_added(i) for i in p.token_ids)


# -- texts: ASCII, CJK, emoji, combining marks, newlines, added tokens -------------------

FRAGMENTS = [
    " ",
    "\n",
    "\n\n",
    "  ",
    "\t",
    "中",
    "文字",
    "日本語",
    "😀",
    "👍🏽",
    "🏳️‍🌈",
    "🫠",
    "e\u0301",
    "\u0308",
    "𝔘𝔫𝔦",
    "﷽",
    "ꙮ",
    "Hello",
    " world",
    '{"x": 1}',
    "<tool_call>",
    "</tool_call>",
    "<|im_end|>",
    "<think>",
    "<|tool_call>",
    '<|"|>',
    "<turn|>",
    "<|eot_id|>",
    "<|call|>",
    "<｜tool▁sep｜>",
    "<tool_",
]
ALPHABET = st.characters(codec="utf-8", exclude_categories=("Cs", "Co", "Cn"))
TEXTS = st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(ALPHABET, max_size=6)), max_size=14).map(
    "".join
)


@st.composite
def cuts(draw, n: int):
    return draw(st.lists(st.integers(0, n), max_size=n + 1))


@pytest.mark.parametrize("name", ALL)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=TEXTS, data=st.data())
def test_random_text_any_split(name, text, data):
    tok = tok_for(name)
    ids = tok.encode(text)
    check(tok, ids, run(tok, ids, data.draw(cuts(len(ids)))))


def _vocab_sample(name: str) -> tuple[list[int], list[int], list[int]]:
    """(byte tokens, added tokens, vocabulary size) to draw raw ids from."""
    tok = tok_for(name)
    if tok.byte_fallback_ids:
        byte_ids = sorted(tok.byte_fallback_ids)
    else:  # byte-level BPE: the 256 one-byte tokens
        from chatsieve.byte_level import gpt2_byte_decoder

        byte_ids = sorted(i for c in gpt2_byte_decoder() if (i := tok.token_to_id(c)) is not None)
    assert len(byte_ids) == 256
    added = sorted(tok.added_tokens().values())
    return byte_ids, added, tok.hf.get_vocab_size()


def raw_ids(name: str):
    byte_ids, added, size = _vocab_sample(name)
    one = st.one_of(
        st.sampled_from(byte_ids),
        st.sampled_from(byte_ids[128:]),  # non-ASCII bytes: lead and continuation bytes
        st.sampled_from(added),
        st.integers(0, size - 1),
    )
    return st.lists(one, max_size=24)


@pytest.mark.parametrize("name", [*ALL, *_DECODER_VARIANTS])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_ids_any_split(name, data):
    """Raw ids (invalid UTF-8 included) still give exactly decode()."""
    tok = tok_for(name)
    ids = data.draw(raw_ids(name))
    check(tok, ids, run(tok, ids, data.draw(cuts(len(ids)))))


SHORT_CASES = [
    "中文😀",
    "a<tool_call>中</tool_call>b",
    "🏳️‍🌈<|im_end|>",
    " leading space",
    "x\n\n<turn|>\u0308y",
    '<|tool_call>call:f{a:<|"|>ꙮ𝔘<|"|>}<tool_call|>',
]


@pytest.mark.parametrize("name", [*ALL, "qwen3-vocab", *_DECODER_VARIANTS])
@pytest.mark.parametrize("text", SHORT_CASES)
def test_every_split_point(name, text):
    tok = tok_for(name)
    ids = tok.encode(text)
    for k in range(len(ids) + 1):
        check(tok, ids, run(tok, ids, [k]))
    check(tok, ids, run(tok, ids, range(len(ids))))  # one id at a time


def _ids(tok: Tokenizer, *tokens: str) -> list[int]:
    return [tok.token_to_id(t) for t in tokens]


def test_byte_level_holds_incomplete_utf8():
    qwen = tok_for("qwen3")
    e4, b8, ad, a = _ids(qwen, "ä", "¸", "Ń", "a")  # bytes E4 B8 AD = "中", then "a"
    d = Detokenizer(qwen)
    assert d.feed([e4]) == [] and d.feed([b8]) == []
    assert d.feed([ad]) == [Piece("中", (e4, b8, ad))]
    assert d.feed([a]) == [Piece("a", (a,))]
    # Bytes that cannot complete: U+FFFD together with what proved them invalid.
    d = Detokenizer(qwen)
    assert d.feed([e4, b8]) == []
    assert d.feed([a]) == [Piece(FFFD + "a", (e4, b8, a))]
    assert qwen.decode([e4, b8, a]) == FFFD + "a"
    # At finish, and before an added token, what is left is replaced, as decode() does.
    d = Detokenizer(qwen)
    assert d.feed([e4]) == [] and d.finish() == [Piece(FFFD, (e4,))]
    d = Detokenizer(qwen)
    assert d.feed([e4, 151657]) == [Piece(FFFD, (e4,)), Piece("<tool_call>", (151657,), special=True)]


def test_byte_fallback_run_is_held_until_it_ends():
    """Gemma decodes a run of <0xHH> tokens all-or-nothing: hold the run until it ends."""
    g = tok_for("gemma4")
    e4, b8, ad = _ids(g, "<0xE4>", "<0xB8>", "<0xAD>")
    a = g.encode("a")[0]
    assert g.decode([e4, b8, ad, a]) == "中a"
    assert g.decode([e4, b8, ad, e4, a]) == FFFD * 4 + "a"  # one bad byte spoils the run
    d = Detokenizer(g)
    assert d.feed([e4, b8, ad]) == []
    assert d.feed([e4]) == []
    assert d.feed([a]) == [Piece(FFFD * 4 + "a", (e4, b8, ad, e4, a))]
    d = Detokenizer(g)
    assert d.feed([e4, b8, ad]) == [] and d.finish() == [Piece("中", (e4, b8, ad))]


def test_real_byte_fallback_text():
    g = tok_for("gemma4")
    text = "x ꙮ𝔘 y"
    ids = g.encode(text)
    assert any(i in g.byte_fallback_ids for i in ids)  # the text really uses byte tokens
    pieces = run(g, ids, range(len(ids)))
    check(g, ids, pieces)
    assert all(FFFD not in p.text for p in pieces)


def test_added_tokens_are_own_pieces():
    qwen = tok_for("qwen3")
    ids = qwen.encode("a<tool_call><think>b</think>")
    pieces = Detokenizer(qwen).feed(ids)
    assert [(p.text, p.special) for p in pieces] == [
        ("a", False),
        ("<tool_call>", True),
        ("<think>", True),
        ("b", False),
        ("</think>", True),
    ]
    # The same characters spelled by ordinary tokens are ordinary text.
    spelled = [qwen.encode("<tool")[0], *qwen.encode("_call>")]
    assert not any(p.special for p in Detokenizer(qwen).feed(spelled))


def test_gemma_whitespace_tokens_decode_as_decode_does():
    # Gemma 3's tokenizer.json has "▁▁" (138) and "\n\n" (108) as added tokens; Gemma 4's
    # GGUF keeps them as ordinary pieces, so the added-token case needs Gemma 3's.
    g = tok_for("gemma3")
    ids = g.encode("a  \n\nb")
    pieces = Detokenizer(g).feed(ids) + Detokenizer(g).finish()
    assert [(p.text, p.special) for p in pieces if p.special] == [("  ", True), ("\n\n", True)]
    check(g, ids, pieces)


def test_leading_space_strip_on_first_token_only():
    for name in _DECODER_VARIANTS:
        tok = tok_for(name)
        ids = tok.encode(" Hello world")
        assert tok.decode(ids) == "Hello world"
        for k in range(len(ids) + 1):
            check(tok, ids, run(tok, ids, [k]))


def test_one_piece_per_token_and_logprobs():
    qwen = tok_for("qwen3")
    ids = qwen.encode("Hello world, 中文<tool_call>!")
    lps = [TokenLogprob(i, qwen.id_to_token(i), -0.5 * k) for k, i in enumerate(ids)]
    pieces = run(qwen, ids, [2, 3], logprobs=lps)
    check(qwen, ids, pieces)
    for p in pieces:
        assert p.logprobs is not None and [lp.token_id for lp in p.logprobs] == list(p.token_ids)
    assert all(len(p.token_ids) == 1 for p in pieces[:3])  # ASCII words: one piece each
    assert [lp for p in pieces for lp in p.logprobs] == lps
    assert all(p.logprobs is None for p in run(qwen, ids))
    with pytest.raises(ValueError, match="logprobs"):
        Detokenizer(qwen).feed(ids, lps[:-1])


def test_empty_feed_and_finish():
    d = Detokenizer(tok_for("gemma4"))
    assert d.feed([]) == [] and d.finish() == [] and d.finish() == []


@pytest.mark.parametrize("name", ["gemma4", "gemma4-strip"])
def test_linear_work_per_token(name):
    """Each token costs a bounded number of decode() calls over a bounded window (the
    window path); Gemma's own decoder is piecewise and calls decode() only for the first
    of each added token."""
    g = tok_for(name)
    assert g.piecewise == (name == "gemma4")
    calls: list[int] = []

    class Counting:
        def __getattr__(self, name):
            return getattr(g, name)

        def decode(self, ids, *, skip_special_tokens=False):
            calls.append(len(ids))
            return g.decode(ids, skip_special_tokens=skip_special_tokens)

    ids = g.encode("Some text with 中文 and ꙮ and\nnewlines " * 100)
    d = Detokenizer(Counting())
    for i in ids:
        d.feed([i])
    d.finish()
    if g.piecewise:
        assert len(calls) <= len({i for i in ids if g.is_added(i)}) and max(calls, default=1) == 1
    else:
        assert len(calls) <= 2 * len(ids) and max(calls) <= 16


# -- StopChecker --------------------------------------------------------------------------


def texts(pieces) -> list[str]:
    return [p.text for p in pieces]


def feed_all(sc: StopChecker, pieces, one_by_one=True) -> list[Piece]:
    out: list[Piece] = []
    if one_by_one:
        for p in pieces:
            out += sc.feed([p])
    else:
        out += sc.feed(list(pieces))
    return out + sc.finish()


def test_stop_string_across_pieces():
    for one in (True, False):
        sc = StopChecker(stop=["STOP"])
        out = feed_all(sc, [Piece("Hel"), Piece("lo ST"), Piece("OP more"), Piece("x")], one)
        assert "".join(texts(out)) == "Hello " and sc.stopped and sc.stop_reason == "STOP"
        assert sc.feed([Piece("again")]) == [] and sc.finish() == []


def test_include_stop_str_in_output():
    sc = StopChecker(stop=["STOP"], include_stop_str_in_output=True)
    out = feed_all(sc, [Piece("Hello ST"), Piece("OP more")])
    assert "".join(texts(out)) == "Hello STOP" and sc.stop_reason == "STOP"


def test_held_tail_released_at_finish():
    sc = StopChecker(stop=["STOP", "<end>"])
    assert texts(sc.feed([Piece("abc ST")])) == ["abc "]
    assert texts(sc.feed([Piece("O")])) == []
    assert texts(sc.feed([Piece("x <e")])) == ["ST", "O", "x "]
    assert texts(sc.finish()) == ["<e"] and not sc.stopped and sc.stop_reason is None


def test_first_completed_match_wins():
    # "bcd" completes before "abcdef" would: generation would have stopped there.
    for one in (True, False):
        sc = StopChecker(stop=["abcdef", "bcd"])
        out = feed_all(sc, [Piece("xabc"), Piece("defg")], one)
        assert "".join(texts(out)) == "xa" and sc.stop_reason == "bcd"
    # Same end: the one starting first.
    sc = StopChecker(stop=["cd", "bcd"])
    assert "".join(texts(feed_all(sc, [Piece("abcde")]))) == "a" and sc.stop_reason == "bcd"


def test_stop_token_id():
    eos = Piece("<|im_end|>", (151645,), special=True)
    sc = StopChecker(stop=["xyz"], stop_token_ids=[151645])
    out = sc.feed([Piece("ab", (1,)), Piece("xy", (2,)), eos, Piece("after", (3,))])
    # Held "xy" is released (no stop string completed), the stop token never is.
    assert out == [Piece("ab", (1,)), Piece("xy", (2,))]
    assert sc.stopped and sc.stop_reason == 151645
    assert sc.feed([Piece("more", (4,))]) == [] and sc.finish() == []
    # Without stop strings nothing is held.
    sc = StopChecker(stop_token_ids={7})
    assert sc.feed([Piece("a", (1,))]) == [Piece("a", (1,))]
    assert sc.feed([Piece("b", (7,)), Piece("c", (8,))]) == [] and sc.stop_reason == 7


def test_special_pieces_are_never_split():
    call = Piece("<tool_call>", (151657,), special=True)
    # A stop string inside a special piece's text does not match there.
    sc = StopChecker(stop=["call", "l>x"])
    out = feed_all(sc, [Piece("a"), call, Piece("x")])
    assert out == [Piece("a"), call, Piece("x")] and not sc.stopped
    # The same text from ordinary pieces does match.
    sc = StopChecker(stop=["call"])
    assert "".join(texts(feed_all(sc, [Piece("<tool_"), Piece("call>")]))) == "<tool_"


def test_stop_string_starting_with_a_special_token():
    call = Piece("<tool_call>", (151657,), special=True)
    stop = ["<tool_call>x"]
    # It matches across the special piece and the text after it ...
    sc = StopChecker(stop=stop)
    assert sc.feed([Piece("a", (1,)), call]) == [Piece("a", (1,))]  # the special piece is held
    assert sc.feed([Piece("xyz", (2,))]) == [] and sc.stop_reason == "<tool_call>x"
    sc = StopChecker(stop=stop, include_stop_str_in_output=True)
    assert feed_all(sc, [call, Piece("xyz", (2,))]) == [call, Piece("x", (2,))]
    # ... and when it does not, the special piece comes out intact, and later ones still match.
    sc = StopChecker(stop=stop)
    assert sc.feed([call]) == []
    assert sc.feed([Piece("y", (2,))]) == [call, Piece("y", (2,))]
    assert sc.feed([call]) == [] and sc.feed([Piece("x", (3,))]) == [] and sc.stopped
    # Text that spells the marker with ordinary tokens also matches (it is a text stop).
    sc = StopChecker(stop=stop)
    assert feed_all(sc, [Piece("<tool_"), Piece("call>"), Piece("x")]) == [] and sc.stopped


def _lp(i: int) -> TokenLogprob:
    return TokenLogprob(i, str(i), -float(i))


def _p(text: str, i: int) -> Piece:
    return Piece(text, (i,), (_lp(i),))


def test_cut_keeps_and_drops_ids_and_logprobs():
    pieces = [_p("ab", 1), _p("cS", 2), _p("TO", 3), _p("Pz", 4), _p("q", 5)]
    sc = StopChecker(stop=["STOP"])
    # "cS": "c" is kept, so token 2 and its logprob stay; 3 and 4 are wholly cut.
    assert feed_all(sc, pieces) == [_p("ab", 1), Piece("c", (2,), (_lp(2),))]
    sc = StopChecker(stop=["STOP"], include_stop_str_in_output=True)
    assert feed_all(sc, pieces, one_by_one=False) == [
        _p("ab", 1),
        _p("cS", 2),
        _p("TO", 3),
        Piece("P", (4,), (_lp(4),)),
    ]


def test_held_part_of_a_piece_carries_no_ids():
    sc = StopChecker(stop=["STOP"])
    # Token 9 produced "abcS": it goes out with "abc"; the held "S" carries no id.
    assert sc.feed([_p("abcS", 9)]) == [_p("abc", 9)]
    assert sc.finish() == [Piece("S", (), ())]
    sc = StopChecker(stop=["STOP"])
    assert sc.feed([_p("abcS", 9)]) == [_p("abc", 9)]
    assert sc.feed([_p("TOP", 10)]) == [] and sc.stopped


def test_empty_and_duplicate_stop_strings_are_ignored():
    sc = StopChecker(stop=["", "ab", "ab"])
    assert "".join(texts(feed_all(sc, [Piece("xaby")]))) == "x"
    sc = StopChecker(stop="ab")  # a single string is one stop string, not its characters
    assert "".join(texts(feed_all(sc, [Piece("a b ab")]))) == "a b "


def _reference_stop(text_pieces: list[Piece], stops: list[str], include: bool) -> tuple[str, bool]:
    """Brute force: scan every end offset; cut at the first one where a stop string ends."""
    text = "".join(p.text for p in text_pieces)
    inside = set()
    pos = 0
    for p in text_pieces:
        if p.special:
            inside.update(range(pos + 1, pos + len(p.text)))
        pos += len(p.text)
    for end in range(1, len(text) + 1):
        found = [s for s in stops if s and text.endswith(s, 0, end)]
        found = [s for s in found if end not in inside and end - len(s) not in inside]
        if found:
            s = max(found, key=len)
            return (text[:end] if include else text[: end - len(s)]), True
    return text, False


PIECE_TEXTS = st.lists(
    st.one_of(
        st.builds(Piece, st.text("abST<>_", max_size=5)),
        st.just(Piece("<tool_call>", (151657,), special=True)),
        st.just(Piece("<b>", (5,), special=True)),
    ),
    max_size=12,
)
STOPS = st.lists(
    st.one_of(st.text("abST<>_", min_size=1, max_size=4), st.sampled_from(["<tool_call>a", "<b>", "b><"])),
    min_size=1,
    max_size=3,
)


@settings(max_examples=200, deadline=None)
@given(
    pieces=PIECE_TEXTS,
    stops=STOPS,
    cut_from_text=st.lists(st.tuples(st.integers(0, 99), st.integers(1, 6)), max_size=3),
    include=st.booleans(),
    data=st.data(),
)
def test_stop_checker_any_split_matches_reference(pieces, stops, cut_from_text, include, data):
    whole = "".join(p.text for p in pieces)
    if whole:  # also stop strings cut from the text itself, so that matches are frequent
        stops += [whole[a % len(whole) : a % len(whole) + n] for a, n in cut_from_text]
    expected, stopped = _reference_stop(pieces, stops, include)
    sc = StopChecker(stop=stops, include_stop_str_in_output=include)
    out: list[Piece] = []
    bounds = [0, *sorted(data.draw(cuts(len(pieces)))), len(pieces)]
    for a, b in zip(bounds, bounds[1:]):
        out += sc.feed(pieces[a:b])
    out += sc.finish()
    assert "".join(texts(out)) == expected
    assert sc.stopped == stopped
    inputs_special = [p for p in pieces if p.special]
    assert all(p in inputs_special for p in out if p.special)  # special pieces intact


@pytest.mark.parametrize("name", ["qwen3", "gemma4"])
def test_detokenizer_then_stop_checker_on_real_ids(name):
    tok = tok_for(name)
    if name == "qwen3":
        text, call, end = "Sure.<tool_call>\n{}\n</tool_call><|im_end|>ignored", "<tool_call>", "<|im_end|>"
    else:
        text, call, end = "Sure.<|tool_call>call:f{}<tool_call|><turn|>ignored", "<|tool_call>", "<turn|>"
    ids = tok.encode(text)
    for k in range(len(ids) + 1):
        d, sc = Detokenizer(tok), StopChecker(stop=["NEVER"], stop_token_ids=tok.stop_token_ids)
        out = sc.feed(d.feed(ids[:k])) + sc.feed(d.feed(ids[k:])) + sc.feed(d.finish()) + sc.finish()
        assert "".join(texts(out)) == text[: text.index(end)]
        assert sc.stop_reason == tok.single_token_id(end)
        assert Piece(call, (tok.single_token_id(call),), special=True) in out
        assert not any(i in tok.stop_token_ids for p in out for i in p.token_ids)


def test_stop_matching_work_does_not_grow_with_the_number_of_stops():
    # 10,000 stop strings sharing long prefixes with the text: a scan per stop string would do
    # 10,000 searches per piece; the automaton takes at most two transitions per character.
    stops = [f"aaaa{i:05d}" for i in range(10_000)] + ["ab" * 20 + "!"]
    text = ("aaaa" + "ab" * 19 + "aaa0") * 300
    sc = StopChecker(stop=stops)
    out = feed_all(sc, [Piece(text[k : k + 3]) for k in range(0, len(text), 3)])
    assert "".join(texts(out)) == text and not sc.stopped
    assert sc._auto.steps <= 2 * len(text)
    sc = StopChecker(stop=stops)
    out = feed_all(sc, [Piece(c) for c in text[:50] + "aaaa01234 tail"])
    assert "".join(texts(out)) == text[:50] and sc.stop_reason == "aaaa01234"
