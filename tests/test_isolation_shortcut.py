"""render_prompt skips the marking pass when a regex over the caller strings says no string can
need a marker (`_Delimiters.maybe_marked`); the prompts are those of the full pass, on random
contents made of delimiters, their halves and the characters around them."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_prompt_isolation import FAMILIES, TOOLS, _contents, conversation, template
from test_prompt_isolation import tokenizer as chat_tokenizer

from chatsieve import prompt as prompt_module
from chatsieve.prompt import render_prompt


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
        caller = prompt_module._strings(prompt_module._prepare_messages(conv)) + prompt_module._strings(TOOLS)
        skipped.append(delims.maybe_marked.search("\x00".join(caller)) is None)
        with monkeypatch.context() as m:
            m.setattr(prompt_module, "_active_delimiters", full_pass)
            full = render_prompt(conv, **args)
        assert (fast.text, fast.token_ids, fast.isolated_spans) == (full.text, full.token_ids, full.isolated_spans)

    run()
    assert any(skipped) and not all(skipped), "both the shortcut and the full pass should be seen"
