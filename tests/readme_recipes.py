"""The README's recipes as the tests run them: the fenced code blocks of a section, the
`export` lines and the command lines in them (tested as written)."""

from __future__ import annotations

import re
from pathlib import Path

_REPO = Path(__file__).resolve().parent.parent


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
