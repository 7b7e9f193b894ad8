"""Finds the real tokenizers and chat templates (../shared/models) for tests.

Looks at $CHATSIEVE_MODELS, then ../shared/models beside the checkout. Without
either, tests skip with the reason -- except under CI (CHATSIEVE_REQUIRE_MODELS=1),
where a missing model directory fails the test instead.
"""

from __future__ import annotations

import functools
import lzma
import os
from pathlib import Path

import pytest

_REPO = Path(__file__).resolve().parent.parent


def models_dir() -> Path:
    """The shared models directory, or skip (fail under CI) with the reason."""
    candidates = []
    env = os.environ.get("CHATSIEVE_MODELS")
    if env:
        candidates.append(Path(env))
    candidates.append(_REPO.parent / "shared" / "models")
    for c in candidates:
        if (c / "README.md").exists() or (c / "qwen3").is_dir():
            return c
    reason = (
        "real tokenizers/templates not found: set CHATSIEVE_MODELS or place shared/models "
        f"beside the checkout (looked in: {', '.join(map(str, candidates))})"
    )
    if os.environ.get("CHATSIEVE_REQUIRE_MODELS"):
        pytest.fail(reason)
    pytest.skip(reason)


def model_path(rel: str) -> Path:
    p = models_dir() / rel
    if not p.exists():
        msg = f"missing model file {p}"
        if os.environ.get("CHATSIEVE_REQUIRE_MODELS"):
            pytest.fail(msg)
        pytest.skip(msg)
    return p


@functools.cache
def gemma4_tokenizer():
    """Gemma 4's tokenizer, derived from Gemma 3's as shared/models/README shows."""
    from chatsieve.tokenizer import derive_gemma4_tokenizer

    base = models_dir()
    return derive_gemma4_tokenizer(base / "gemma3", base / "gemma4/special_tokens.json")


def gemma4_tokenizer_json() -> str:
    """The derived Gemma 4 tokenizer as tokenizer.json text."""
    return gemma4_tokenizer().hf.to_str()


@functools.cache
def mistral_tekken_tokenizer():
    """Mistral's real Tekken v3 vocabulary (Mistral Nemo), as a `tokenizers.Tokenizer`.

    shared/models/mistral/tekken_240718.json.xz is a mistral_common (tiktoken-style)
    file, not a `tokenizers` one: transformers' Tekken converter (which takes the
    special-token layout from mistral_common) turns it into one. Checked here: the
    control tokens have mistral_common's ids (`[TOOL_CALLS]` 9, `</s>` 2) and ordinary
    text -- "[TOOL_CALLS]" spelled out included -- encodes to mistral_common's ids.
    """
    import tempfile
    import warnings

    from mistral_common.tokens.tokenizers.tekken import Tekkenizer

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from transformers.integrations.mistral.tokenizer import MistralConverter

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "tekken.json"
        path.write_bytes(lzma.open(model_path("mistral/tekken_240718.json.xz")).read())
        hf = MistralConverter(str(path)).converted()
        tekken = Tekkenizer.from_file(path)
    for token, want in (("[TOOL_CALLS]", 9), ("</s>", 2), ("[INST]", 3)):
        got = (hf.token_to_id(token), tekken.get_special_token(token))
        assert got == (want, want), f"Tekken conversion: {token} has ids {got}, expected {want}"
    for sample in ("Hello, wörld! 你好 🌦️\n  x = [1, 2]", 'get_weather[ARGS]{"city": "Paris"}'):
        ids = hf.encode(sample, add_special_tokens=False).ids
        assert ids == tekken.encode(sample, bos=False, eos=False), f"Tekken conversion differs on {sample!r}"
    spelled = [i for part in ("[", "TOOL_CALLS]") for i in hf.encode(part, add_special_tokens=False).ids]
    assert 9 not in spelled and hf.decode(spelled) == "[TOOL_CALLS]"
    assert 9 not in tekken.encode("[TOOL_CALLS]", bos=False, eos=False)  # text never makes the control token
    return hf


_TOKENIZER_DIRS = {
    "qwen3": "qwen3",
    "deepseek": "deepseek",
    "deepseek_v4": "deepseek/v4",
    "gpt-oss": "gpt-oss",
    "llama3": "llama3",
    "glm5": "glm/glm-5",
    "kimi_k2": "kimi-k2",  # tiktoken file, converted at load (chatsieve/tiktoken_bpe.py)
    "llama4": "llama4",  # tiktoken file
    "hunyuan": "hunyuan",  # tiktoken file
    "gemma3": "gemma3",
}


@functools.cache
def _load(name: str):
    from chatsieve.tokenizer import load_tokenizer

    if name == "gemma4":
        return gemma4_tokenizer()
    if name == "mistral":  # Tekken v3, converted (see mistral_tekken_tokenizer)
        return load_tokenizer(mistral_tekken_tokenizer(), config={"bos_token": "<s>", "eos_token": "</s>"})
    if name not in _TOKENIZER_DIRS:
        raise KeyError(f"no test tokenizer named {name!r}; known: gemma4, {', '.join(_TOKENIZER_DIRS)}")
    return load_tokenizer(model_path(_TOKENIZER_DIRS[name]))


def tokenizer(name: str):
    """A real tokenizer by short name (gemma4 is derived from Gemma 3's, see README)."""
    models_dir()  # skip (or fail under CI) when the models are absent
    return _load(name)


@functools.cache
def chat_tokenizer(family: str):
    """A real tokenizer as chat templates see it, by directory under the models dir
    (gemma4: the derived one, given Gemma's bos/eos/pad tokens)."""
    from chatsieve.tokenizer import load_tokenizer

    if family == "gemma4":
        config = {"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>"}
        return load_tokenizer(gemma4_tokenizer().hf, config=config)
    return load_tokenizer(model_path(family))
