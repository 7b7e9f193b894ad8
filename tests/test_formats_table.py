"""The formats table: `chatsieve formats` prints it, docs/formats.md shows exactly it, and each
family documents itself in it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import models
import pytest
from test_tokenizer import tok_for

from chatsieve import formats
from chatsieve.table import HEADER, formats_table, gates_cell

ROOT = Path(__file__).resolve().parent.parent


def docs_table() -> str:
    lines = (ROOT / "docs" / "formats.md").read_text(encoding="utf-8").splitlines()
    start = lines.index(HEADER.splitlines()[0])
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    return "\n".join(lines[start:end]) + "\n"


def table_tokenizer(ref: str):
    """What `chatsieve formats --models DIR` loads for `ref` (chatsieve.table.reference_tokenizer),
    from the tokenizers the other tests have loaded already: load_tokenizer(DIR/ref), and
    Gemma 4's derived one."""
    models.models_dir()  # skip (fail under CI) without the models
    return tok_for(ref)


def test_the_docs_table_is_the_formats_output():
    want = formats_table(table_tokenizer)
    assert docs_table() == want, (
        "docs/formats.md's formats table is stale: replace it with the output of "
        "`chatsieve formats --models ../shared/models`"
    )


@pytest.mark.parametrize("name", formats.names())
def test_every_family_documents_itself(name):
    spec = formats.get(name)
    assert spec.calls_doc or spec.reasoning_doc, (
        f"{name}: fill reasoning_doc / calls_doc for the formats table"
    )
    if spec.template:
        assert models.model_path(spec.template).is_file(), spec.template  # GitHub-only ones skip
    if spec.tokenizer_doc and spec.tokenizer_doc != "mistral":  # Tekken: converted by the tests only
        assert table_tokenizer(spec.tokenizer_doc) is not None


def test_gates_cell_names_the_control_token_of_spelled_tags():
    cell = gates_cell(formats.get("deepseek_v4"), tok_for("deepseek/v4"))
    assert cell == (
        "`<｜DSML｜parameter name=`, `</｜DSML｜tool_calls>`, `<｜DSML｜tool_calls>`, `</｜DSML｜parameter>`, "
        "`</｜DSML｜invoke>` by `｜DSML｜` (128825); the other 3 by their own ids"
    )
    assert gates_cell(formats.get("hunyuan"), tok_for("hunyuan")) == "`<|eos|>`; 6 of 7 matched as text"
    assert gates_cell(formats.get("qwen3"), tok_for("qwen3")) == "all 9 delimiters"


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "chatsieve.cli", *args], capture_output=True, text=True, cwd=ROOT
    )


def unloadable(ref: str):
    raise ValueError(f"{ref} is not here")


def test_cli_prints_one_row_per_format_and_list_formats_is_the_same(tmp_path):
    r = cli("formats", "--models", str(tmp_path))  # no tokenizers there: gates not computed
    assert r.returncode == 0, r.stderr
    rows = r.stdout.splitlines()
    assert rows[:2] == HEADER.splitlines() and len(rows) == 2 + len(formats.names())
    assert all("not computed" in row or "no real tokenizer here" in row for row in rows[2:])
    assert r.stdout == formats_table(unloadable)
    same = cli("parse", "--list-formats", "--models", str(tmp_path))
    assert same.returncode == 0 and same.stdout == r.stdout


def test_cli_errors():
    r = cli("formats", "--models", "no/such/dir")
    assert r.returncode == 2 and "is not a directory" in r.stderr
    r = cli("parse", "-")
    assert r.returncode == 2 and "--format is required" in r.stderr
