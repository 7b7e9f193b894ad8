"""The registry of model families, looked up by name or alias."""

from __future__ import annotations

import importlib
import pkgutil

from ..spec import FormatSpec

_SPECS: dict[str, FormatSpec] = {}
_ALIASES: dict[str, str] = {}


class UnknownFormat(ValueError):
    pass


def register(spec: FormatSpec) -> FormatSpec:
    for key in (spec.name, *spec.aliases):
        k = _key(key)
        if k in _ALIASES and _ALIASES[k] != spec.name:
            raise ValueError(f"format name {key!r} is already taken by {_ALIASES[k]!r}")
        _ALIASES[k] = spec.name
    _SPECS[spec.name] = spec
    return spec


def _key(name: str) -> str:
    return name.strip().lower()


def get(name: str | FormatSpec) -> FormatSpec:
    if isinstance(name, FormatSpec):
        return name
    canonical = _ALIASES.get(_key(name)) if isinstance(name, str) else None
    if canonical is None:
        raise UnknownFormat(f"unknown format {name!r}; known: {', '.join(names())}")
    return _SPECS[canonical]


def names() -> list[str]:
    """Canonical format names, sorted."""
    return sorted(_SPECS)


def aliases() -> dict[str, str]:
    """Every accepted name (aliases included) -> its canonical name."""
    return dict(_ALIASES)


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
        module = importlib.import_module(f"{__name__}.{info.name}")
        for spec in getattr(module, "SPECS", ()):
            register(spec)


_discover()
