"""chatsieve's `Tokenizer` for the Hugging Face tokenizer object an engine server holds.

Shared by the adapters that live inside an engine's server (vLLM, SGLang): built once per object.
"""

from __future__ import annotations

import logging
import os
import weakref
from typing import Any

log = logging.getLogger("chatsieve.integrations")

_TOKENIZERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_NO_TOKENIZER = object()


def stream_arguments_from_env() -> bool:
    """CHATSIEVE_STREAM_ARGUMENTS=1 in the server's environment: tool arguments stream as they arrive."""
    return os.environ.get("CHATSIEVE_STREAM_ARGUMENTS", "") in ("1", "true", "yes")


def chatsieve_tokenizer(tokenizer: Any, directory: str | None = None):
    """chatsieve's `Tokenizer` for an engine's tokenizer object, or None (text mode).

    Built once per tokenizer object: from the model `directory` when it holds tokenizer files
    (its tokenizer_config.json, chat_template.jinja and generation_config.json come along), else
    from the object's `tokenizers` backend (Hugging Face fast tokenizers, with its chat template),
    else from the files in its `name_or_path` directory.
    """
    if tokenizer is None:
        return None
    try:
        cached = _TOKENIZERS.get(tokenizer)
    except TypeError:  # not weak-referenceable or not hashable: build, do not cache
        cached = None
    if cached is not None:
        return None if cached is _NO_TOKENIZER else cached
    built = _build_tokenizer(tokenizer, directory)
    try:
        _TOKENIZERS[tokenizer] = _NO_TOKENIZER if built is None else built
    except TypeError:
        pass
    return built


def _from_directory(path: str):
    from ..tokenizer import load_tokenizer

    try:
        return load_tokenizer(path)
    except (OSError, ValueError) as e:
        log.warning("chatsieve: cannot load the tokenizer files in %s (%s)", path, e)
        return None


def _build_tokenizer(tokenizer: Any, directory: str | None):
    from ..tokenizer import load_tokenizer

    try:
        import tokenizers
    except ImportError:
        log.warning(
            "chatsieve: the `tokenizers` package is missing; parsing text, delimiters not gated by token id"
        )
        return None
    if isinstance(directory, str) and os.path.isdir(directory):
        built = _from_directory(directory)
        if built is not None:
            return built
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if isinstance(backend, tokenizers.Tokenizer):
        config = {}
        for key in ("bos_token", "eos_token", "pad_token", "chat_template"):
            value = getattr(tokenizer, key, None)
            if isinstance(value, str):
                config[key] = value
        return load_tokenizer(backend, config=config)
    path = getattr(tokenizer, "name_or_path", None)
    if isinstance(path, str) and os.path.isdir(path):
        return _from_directory(path)
    log.warning(
        "chatsieve: no `tokenizers` backend or tokenizer files for %s; parsing text, "
        "delimiters not gated by token id",
        type(tokenizer).__name__,
    )
    return None
