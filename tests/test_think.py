"""`basic_reasoning()`: a reasoning-only format for any marker pair, checked with the
fixture runner (batch, every split point, random chunkings) on a custom pair."""

from __future__ import annotations

import pytest

from chatsieve import parse
from chatsieve.fixtures import Case, check_case
from chatsieve.formats import get
from chatsieve.formats.think import basic_reasoning

SEED = basic_reasoning("test_seed_think", "<seed:think>", "</seed:think>", end=("<seed:eos>",))
BRACKET = basic_reasoning(
    "test_bracket", ("[THINK]", "[REASON]"), "[/THINK]", starts_in_reasoning=False, strip=("[PAD]",)
)

CASES = [
    (SEED, None, "<seed:think>Plan.</seed:think>Answer.", {"reasoning": "Plan.", "content": "Answer."}),
    (SEED, True, "Plan.</seed:think>Answer.", {"reasoning": "Plan.", "content": "Answer."}),
    (SEED, True, "Plan without end", {"reasoning": "Plan without end", "content": None}),
    (SEED, None, "No block.<think>x</think>", {"reasoning": None, "content": "No block.<think>x</think>"}),
    (SEED, None, "Done.<seed:eos>later", {"content": "Done.", "diagnostics": ["text after the end"]}),
    (BRACKET, True, "Not reasoning.", {"reasoning": None, "content": "Not reasoning."}),
    (BRACKET, None, "[REASON]a[/THINK]b[PAD]c", {"reasoning": "a", "content": "bc", "diagnostics": 0}),
]


@pytest.mark.parametrize(("spec", "thinking", "text", "expect"), CASES)
def test_custom_markers(spec, thinking, text, expect):
    case = Case(
        name=text, file="test_think.py", format=spec, segments=[(text, False)], expect=expect,
        options={"thinking": thinking},
    )  # fmt: skip
    assert not check_case(case), "\n".join(map(str, check_case(case)))


def test_defaults_and_registry():
    spec = basic_reasoning("x", "<r>", "</r>")
    assert spec.reasoning_open == ("<r>",) and spec.reasoning_close == ("</r>",)
    assert not spec.default_thinking and spec.thinking_starts_in_reasoning and spec.codec is None
    assert get("think").delimiters == ("</think>", "<think>")
    assert get("basic") is get("think")
    msg = parse("<r>a</r>b", spec)
    assert (msg.reasoning, msg.content) == ("a", "b")


@pytest.mark.parametrize(("open_", "close"), [("", "</r>"), ("<r>", ()), ("<r>", "<r>")])
def test_bad_markers_say_what_is_wrong(open_, close):
    with pytest.raises(ValueError, match="basic_reasoning"):
        basic_reasoning("bad", open_, close)
