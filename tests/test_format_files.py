"""Format files (`--format-file`, `chatsieve.formats.load`): three built-in families written as
files parse each of their fixtures exactly as the built-ins do, in every mode the fixture runner
has (batch, every split point, random chunkings, argument streaming, token mode with the real
tokenizer); and a file is checked like user input: each bad field named, no code run, sizes bounded."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import models
import pytest

from chatsieve import formats
from chatsieve.fixtures import _run, check_case, iter_fixture_files, load_cases, normalized
from chatsieve.format_file import MAX_FILE_BYTES, FormatFileError, parse_format, register_file
from chatsieve.formats import registry

HERE = Path(__file__).parent
FILES = {"qwen3": "qwen3.yaml", "glm47": "glm47.yaml", "gpt_oss": "gpt_oss.json"}
CASES = [c for f in iter_fixture_files([HERE / "fixtures"]) for c in load_cases(f)]


def _cases(builtin: str):
    return [c for c in CASES if formats.get(c.format).name == builtin]


def _id(case) -> str:
    return f"{case.file.removesuffix('.yaml')}::{case.name}"


PAIRS = [(b, c) for b in FILES for c in _cases(b)]


def test_each_built_in_has_its_fixtures():
    counts = {b: len(_cases(b)) for b in FILES}
    assert all(n >= 20 for n in counts.values()), counts


@pytest.mark.parametrize(("builtin", "case"), PAIRS, ids=[f"{b}:{_id(c)}" for b, c in PAIRS])
def test_a_file_parses_the_built_ins_fixtures_alike(builtin, case):
    spec = formats.load(HERE / "format_files" / FILES[builtin])
    as_file = dataclasses.replace(case, format=spec)
    failures = check_case(as_file, models.tokenizer)  # every mode, against the case's expectation
    assert not failures, "\n".join(map(str, failures))
    for stream in (False, True):  # and the very same message as the built-in, whole and per character
        chunks = list(case.text)
        for given in ([case.text], chunks):
            mine, _ = _run(as_file, given, stream=stream)
            theirs, _ = _run(case, given, stream=stream)
            assert normalized(mine) == normalized(theirs)


def test_the_files_set_what_the_built_ins_set():
    callables = {"codec", "engine", "call_id", "content_filter", "reasoning_filter"}
    for builtin, file in FILES.items():
        mine, theirs = formats.load(HERE / "format_files" / file), formats.get(builtin)
        for f in dataclasses.fields(theirs):
            if f.name in callables | {"name", "aliases", "description", "template", "templates", "tokenizer_doc",
                                      "reasoning_doc", "calls_doc", "tool_prompt"}:
                continue
            assert getattr(mine, f.name) == getattr(theirs, f.name), (builtin, f.name)
        if theirs.engine is not None:
            assert mine.engine is theirs.engine
        if theirs.codec is not None and hasattr(theirs.codec, "syntax"):
            assert mine.codec.syntax == theirs.codec.syntax
        elif theirs.codec is not None:
            assert mine.codec is theirs.codec


def _problems(doc) -> str:
    with pytest.raises(FormatFileError) as e:
        parse_format(doc, "x.json")
    return str(e.value)


def test_every_bad_field_is_named():
    msg = _problems({
        "name": "Bad Name", "colour": "red", "reasoning": {"open": "<think>", "default": "yes"},
        "calls": {"open": ["<c>"], "codec": "eval", "call_id": "uuid"}, "end": [1, "x" * 100, "  "],
    })
    for field in ("name:", "colour:", "reasoning.default:", "calls.codec:", "calls.call_id:", "end[0]:", "end[1]:",
                  "end[2]:"):
        assert field in msg, (field, msg)


@pytest.mark.parametrize(("doc", "needle"), [
    ("not a mapping", "a mapping of fields"),
    ({"name": "x", "chatsieve_format": 2}, "version 1"),
    ({}, "name: required"),
    ({"name": "x", "calls": {"open": ["<c>"]}}, "no codec reads the calls"),
    ({"name": "x", "calls": {"codec": "json_call"}}, "markers that open its region"),
    ({"name": "x", "calls": {"codec": "xml_kv", "open": ["<c>"]}}, "needs its tags"),
    ({"name": "x", "calls": {"codec": "json_call", "open": ["<c>"], "syntax": {"key_open": "<k>"}}}, "only the xml_kv"),
    ({"name": "x", "engine": "harmony"}, "the harmony engine needs"),
    ({"name": "x", "engine": "python"}, "engine:"),
    ({"name": "x", "strip": ["<x>"] * 40}, "more than 32"),
    ({"name": "x", "reasoning": {"close": ["</t>"]}}, "starts_inside"),
    ({"name": "x", "calls": {"codec": "json_call", "open": ["<c>"], "grammar": "regex"}}, "calls.grammar"),
    ({"name": "x", "calls": {"codec": "xml_kv", "open": ["<c>"], "syntax": {
        "key_open": "<k>", "key_close": "</k>", "value_close": "</v>", "type_open": "<t>"}}}, "type_open and type_close"),
])  # fmt: skip
def test_refused(doc, needle):
    assert needle in _problems(doc)


def test_yaml_is_read_as_data_only(tmp_path):
    f = tmp_path / "evil.yaml"
    f.write_text("name: !!python/object/apply:os.system ['echo pwned']\n", encoding="utf-8")
    with pytest.raises(FormatFileError, match="not valid YAML"):
        formats.load(f)


def test_size_is_bounded(tmp_path):
    f = tmp_path / "big.json"
    f.write_text(json.dumps({"name": "big", "description": "x" * MAX_FILE_BYTES}), encoding="utf-8")
    with pytest.raises(FormatFileError, match="at most"):
        formats.load(f)


def test_a_built_in_name_is_not_taken_over(tmp_path):
    f = tmp_path / "q.json"
    f.write_text(json.dumps({"name": "qwen3"}), encoding="utf-8")
    with pytest.raises(FormatFileError, match="taken by the format 'qwen3'"):
        register_file(f)
    assert formats.get("qwen3").codec is not None


@pytest.fixture
def unregistered():
    """Names a test registers, taken out of the registry again (other tests list every format)."""
    from chatsieve import format_file

    names: list[str] = []
    yield names
    for name in names:
        spec = registry._SPECS.pop(name, None)
        format_file._REGISTERED.pop(name, None)
        for key in (name, *(spec.aliases if spec else ())):
            registry._ALIASES.pop(registry._key(key), None)


def test_registered_by_name_and_again(tmp_path, unregistered):
    f = tmp_path / "mine.json"
    f.write_text(json.dumps({"name": "mine_fmt_test", "aliases": ["mine-fmt-test"],
                             "reasoning": {"open": ["<r>"], "close": ["</r>"]}}), encoding="utf-8")
    unregistered.append("mine_fmt_test")
    spec = register_file(f)
    assert formats.get("mine-fmt-test") is spec
    assert register_file(f).name == "mine_fmt_test"  # a second worker registering the same file


def test_the_docs_example_family_runs(tmp_path):
    """docs/format-files.md, "A worked example: Acme Lark": the file, its fixture and the command, as written."""
    import os
    import shlex
    import subprocess
    import sys

    from readme_recipes import readme_blocks

    spec_text, fixture_text, command = readme_blocks("A worked example: Acme Lark")
    (tmp_path / "lark.yaml").write_text(spec_text, encoding="utf-8")
    (tmp_path / "lark_fixtures.yaml").write_text(fixture_text, encoding="utf-8")
    spec = formats.load(tmp_path / "lark.yaml")
    msg = __import__("chatsieve").parse(
        "<|lark_think|>Hm.<|lark_end_think|>Sure.<|lark_call|>get_weather\n<|lark_arg|>city=Oslo\n<|lark_end_call|>",
        spec, tools=[{"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}])
    assert (msg.reasoning, msg.content, [c.arguments for c in msg.tool_calls]) == ("Hm.", "Sure.", ['{"city":"Oslo"}'])
    argv = shlex.split(command.strip())
    assert argv[0] == "chatsieve"
    repo = str(HERE.parent)  # this checkout's chatsieve, whatever the installed script points at
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [repo, os.environ.get("PYTHONPATH")]))}
    out = subprocess.run([sys.executable, "-m", "chatsieve.cli", *argv[1:]], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip().endswith("1 passed, 0 failed"), out.stdout + out.stderr


def test_a_type_tag_pair_is_read_as_k2_horizons():
    """`type_open`/`type_close` in a file: the same syntax as K2-Horizon's built-in XML body, and calls read alike."""
    from chatsieve import parse
    from chatsieve.args.k2_horizon import K2_HORIZON_SYNTAX as K2

    syntax = {k: getattr(K2, k) for k in ("call_open", "call_close", "key_open", "key_close", "value_open", "value_close",
                                          "type_open", "type_close")}  # fmt: skip
    syntax |= {"name_close": [], "structural": list(K2.structural), "openers": list(K2.openers), "closers": list(K2.closers)}
    spec = parse_format({"name": "k2_file", "calls": {"codec": "xml_kv", "open": ["<ifm|tool_call>"],
                                                      "close": ["</ifm|tool_call>"], "syntax": syntax}}, "k2.json")
    assert spec.codec.syntax == K2
    text = "<ifm|tool_call>f<ifm|arg_key>n</ifm|arg_key><ifm|arg_type>integer</ifm|arg_type><ifm|arg_value>7</ifm|arg_value></ifm|tool_call>"
    tools = [{"name": "f", "parameters": {"type": "object", "properties": {"n": {"type": "string"}}}}]
    (call,) = parse(text, spec, tools=tools).tool_calls
    assert (call.name, call.arguments) == ("f", '{"n":"7"}')
