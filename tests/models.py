"""Finds the real tokenizers and chat templates (../shared/models) for tests.

Looks at $CHATSIEVE_MODELS, then ../shared/models beside the checkout. Without
either, tests skip with the reason -- except under CI (CHATSIEVE_REQUIRE_MODELS=1),
where a missing model directory fails the test instead.
"""

from __future__ import annotations

import functools
import json
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
def gemma4_tokenizer_json() -> str:
    """Gemma 4 tokenizer.json text, derived from Gemma 3's as shared/models/README shows."""
    base = models_dir()
    j = json.loads(lzma.open(base / "gemma3/tokenizer.json.xz", "rt", encoding="utf-8").read())
    spec = json.loads((base / "gemma4/special_tokens.json").read_text())["tokens"]
    ren = {int(i): t["content"] for i, t in spec.items() if t.get("gemma3_piece")}
    vocab = j["model"]["vocab"]
    inv = {i: t for t, i in vocab.items()}
    for i, new in ren.items():
        del vocab[inv[i]]
        vocab[new] = i
    for a in j["added_tokens"]:
        if a["id"] in ren:
            a["content"] = ren[a["id"]]
    return json.dumps(j)


_TOKENIZER_DIRS = {
    "qwen3": "qwen3",
    "deepseek": "deepseek",
    "deepseek_v4": "deepseek/v4",
    "gpt-oss": "gpt-oss",
    "llama3": "llama3",
}


@functools.cache
def _load(name: str):
    from chatsieve.tokenizer import load_tokenizer

    if name == "gemma4":
        from tokenizers import Tokenizer

        return load_tokenizer(Tokenizer.from_str(gemma4_tokenizer_json()))
    if name not in _TOKENIZER_DIRS:
        raise KeyError(f"no test tokenizer named {name!r}; known: gemma4, {', '.join(_TOKENIZER_DIRS)}")
    return load_tokenizer(model_path(_TOKENIZER_DIRS[name]))


def tokenizer(name: str):
    """A real tokenizer by short name (gemma4 is derived from Gemma 3's, see README)."""
    models_dir()  # skip (or fail under CI) when the models are absent
    return _load(name)
