"""The recipes of the README and the docs pages as the tests run them: the fenced code blocks
under a heading, the `export` lines and the command lines in them (tested as written)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

_REPO = Path(__file__).resolve().parent.parent
PAGES = (_REPO / "README.md", *sorted((_REPO / "docs").glob("*.md")))
FENCE = re.compile(r"^```([a-z]*)\n(.*?)^```", flags=re.S | re.M)


def section(heading: str) -> tuple[Path, str]:
    """The page holding the heading `heading` (any level) and the text under it, up to the next
    heading of the same or a higher level."""
    found = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for m in re.finditer(rf"^(#+) {re.escape(heading)}\n", text, flags=re.M):
            level = len(m.group(1))
            end = re.compile(rf"^#{{1,{level}}} ", flags=re.M)
            rest = _outside_fences(text, m.end())
            stop = next((i for i in rest if end.match(text, i)), len(text))
            found.append((page, text[m.start() : stop]))
    assert len(found) == 1, f"heading {heading!r} found {len(found)} times in README.md and docs/"
    return found[0]


def _outside_fences(text: str, start: int):
    """Offsets of the line starts after `start` that are not inside a fenced block."""
    fence = False
    i = start
    while i < len(text):
        if text.startswith("```", i):
            fence = not fence
        elif not fence:
            yield i
        j = text.find("\n", i)
        if j == -1:
            return
        i = j + 1


def readme_blocks(heading: str) -> list[str]:
    """The fenced code blocks under `heading` in the README or a docs page, in order."""
    return [m.group(2) for m in FENCE.finditer(section(heading)[1])]


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
    """The arguments of the `program ...` command in a shell block (continuation lines joined,
    words as the shell splits them, a trailing comment left out)."""
    joined = block.replace("\\\n", " ")
    name = program.split()
    for line in joined.splitlines():
        words = shlex.split(line, comments=True)
        if words[: len(name)] == name:
            return words[len(name) :]
    raise AssertionError(f"no {program!r} command in the block:\n{block}")
