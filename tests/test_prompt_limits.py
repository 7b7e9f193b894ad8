"""An over-long prompt is refused after encoding about as many tokens as the limit, not the whole
prompt (issue 19, item 4), and the piecewise count never exceeds the true count."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from models import chat_tokenizer

from chatsieve.prompt import PromptTooLong, render_prompt
from chatsieve.prompt import truncation as prompt_module
from chatsieve.prompt.truncation import min_tokens as _min_tokens
from chatsieve.tokenizer import load_tokenizer

WORDS = ["hello", " ", "  ", "\n", "\n\n", "日本語", "<tool_call>", "x" * 70, "123456", "!!", "é", "\t", "▁"]


@pytest.mark.parametrize("family", ["qwen3", "gemma4", "llama3"])
@settings(max_examples=15, deadline=None)
@given(st.lists(st.sampled_from(WORDS), min_size=1, max_size=400), st.integers(1, 200))
def test_piecewise_count_is_a_lower_bound(family, words, limit):
    tok = chat_tokenizer(family)
    text = "".join(words) * (1 + 6 * limit * 4 // max(len("".join(words)), 1))
    true = len(tok.hf.encode(text, add_special_tokens=False).ids)
    old = prompt_module._COUNT_PIECE
    prompt_module._COUNT_PIECE = 64  # many cuts
    try:
        assert _min_tokens(tok, text, limit) <= true
    finally:
        prompt_module._COUNT_PIECE = old


def test_an_over_long_prompt_is_refused_after_about_limit_tokens(monkeypatch):
    base = chat_tokenizer("qwen3")
    tok = load_tokenizer(base.hf, config=base.config)
    hf = tok.hf
    encoded = [0]
    real = hf.encode_batch

    class Counting:
        def __getattr__(self, name):
            return getattr(hf, name)

        def encode_batch(self, texts, **kw):
            encoded[0] += sum(map(len, texts))
            return real(texts, **kw)

    monkeypatch.setattr(tok, "hf", Counting())
    text = "The weather in Paris is sunny and mild today. " * 60_000  # 2.8 MB, ~600k tokens
    with pytest.raises(PromptTooLong) as info:
        render_prompt([{"role": "user", "content": text}], tokenizer=tok, token_limit=20_000)
    assert not info.value.exact and info.value.tokens > 20_000
    assert encoded[0] < len(text) / 10  # before: the whole prompt was encoded first
