"""What an engine's server holds, as chatsieve reads it: its Hugging Face tokenizer object (as a
chatsieve `Tokenizer`) and its prompt token ids (their tail). Shared by the vLLM and SGLang adapters."""

from __future__ import annotations

import logging
import os
import weakref
from collections.abc import Sequence
from typing import Any

from ..parser import resolve_delimiters

log = logging.getLogger("chatsieve.integrations")

_TOKENIZERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_NO_TOKENIZER = object()
PROMPT_TAIL_TOKENS = 64  # prompt tokens decoded to find an open reasoning block (text-matched markers)


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


def prompt_tail(
    spec, prompt_token_ids: Sequence[int] | None, tokenizer: Any, engine_tokenizer: Any = None
) -> str | None:
    """The end of the prompt as chatsieve's `prompt=` option reads it: from the last reasoning
    marker on. With gated markers the marker is found by its token id (a marker spelled in a
    message never counts); otherwise the last PROMPT_TAIL_TOKENS tokens are decoded."""
    if not prompt_token_ids or not (spec.reasoning_open or spec.reasoning_close):
        return None
    ids = list(prompt_token_ids)
    markers = spec.reasoning_open + spec.reasoning_close
    if tokenizer is not None:
        gates = resolve_delimiters(spec, tokenizer)
        by_id = {gates[m]: m for m in markers if gates.get(m) is not None}
        if len(by_id) == len(set(markers)):
            for i in range(len(ids) - 1, -1, -1):
                marker = by_id.get(ids[i])
                if marker is not None:
                    tail = tokenizer.decode(ids[i + 1 :])
                    for d in spec.delimiters:  # spelled markers after it are text, not structure
                        tail = tail.replace(d, "")
                    return marker + tail
            return ""
        return tokenizer.decode(ids[-PROMPT_TAIL_TOKENS:])
    try:  # no chatsieve tokenizer: the engine's own decodes the tail
        return engine_tokenizer.decode(ids[-PROMPT_TAIL_TOKENS:], skip_special_tokens=False)
    except Exception:
        return None
