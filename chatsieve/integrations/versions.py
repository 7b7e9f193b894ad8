"""Which release of an engine package is installed, for the adapters' version gates (vLLM, SGLang,
Dynamo): its version string, and that string read as a tuple of release numbers."""

from __future__ import annotations

from importlib import metadata

__all__ = ["installed_version", "release"]


def installed_version(*distributions: str) -> str:
    """The version of the first of `distributions` that is installed, else "unknown"."""
    for name in distributions:
        try:
            return metadata.version(name)  # looked up at each call, as a test may replace it
        except metadata.PackageNotFoundError:
            continue
    return "unknown"


def release(text: str) -> tuple[int, ...]:
    """The leading release numbers of a version string: "0.5.23rc1" -> (0, 5, 23)."""
    out = []
    for part in text.split("."):
        digits = "".join(ch for ch in part if ch.isdigit())
        if not digits:
            break
        out.append(int(digits))
        if len(digits) != len(part):
            break
    return tuple(out)
