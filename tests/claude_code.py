"""Finds Claude Code (installed by .ci/claude_code.sh) and the README's recipe lines for the tests.

`claude_binary()` skips with the reason when Claude Code is not installed -- except under CI
(CHATSIEVE_REQUIRE_MODELS=1), where it fails. `readme_blocks(heading)` gives the fenced code
blocks of a README section, so the tests run the recipe as written.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

VERSION = "2.1.328"
_REPO = Path(__file__).resolve().parent.parent


def claude_binary() -> Path:
    """$CHATSIEVE_CLAUDE, or the `claude` that .ci/claude_code.sh installed; else skip (fail under CI)."""
    env = os.environ.get("CHATSIEVE_CLAUDE")
    cache = Path(os.environ.get("CHATSIEVE_CACHE", Path.home() / ".cache" / "chatsieve"))
    path = Path(env) if env else cache / f"claude-code-{VERSION}" / "node_modules" / ".bin" / "claude"
    if path.is_file() and os.access(path, os.X_OK):
        return path
    reason = f"Claude Code {VERSION} not found at {path}: run .ci/claude_code.sh (or set CHATSIEVE_CLAUDE)"
    if os.environ.get("CHATSIEVE_REQUIRE_MODELS"):
        pytest.fail(reason)
    pytest.skip(reason)


def readme_blocks(heading: str) -> list[str]:
    """The fenced code blocks under README.md's `## heading`, in order."""
    text = (_REPO / "README.md").read_text(encoding="utf-8")
    start = text.index(f"## {heading}\n")
    end = text.find("\n## ", start + 1)
    section = text[start : end if end != -1 else len(text)]
    return re.findall(r"```[a-z]*\n(.*?)```", section, flags=re.S)


def exports(block: str) -> dict[str, str]:
    """`export A=1 B=2` lines of a shell block as a mapping."""
    env: dict[str, str] = {}
    for line in block.splitlines():
        if line.startswith("export "):
            for pair in line[len("export ") :].split():
                name, _, value = pair.partition("=")
                env[name] = value
    return env


def command(block: str, program: str) -> list[str]:
    """The arguments of the `program ...` command in a shell block (continuation lines joined)."""
    joined = block.replace("\\\n", " ")
    name = program.split()
    for line in joined.splitlines():
        words = line.split()
        if words[: len(name)] == name:
            return words[len(name) :]
    raise AssertionError(f"no {program!r} command in the README block:\n{block}")
