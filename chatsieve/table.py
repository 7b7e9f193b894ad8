"""The formats table (`chatsieve formats`, docs/formats.md): one Markdown row per family, with
its delimiters' gates computed from the real tokenizer it names, where one loads."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import formats
from .spec import FormatSpec

HEADER = (
    "| format (aliases) | reasoning | calls | gated by token id (real tokenizer) | chat template in the test data |\n"
    "|---|---|---|---|---|"
)


def reference_tokenizer(models: Path, ref: str) -> Any:
    """The tokenizer a spec's `tokenizer_doc` names, under the models directory (Gemma 4's:
    llama.cpp's ggml-vocab-gemma-4.gguf where the directory has it, as `python -m
    chatsieve.testdata fetch` lays it out, else derived from Gemma 3's, see
    shared/models/README.md). Raises when it cannot load."""
    from .tokenizer import derive_gemma4_tokenizer, load_tokenizer

    if ref == "gemma4":
        gguf = models / "llama.cpp" / "models" / "ggml-vocab-gemma-4.gguf"
        if gguf.is_file():
            return load_tokenizer(gguf)
        return derive_gemma4_tokenizer(models / "gemma3", models / "gemma4" / "special_tokens.json")
    return load_tokenizer(models / ref)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ") or "—"


def _code(text: str) -> str:
    return f"`{text}`"


def gates_cell(spec: FormatSpec, tokenizer: Any) -> str:
    """Which delimiters count only as token ids with this tokenizer, in a few words."""
    from .parser import resolve_gates

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "matched as text" is what this cell reports
        gates, spelled = resolve_gates(spec, tokenizer)
    around = {g.marker: g for g in spelled}
    whole = [d for d, tid in gates.items() if tid is not None and d not in around]
    text = [d for d, tid in gates.items() if tid is None]
    n = len(gates)
    if not n:
        return "—"
    parts: list[str] = []
    controls: dict[str, list[str]] = {}
    for g in spelled:
        controls.setdefault(f"{_code(g.control)} ({g.token_id})", []).append(_code(g.marker))
    for control, markers in controls.items():
        parts.append(f"{', '.join(markers)} by {control}")
    if not text:
        if not parts:
            parts.append(f"all {n} delimiters")
        elif whole:
            parts.append(f"the other {len(whole)} by their own ids")
    elif not whole:
        parts.append("the rest matched as text" if parts else "none (all matched as text)")
    elif len(text) < len(whole):
        parts.insert(0, f"all but {', '.join(map(_code, text))} (matched as text)")
    else:
        parts.insert(0, f"{', '.join(map(_code, whole))}; {len(text)} of {n} matched as text")
    return "; ".join(parts)


def formats_table(tokenizer_for: Callable[[str], Any] | None = None) -> str:
    """The table as Markdown. `tokenizer_for(ref)` loads the tokenizer a spec names (or
    raises); without it, or when it fails, the gates are not computed."""
    rows = [HEADER]
    for name in formats.names():
        spec = formats.get(name)
        aliases = f" ({', '.join(spec.aliases)})" if spec.aliases else ""
        ref = spec.tokenizer_doc
        if not ref:
            gated = "— (no real tokenizer here: text mode)"
        else:
            tok = None
            if tokenizer_for is not None:
                try:
                    tok = tokenizer_for(ref)
                except (OSError, ValueError, ImportError):
                    tok = None
            gated = (
                f"{gates_cell(spec, tok)} ({ref})"
                if tok is not None
                else f"not computed ({ref}: not loadable by load_tokenizer)"
            )
        cells = [
            f"`{spec.name}`{aliases}",
            spec.reasoning_doc or "—",
            spec.calls_doc or "—",
            gated,
            spec.template or "—",
        ]
        rows.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(rows) + "\n"
