"""The README and the docs pages: the README stays a front door (small, every page one link
away, links that resolve, no page repeating another), and every fenced block a reader is told to
run says which test runs it as written, or why none can; the recipes no other test owns run here."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from fake_engines import FakeEngine, Script, ServerThread
from models import tokenizer
from readme_recipes import FENCE, PAGES, command, readme_blocks

from chatsieve.server import build_parser
from chatsieve.server.app import create_app
from chatsieve.server.config import ServerConfig

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
MARK = re.compile(r"<!-- (run by (\S+)[^>]*|not run: [^>]+) -->\n$")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _rel(page: Path) -> str:
    return str(page.relative_to(REPO))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _headings(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    return {slug(m.group(1)) for m in re.finditer(r"^#+ (.+)$", text, flags=re.M)}


def test_the_readme_is_a_front_door():
    assert README.stat().st_size <= 20 * 1024, "README.md is over 20 KB: move the detail to a docs page"
    linked = {(README.parent / m.group(1).split("#")[0]).resolve() for m in LINK.finditer(README.read_text())}
    assert set(PAGES[1:]) <= linked, sorted(_rel(p) for p in set(PAGES[1:]) - linked)


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_every_link_resolves(page):
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue  # an address outside the repository
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        assert dest.exists(), f"{_rel(page)}: link to a missing file {target}"
        if anchor and dest.suffix == ".md":
            assert anchor in _headings(dest), f"{_rel(page)}: no heading #{anchor} in {path or _rel(page)}"


def _paragraphs(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    return {" ".join(p.split()) for p in text.split("\n\n") if len(p) >= 160 and not p.startswith("|")}


def test_no_page_repeats_another():
    seen: dict[str, str] = {}
    for page in PAGES:
        for para in _paragraphs(page):
            assert para not in seen, f"{_rel(page)} repeats a paragraph of {seen[para]}: {para[:100]}..."
            seen[para] = _rel(page)


def _blocks():
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for m in FENCE.finditer(text):
            if m.group(1):  # a block with a language: something to run or to write down
                yield page, text[: m.start()], m.group(1), m.group(2)


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_every_block_says_what_runs_it(page):
    """A block a reader may run carries `<!-- run by FILE -->` (FILE runs it as written, and names
    the heading it is under) or `<!-- not run: why -->` on the line before it."""
    for _, before, lang, body in (b for b in _blocks() if b[0] == page):
        mark = MARK.search(before)
        where = f"{_rel(page)}: the {lang} block starting {body[:50]!r}"
        assert mark, f"{where} has no <!-- run by FILE --> or <!-- not run: why --> line before it"
        runner = mark.group(2)
        if runner:
            assert (REPO / runner).is_file(), f"{where}: {runner} does not exist"
            heading = re.findall(r"^#+ (.+)$", FENCE.sub("", before), flags=re.M)[-1]
            source = (REPO / runner).read_text(encoding="utf-8")
            assert heading in source or runner == ".ci/run", f"{where}: {runner} does not read {heading!r}"


# ---------------------------------------------------------------- the recipes run here


def test_the_first_command_parses_the_example(tmp_path):
    """README "Two commands", the first: everything after the install, as written."""
    line = readme_blocks("Two commands")[0].strip()
    install, _, run = line.partition(" && ")
    assert install == "pip install -e ."
    bindir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}"}
    out = subprocess.run(shlex.split(run), cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    message = json.loads(out.stdout)
    assert message["reasoning"].startswith("The user wants to know") and message["content"]
    assert [(c["name"], c["arguments"]["zip"]) for c in message["tool_calls"]] == [("get_weather", "02139")]


def test_the_tour_runs(capsys):
    exec(compile(readme_blocks("A tour")[0], "README.md", "exec"), {})
    out = capsys.readouterr().out
    assert out.startswith('Weather: a call. Checking. get_weather {"city":"Paris"}\n')
    assert "ToolCallEnd(index=0, incomplete=False)" in out


def test_the_fixture_example_checks(tmp_path):
    """docs/api.md's example fixture file passes `chatsieve check`."""
    (block,) = [b for b in readme_blocks("Fixtures and `chatsieve check`") if b.startswith("format:")]
    path = tmp_path / "example.yaml"
    path.write_text(block, encoding="utf-8")
    out = subprocess.run([sys.executable, "-m", "chatsieve.cli", "check", str(path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_behind_a_proxy_options_parse(monkeypatch):
    """docs/serving.md "Limits and access control": the `chatsieve serve` line of the proxy
    recipe is a valid command line (the model directory and the engine are the reader's)."""
    (block,) = [b for b in readme_blocks("Limits and access control") if "chatsieve serve" in b]
    args = build_parser().parse_args(command(block, "chatsieve serve"))
    assert (args.host, args.port, args.allowed_hosts) == ("127.0.0.1", 8000, "llm.example.com")


def test_the_streaming_client_runs(tmp_path, capsys):
    """docs/serving.md "Other engines": the streamed chat client, as written (its port only),
    against a Qwen3 stand-in engine."""
    (snippet,) = [b for b in readme_blocks("Other engines") if b.startswith("from openai")]
    tok = tokenizer("qwen3")
    out = '<think>\nTwo cities.\n</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>'
    engine = FakeEngine(tok.decode, {"Weather in Paris and Rome?": Script(tok.encode(out), batch=3)})
    with ServerThread(engine.app) as eng:
        cfg = ServerConfig(model_dir=tmp_path, format="qwen3", backend_url=eng.url, served_model_name="Qwen3-8B",
                           warm_up=False)  # fmt: skip
        with ServerThread(create_app(cfg, tokenizer=tok)) as srv:
            assert "http://127.0.0.1:8000/v1" in snippet
            exec(compile(snippet.replace("http://127.0.0.1:8000/v1", srv.url + "/v1"), "docs/serving.md", "exec"), {})
    printed = capsys.readouterr().out
    # as many chunks as the server's deltas were merged in: the text they make, whatever the split
    assert printed.startswith("[thinking] ") and printed.replace("[thinking] ", "").startswith("Two cities.\n[call] 0 ")
    calls = [line.split(" ", 3)[2:] for line in printed.splitlines() if line.startswith("[call] 0 ")]
    assert "".join(c[0] for c in calls) == "get_weather" and "".join(c[1] for c in calls if len(c) > 1) == '{"city":"Paris"}'
    assert printed.splitlines()[-1].startswith("usage: CompletionUsage(completion_tokens=27,")
