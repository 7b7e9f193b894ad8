"""render_prompt skips the marking pass when a regex over the caller strings says no string can
need a marker (`_Delimiters.maybe_marked`); the prompts are those of the full pass, on random
contents made of delimiters, their halves and the characters around them."""

from __future__ import annotations

import copy
import dataclasses
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_prompt_isolation import FAMILIES, TOOLS, _contents, conversation, template
from test_prompt_isolation import tokenizer as chat_tokenizer

from chatsieve.prompt import PromptError, render_prompt
from chatsieve.prompt import isolation as prompt_module
from chatsieve.prompt.context import prepare_messages


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_the_shortcut_changes_no_prompt(family, monkeypatch):
    rel, fam_kw, _, _ = FAMILIES[family]
    args = {"tokenizer": chat_tokenizer(family), "template": template(rel), "tools": TOOLS, **fam_kw}
    real = prompt_module._active_delimiters

    def full_pass(*a, **kw):
        found = real(*a, **kw)
        return dataclasses.replace(found, maybe_marked=None) if found is not None else None

    skipped = []

    @settings(max_examples=30, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(system=_contents(family), user=_contents(family), tool=_contents(family), pad=st.sampled_from(["", " ", "\n"]))
    def run(system, user, tool, pad):
        conv = conversation(family, system=pad + system + pad, user=user + pad, tool=pad + tool)
        fast = render_prompt(conv, **args)
        delims = real(args["tokenizer"], fam_kw.get("format"), fam_kw.get("markers"))
        caller = prompt_module._strings(prepare_messages(conv)) + prompt_module._strings(TOOLS)
        skipped.append(delims.maybe_marked.search("\x00".join(caller)) is None)
        with monkeypatch.context() as m:
            m.setattr(prompt_module, "_active_delimiters", full_pass)
            full = render_prompt(conv, **args)
        assert (fast.text, fast.token_ids, fast.isolated_spans) == (full.text, full.token_ids, full.isolated_spans)

    run()
    assert any(skipped) and not all(skipped), "both the shortcut and the full pass should be seen"


def outcome(conv, **kw):
    """The prompt's text, ids and spans, or the refusal (a template that cannot be isolated
    refuses alike in both passes)."""
    try:
        p = render_prompt(conv, **kw)
    except PromptError as e:
        return ("refused", str(e))
    return (p.text, p.token_ids, p.isolated_spans)


LONG = "You are a careful agent working in a large repository. " * 12  # past the scan memo's length


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_decoded_json_and_the_scan_memos_change_no_prompt(family, monkeypatch):
    """A server's request (decoded JSON, rendered without copies; long strings and the tools scanned
    once per content, then looked up) gets the prompt of the full pass, on random contents at the
    edges of long strings and in a tool's description, each rendered twice (the second from the
    memos); the caller's data is left as it was."""
    rel, fam_kw, _, _ = FAMILIES[family]
    args = {"tokenizer": chat_tokenizer(family), "template": template(rel), **fam_kw}
    real = prompt_module._active_delimiters

    def full_pass(*a, **kw):
        found = real(*a, **kw)
        return dataclasses.replace(found, maybe_marked=None) if found is not None else None

    @settings(max_examples=20, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(head=_contents(family), tail=_contents(family), user=_contents(family), about=_contents(family),
           only_tools=st.booleans())
    def run(head, tail, user, about, only_tools):
        if only_tools:  # the tools alone may need marks
            head = tail = user = ""
        conv = conversation(family, system=head + LONG + tail, user=user, tool=LONG + tail)
        tools = [*TOOLS, {"type": "function", "function": {
            "name": "note", "description": about + LONG, "parameters": {"type": "object", "properties": {}}}}]
        conv_json, tools_json = json.loads(json.dumps(conv)), json.loads(json.dumps(tools))
        before = copy.deepcopy((conv_json, tools_json))
        served = [outcome(conv_json, tools=tools_json, decoded_json=True, **args) for _ in range(2)]
        assert (conv_json, tools_json) == before, "the caller's data changed"
        with monkeypatch.context() as m:
            m.setattr(prompt_module, "_active_delimiters", full_pass)
            full = outcome(conv, tools=tools, **args)
        assert served == [full, full]

    run()
