"""The families of issue 12: HY3's token-suffix builder (the suffix value is the
tokenizer's; an arbitrary one is used here), registration and docs of every new
family, and a property test recombining pieces of each family's own fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chatsieve import StreamParser, formats, parse
from chatsieve.fixtures import iter_fixture_files, load_cases, normalized
from chatsieve.formats.hunyuan import HUNYUAN
from chatsieve.formats.hy3 import hy3_format

TOOLS = [
    {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}
]


def test_hy3_suffix_applies_to_every_tag():
    spec = hy3_format("_s9")
    for tag in ("<think_s9>", "</think_s9>", "<tool_calls_s9>", "</tool_calls_s9>"):
        assert tag in spec.delimiters
    text = (
        "<think_s9>hm</think_s9><tool_calls_s9><tool_call_s9>get_weather<tool_sep_s9>"
        "<arg_key_s9>city</arg_key_s9><arg_value_s9>Paris</arg_value_s9></tool_call_s9></tool_calls_s9>"
    )
    msg = parse(text, spec, tools=TOOLS)
    assert msg.reasoning == "hm"
    assert [(c.name, c.arguments) for c in msg.tool_calls] == [("get_weather", '{"city":"Paris"}')]
    assert msg.diagnostics == []


def test_hy3_suffixed_spec_leaves_unsuffixed_tags_as_text():
    msg = parse(
        "<tool_calls><tool_call>get_weather<tool_sep></tool_call></tool_calls>",
        hy3_format("_s9"),
        tools=TOOLS,
    )
    assert msg.tool_calls == []
    assert msg.content == "<tool_calls><tool_call>get_weather<tool_sep></tool_call></tool_calls>"


def test_hy3_empty_suffix_is_hunyuan_and_bad_suffix_is_refused():
    assert hy3_format("") is HUNYUAN
    assert formats.get("hy_v3") is HUNYUAN
    with pytest.raises(ValueError, match="token suffix"):
        hy3_format("a>b")


# ---- property: shuffled pieces of each family's own fixtures ----------------------------

NEW_FAMILIES = (
    "seed_oss", "nemotron", "nemotron3", "phi4_mini", "jamba", "apriel", "lfm2", "functiongemma",
    "cohere_command", "granite", "granite4", "granite_20b_fc", "xlam", "hunyuan_a13b", "internlm2", "intern_s1", "ernie45",
    "olmo3", "step3", "step3p5", "longcat", "apertus", "gigachat3", "minimax_m3", "kimi_k3", "minicpm5",
    "functionary_v31", "functionary_v32", "kimi_vl",
)  # fmt: skip
_CASES = [c for f in iter_fixture_files([Path(__file__).parent / "fixtures"]) for c in load_cases(f)]
PIECES: dict[str, list[str]] = {}


def _pieces(text: str) -> list[str]:
    """The text cut at every delimiter-ish boundary: tags, brackets, newlines."""
    out, start = [], 0
    for i, ch in enumerate(text):
        if ch in "<>[]{}\n" and i > start:
            out.append(text[start:i])
            start = i
    out.append(text[start:])
    return [p for p in out if p]


for _name in NEW_FAMILIES:
    PIECES[_name] = sorted({p for c in _CASES if c.format == _name for p in _pieces(c.text)})


def test_every_new_family_is_registered_with_fixtures_and_docs():
    for name in NEW_FAMILIES:
        spec = formats.get(name)
        assert PIECES[name], f"{name} has no fixture cases"
        assert spec.description and spec.reasoning_doc and spec.calls_doc, name  # tokenizer_doc: "" = text mode


@pytest.mark.parametrize("name", NEW_FAMILIES)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_recombined_fixture_pieces_never_raise_and_stream_as_batch(name, data):
    pieces = data.draw(st.lists(st.sampled_from(PIECES[name]), max_size=30), label="pieces")
    text = "".join(pieces)
    thinking = data.draw(st.sampled_from([None, True, False]), label="thinking")
    stream = data.draw(st.booleans(), label="stream_arguments")
    tools = next(c.options["tools"] for c in _CASES if c.format == name)
    batch = parse(text, name, tools=tools, thinking=thinking, stream_arguments=stream)
    cuts = sorted(set(data.draw(st.lists(st.integers(0, len(text)), max_size=8), label="cuts")))
    p = StreamParser(name, tools=tools, thinking=thinking, stream_arguments=stream)
    for a, b in zip([0, *cuts], [*cuts, len(text)]):
        p.feed(text[a:b])
    p.finish()
    assert normalized(p.message) == normalized(batch)
