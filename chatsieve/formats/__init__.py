"""The model families: the registry (registry.py: `get`, `register`, `names`, ...) filled from
every family module of this package, and `detect` / `analyze` / `load`, which find a family in a
chat template or read one from a format file. Those three live in modules above the registry
(chatsieve/detect.py, chatsieve/format_file.py), imported when called; modules below them look
families up through `chatsieve.formats.registry`, so no import runs in a circle."""

from __future__ import annotations

import importlib
import pkgutil

from ..spec import FormatSpec
from .registry import (
    UnknownFormat,
    aliases,
    build_suffixed,
    get,
    names,
    register,
    register_module,
    suffixed_families,
)

__all__ = ["FormatSpec", "UnknownFormat", "aliases", "analyze", "build_suffixed", "detect", "get", "load", "names",
           "register", "register_module", "suffixed_families"]


def detect(chat_template, tokenizer=None):
    """The registered format whose markup `chat_template` (its text or a path; None: the
    tokenizer's own) writes, as a `chatsieve.detect.FormatMatch`, or None. `analyze` gives
    every candidate, nearest first (see chatsieve/detect.py)."""
    from ..detect import detect as _detect

    return _detect(chat_template, tokenizer)


def analyze(chat_template, tokenizer=None):
    """`detect` with its reasons: a `chatsieve.detect.Detection` (the match or None, every
    candidate scored, why nothing was placed)."""
    from ..detect import analyze as _analyze

    return _analyze(chat_template, tokenizer)


def load(path) -> FormatSpec:
    """A family described in a format file (YAML or JSON; see docs/format-files.md), validated
    like user input (`chatsieve.format_file.FormatFileError` names each bad field). Not registered:
    pass the spec itself as a format, or `register` it."""
    from ..format_file import load as _load

    return _load(path)


def _discover() -> None:
    """Each module in this package lists its families in a module-level SPECS tuple."""
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name != "registry":
            register_module(importlib.import_module(f"{__name__}.{info.name}"))


_discover()
