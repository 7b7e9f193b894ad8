"""The registry of model families, looked up by name or alias (re-exported by `chatsieve.formats`,
which fills it from its family modules). It imports nothing of chatsieve but the spec, so any
module may look a family up without importing what `chatsieve.formats` offers above it
(`detect`, `load`)."""

from __future__ import annotations

from ..spec import FormatSpec

_SPECS: dict[str, FormatSpec] = {}
_ALIASES: dict[str, str] = {}
# families whose tags carry a per-checkpoint suffix: `NAME:SUFFIX` builds the spec on demand
_SUFFIXED: dict[str, object] = {}


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
    if canonical is None and isinstance(name, str) and ":" in name:
        return _with_suffix(name)
    if canonical is None:
        raise UnknownFormat(f"unknown format {name!r}; known: {', '.join(names())}")
    return _SPECS[canonical]


def suffixed_families() -> list[str]:
    """The families `NAME:SUFFIX` builds a spec for (tags carrying a checkpoint's suffix)."""
    return sorted(_SUFFIXED)


_BUILT: dict[str, FormatSpec] = {}  # `NAME:SUFFIX` specs built so far (not listed by `names`)


def _with_suffix(name: str) -> FormatSpec:
    key = _key(name)
    if key not in _BUILT:
        if len(_BUILT) >= 64:  # bounded: names come from requests and templates
            _BUILT.pop(next(iter(_BUILT)))
        _BUILT[key] = build_suffixed(name)
    return _BUILT[key]


def build_suffixed(name: str) -> FormatSpec:
    """The spec `NAME:SUFFIX` names (see `suffixed_families`), not registered."""
    base, _, suffix = name.strip().partition(":")
    family = _ALIASES.get(_key(base))
    build = _SUFFIXED.get(family) if family else None
    if build is None or any(c in suffix for c in "<>| \t\n") or len(suffix) > 40:
        raise UnknownFormat(f"unknown format {name!r}; known: {', '.join(names())} "
                            f"(and NAME:SUFFIX for {', '.join(suffixed_families())})")
    return build(":" + suffix, f"{family}:{suffix}")


def names() -> list[str]:
    """Canonical format names, sorted."""
    return sorted(_SPECS)


def aliases() -> dict[str, str]:
    """Every accepted name (aliases included) -> its canonical name."""
    return dict(_ALIASES)


def register_module(module: object) -> None:
    """Register the families a module lists: its `SPECS` tuple, and its `SUFFIXED` builders (a
    family whose tags carry a per-checkpoint suffix, `NAME:SUFFIX`)."""
    for spec in getattr(module, "SPECS", ()):
        register(spec)
    _SUFFIXED.update(getattr(module, "SUFFIXED", {}))
