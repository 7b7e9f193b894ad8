"""Values that mention the call's own tags, in every XML key/value family (docs/policies.md,
"Tags inside XML-style values"): a tag written inline in prose — a space before and after it,
no line break — is never the template's shape, so any mix of them comes back byte for byte,
whole or streamed, with `stream_arguments` on or off."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chatsieve import StreamParser, formats, parse
from chatsieve.args.k2_horizon import K2_HORIZON_SYNTAX
from chatsieve.args.xml_kv import XmlKvCodec
from chatsieve.fixtures import normalized
from chatsieve.formats.muse_glimmer import ATEM_SYNTAX

# families whose XML body sits behind another codec or engine: its syntax, and the region's open and
# close as the template writes them around a call (and what the output has around that region)
OTHER = {
    "k2_horizon": (K2_HORIZON_SYNTAX, ("<ifm|tool_calls><ifm|tool_call>", "</ifm|tool_call></ifm|tool_calls>")),
    "muse_glimmer": (ATEM_SYNTAX, ("<atem:function_calls>\n", "</atem:function_calls>")),
}
AROUND = {"muse_glimmer": (" to=write_file<|message|>", "<|eot|>")}
FAMILIES = sorted(
    [n for n in formats.names()
     if formats.get(n).name == n and isinstance(formats.get(n).codec, type) and issubclass(formats.get(n).codec, XmlKvCodec)]
    + list(OTHER)
)  # fmt: skip
TOOLS = [{"name": "write_file", "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}}}}]
# what wraps a call where the region's open and close markers alone do not (Step-3's call type)
WRAP = {"step3": ("<｜tool_call_begin｜>function<｜tool_sep｜>", "<｜tool_call_end｜>")}


def test_every_xml_family_is_here() -> None:
    assert {"qwen3_coder", "step3p5", "nemotron3", "seed_oss", "glm45", "glm47", "minimax_m2", "hunyuan",
            "deepseek_v32", "deepseek_v4", "step3", "minicpm5", "deepseek_v41", "hy_v4", "hy3_opensource", "ling3",
            "laguna", "mimo", "qwen35", "k2_horizon", "muse_glimmer"} <= set(FAMILIES)  # fmt: skip


def _shapes(name: str):
    spec = formats.get(name)
    syn, (r_open, r_close) = OTHER.get(name) or (spec.codec.syntax, (spec.call_open[0], spec.call_close[0]))
    before, after = AROUND.get(name, ("", ""))
    nl = "\n" if syn.trim_newline else ""

    def q(s: str) -> str:
        return f'"{s}"' if syn.quoted else s

    def key(k: str) -> str:
        return syn.key_open + q(k) + (' string="true"' if syn.string_attr else "") + syn.key_close

    def param(k: str, v: str) -> str:
        return key(k) + syn.value_open + nl + v + nl + syn.value_close + "\n"

    end_name = syn.name_close[0] if syn.name_close else ""  # HY V4: the name runs to the first key

    def call(value: str) -> str:
        pre, post = WRAP.get(name, ("", ""))
        head = before + r_open + pre + syn.call_open + q("write_file") + end_name
        return head + param("path", "a.txt") + param("content", value) + syn.call_close + post + r_close + after

    call.params = lambda pairs: "".join(param(k, v) for k, v in pairs)  # type: ignore[attr-defined]

    def example(pairs, region: bool) -> str:
        pre, post = WRAP.get(name, ("", ""))
        body = syn.call_open + q("f") + end_name + call.params(pairs) + syn.call_close
        return (r_open + pre + body + post + r_close) if region else call.params(pairs)

    call.example = example  # type: ignore[attr-defined]
    tags = [syn.value_close, syn.value_close[:-1] + "1>", key("x"), key("path"), key("content"),
            syn.call_close, syn.call_open and syn.call_open + q("f") + end_name, *syn.openers, *syn.closers,
            syn.value_open]  # fmt: skip
    # a region's end (or the turn's) inside a value ends the region wherever it stands: not prose
    tags = [t for t in tags if t and t not in syn.structural and t != r_close and "\n" not in t]
    return call, tags


WORDS = ["a", "word", "x = 1", '"""', "```", "{", "}", "<", ">", "/", "=", "</", "<b>", "</b>", "tags:", "ok."]


@pytest.mark.parametrize("name", FAMILIES)
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_tags_written_inline_are_the_value(name: str, data) -> None:
    call, tags = _shapes(name)
    pieces = data.draw(st.lists(st.sampled_from(WORDS + tags), min_size=1, max_size=12), label="pieces")
    value = "say " + " ".join(pieces) + " end"
    text = call(value)
    want = {"path": "a.txt", "content": value}
    for stream in (False, True):
        msg = parse(text, name, tools=TOOLS, thinking=False, stream_arguments=stream)
        assert [(c.name, json.loads(c.arguments)) for c in msg.tool_calls] == [("write_file", want)], msg
        assert not msg.content
        cut = data.draw(st.integers(0, len(text)), label="cut")
        p = StreamParser(name, tools=TOOLS, thinking=False, stream_arguments=stream)
        p.feed(text[:cut])
        p.feed(text[cut:])
        p.finish()
        assert normalized(p.message) == normalized(msg)


@pytest.mark.parametrize("name", FAMILIES)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_an_example_in_a_value_is_the_value(name: str, data) -> None:
    """A value holding an example in the family's own syntax, as its template writes it (a whole
    call with its region's markers, or only parameters, given ones or not), quoted as code is."""
    call, _ = _shapes(name)
    pairs = data.draw(st.lists(st.tuples(st.sampled_from(["path", "content", "x", "mode"]),
                                         st.sampled_from(["hi", "a b", "x.txt", "1"])), min_size=1, max_size=3),
                      label="pairs")  # fmt: skip
    region = data.draw(st.booleans(), label="region")
    value = 'EX = """\n' + call.example(pairs, region) + '"""'
    text = call(value)
    for stream in (False, True):
        msg = parse(text, name, tools=TOOLS, thinking=False, stream_arguments=stream)
        assert [(c.name, json.loads(c.arguments)) for c in msg.tool_calls] == [
            ("write_file", {"path": "a.txt", "content": value})], msg
        assert not msg.content
