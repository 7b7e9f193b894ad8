"""The `chatsieve` command as a user runs it: real subprocesses."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "chatsieve.cli", *args], input=stdin, capture_output=True, text=True, cwd=ROOT
    )


def test_parse_the_bundled_example():
    r = cli("parse", "--format", "gemma4", "--tools", "examples/gemma4_tools.json", "examples/gemma4_output.txt")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["reasoning"].startswith("The user wants to know")
    assert out["content"] == "Let me check tomorrow's forecast for Cambridge, MA."
    [call] = out["tool_calls"]
    assert call["name"] == "get_weather"
    assert call["arguments"] == {
        "location": "Cambridge, MA", "zip": "02139", "days": 2, "units": "fahrenheit",
        "include": ["precipitation", "wind"],
    }  # fmt: skip
    assert out["diagnostics"] == []


def test_parse_chunks_from_stdin_match_batch():
    text = (ROOT / "examples/gemma4_output.txt").read_text()
    chunks = [text[i : i + 7] for i in range(0, len(text), 7)]
    r = cli("parse", "--format", "gemma-4", "--chunks", "-", stdin=json.dumps(chunks))
    b = cli("parse", "--format", "gemma4", "-", stdin=text)
    assert r.returncode == b.returncode == 0
    strip = lambda o: [c.pop("id") for c in o["tool_calls"]] and o  # noqa: E731
    assert strip(json.loads(r.stdout)) == strip(json.loads(b.stdout))


@pytest.mark.parametrize(
    ("args", "stdin", "needle"),
    [
        (["parse", "--format", "gema4", "-"], "x", "unknown format 'gema4'; known: "),
        (["parse", "--format", "gemma4", "missing.txt"], None, "cannot read missing.txt"),
        (["parse", "--format", "gemma4", "--tools", "missing.json", "-"], "x", "cannot read missing.json"),
        (["parse", "--format", "gemma4", "--tools", "README.md", "-"], "x", "not valid JSON"),
        (["parse", "--format", "gemma4", "--chunks", "-"], '{"a": 1}', "JSON list of strings"),
        (["check", "no/such/dir"], None, "no such fixture file"),
    ],
)
def test_bad_input_is_one_line_and_status_2(args, stdin, needle):
    r = cli(*args, stdin=stdin)
    assert r.returncode == 2
    assert needle in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_tools_that_are_not_tool_definitions(tmp_path):
    bad = tmp_path / "tools.json"
    bad.write_text('[{"function": {"parameters": {}}}]')
    r = cli("parse", "--format", "qwen3", "--tools", str(bad), "-", stdin="hi")
    assert r.returncode == 2 and "no function name" in r.stderr


def test_check_reports_failing_cases(tmp_path):
    f = tmp_path / "mine.yaml"
    f.write_text(
        "format: qwen3\nthinking: false\ncases:\n"
        "  - name: good\n    text: 'Hello'\n    expect: {content: Hello}\n"
        "  - name: wrong\n    text: 'Hello'\n    expect: {content: Bye}\n"
    )
    r = cli("check", str(f))
    assert r.returncode == 1
    assert "1 passed, 1 failed" in r.stdout
    assert "FAIL" in r.stdout and "mine.yaml::wrong" in r.stdout and "mine.yaml::good" not in r.stdout
    assert len([line for line in r.stdout.splitlines() if line.startswith("FAIL")]) == 1


def test_check_runs_the_suite_fixtures():
    r = cli("check", "tests/fixtures/gemma4")
    assert r.returncode == 0, r.stdout[-2000:]
    assert r.stdout.strip().endswith("0 failed")


@pytest.mark.parametrize("sub", ["serve", "render"])
def test_delegated_subcommands_parse_their_own_options(sub):
    r = cli(sub, "--help")
    assert r.returncode == 0 and "--model-dir" in r.stdout


@pytest.mark.parametrize(("name", "fmt"), [("deepseek_v4", "deepseek_v4"), ("glm5", "glm47"), ("kimi_k2", "kimi_k2"),
                                           ("gemma4", "gemma4")])  # fmt: skip
def test_check_takes_the_suites_tokenizer_names(tmp_path, name, fmt):
    """A fixture's `tokenizer: deepseek_v4` is the suite's short name for deepseek/v4 (chatsieve.testdata.TOKENIZERS):
    `chatsieve check --models DIR` runs token mode with it. A spelled segment is checked in token mode only, so
    the case whose expectation is wrong fails there, and only there."""
    import models

    from chatsieve.testdata import TOKENIZERS

    models.model_path(TOKENIZERS[name])  # a tokenizer only GitHub carries skips, as documented (docs/testdata.md)
    f = tmp_path / "mine.yaml"
    f.write_text(
        f"format: {fmt}\ntokenizer: {name}\nthinking: false\ncases:\n"
        "  - name: right\n    segments: [{text: 'It is sunny.', spelled: true}]\n    expect: {content: 'It is sunny.'}\n"
        "  - name: wrong\n    segments: [{text: 'It is sunny.', spelled: true}]\n    expect: {content: 'Rain.'}\n"
    )
    r = cli("check", "--models", str(models.models_dir()), str(f))
    assert "token mode skipped" not in r.stderr, r.stderr
    assert r.returncode == 1 and "1 passed, 1 failed" in r.stdout, r.stdout + r.stderr
    fail = next(line for line in r.stdout.splitlines() if line.startswith("FAIL"))
    assert "mine.yaml::wrong [tokens/" in fail, fail


def test_every_fixture_tokenizer_is_a_known_name():
    """The short names the fixtures give are the ones the library resolves (one mapping)."""
    import yaml

    from chatsieve.testdata import TOKENIZERS

    names = set()
    for p in (ROOT / "tests" / "fixtures").rglob("*.yaml"):
        doc = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
        names |= {c["tokenizer"] for c in [doc, *doc.get("cases", [])] if isinstance(c, dict) and c.get("tokenizer")}
    assert names and names <= set(TOKENIZERS), names - set(TOKENIZERS)
