"""The package's layout holds: no import cycles among chatsieve's modules, nothing below the server
imports it, and no module longer than MAX_LINES.

The import graph is read from the source with `ast`: every import statement as written, at module
level or inside a function, relative imports resolved; `from pkg import name` where `name` is a
submodule of `pkg` is an edge to that submodule, otherwise to `pkg` itself.
"""

from __future__ import annotations

import ast
import fnmatch
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "chatsieve"
MAX_LINES = 900

# The server may be imported by the server itself, the command line, and the integrations (servers
# of others that run chatsieve's); everything else -- protocols, parser, prompt, ... -- sits below
# it. (Today only the server imports itself: the CLI reaches `serve` by name, cli._DELEGATED.)
SERVER = "chatsieve.server"
MAY_IMPORT_SERVER = ("chatsieve/server/*", "chatsieve/cli*.py", "chatsieve/integrations/*")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports_of(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The chatsieve modules `name` (at `path`) imports, anywhere in its source."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                origin = ".".join(base + ([node.module] if node.module else []))
            else:
                origin = node.module or ""
            targets = [f"{origin}.{a.name}" if f"{origin}.{a.name}" in known else origin for a in node.names]
        else:
            continue
        for target in targets:
            # `import chatsieve.x.y` names the deepest module chatsieve has
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                out.add(target)
    return out


def import_graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports_of(name, path, known) for name, path in known.items()}


def cycles(graph: dict[str, set[str]]) -> list[tuple[str, ...]]:
    """Every edge that lies on a cycle, as the shortest closed path through it (u -> v -> ... -> u),
    each path once, rotated to start at its least module: a readable list that names every
    import which would have to go for the modules to form no circle."""
    found: set[tuple[str, ...]] = set()
    for u in sorted(graph):
        for v in sorted(graph[u]):
            back = _shortest_path(graph, v, u)
            if back is not None:
                path = [u, *back]  # u -> v ... -> u, the last u dropped below
                ring = path[:-1]
                k = ring.index(min(ring))
                found.add(tuple(ring[k:] + ring[:k]))
    return sorted(found)


def _shortest_path(graph: dict[str, set[str]], start: str, goal: str) -> list[str] | None:
    came_from: dict[str, str | None] = {start: None}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            if v == goal:
                path = [v]
                while came_from[path[-1]] is not None:
                    path.append(came_from[path[-1]])  # type: ignore[arg-type]
                return path[::-1]
            for w in sorted(graph.get(v, ())):
                if w not in came_from:
                    came_from[w] = v
                    nxt.append(w)
        frontier = nxt
    return None


def readable(cycle: tuple[str, ...]) -> str:
    return " -> ".join([*cycle, cycle[0]])


def test_the_graph_sees_nested_relative_and_submodule_imports():
    graph = import_graph()
    assert "chatsieve.prompt.template" in graph["chatsieve.tool_prompt"]  # a function-level import
    assert "chatsieve._json" in graph["chatsieve.prompt.isolation"]  # `from .. import _json, prefix_cache`
    assert "chatsieve.prompt.render" in graph["chatsieve.prompt"]  # `from .render import ...` in __init__
    ring = {"c": {"a"}, "a": {"b"}, "b": {"c", "d"}, "d": {"a"}, "e": {"a"}}
    assert cycles(ring) == [("a", "b", "c"), ("a", "b", "d")]


def test_no_import_cycles():
    found = cycles(import_graph())
    assert not found, "import cycles among chatsieve's modules:\n" + "\n".join(map(readable, found))


def test_nothing_below_the_server_imports_it():
    paths = {name: path.relative_to(ROOT).as_posix() for name, path in modules().items()}
    wrong = sorted(
        f"{name} imports {target}"
        for name, targets in import_graph().items()
        if not any(fnmatch.fnmatch(paths[name], p) for p in MAY_IMPORT_SERVER)
        for target in targets if target == SERVER or target.startswith(SERVER + ".")
    )
    assert not wrong, "only the server, the CLI and the integrations may import the server:\n" + "\n".join(wrong)


def test_no_module_is_too_long():
    lines = {str(p.relative_to(ROOT)): len(p.read_text(encoding="utf-8").splitlines()) for p in modules().values()}
    long = sorted(f"{p}: {n} lines" for p, n in lines.items() if n > MAX_LINES)
    assert not long, f"modules over {MAX_LINES} lines (split them by job):\n" + "\n".join(long)
