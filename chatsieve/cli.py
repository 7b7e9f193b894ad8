"""The `chatsieve` command: parse | check | formats | render | serve | dynamo."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path


class UsageError(Exception):
    """Bad input from the user: reported on one line, exit status 2."""


def _read_input(path: str) -> str:
    try:
        if path == "-":
            return sys.stdin.read()
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"cannot read {path}: {e.strerror if isinstance(e, OSError) else e}") from None


def _read_json(path: str, what: str):
    text = _read_input(path)
    try:
        return json.loads(text)
    except ValueError as e:
        raise UsageError(f"{what} {path} is not valid JSON: {e}") from None


def _thinking(value: str | None) -> bool | None:
    return None if value is None else value == "on"


def cmd_parse(args: argparse.Namespace) -> int:
    from . import formats
    from .parser import StreamParser
    from .tools import ToolsError, normalize_tools

    if args.list_formats:
        args.detect = None
        return cmd_formats(args)
    _format_file(args)
    if not args.format:
        raise UsageError("--format is required (list them with --list-formats)")
    try:
        formats.get(args.format)
    except formats.UnknownFormat as e:
        raise UsageError(str(e)) from None
    tools = _read_json(args.tools, "tools file") if args.tools else None
    try:
        normalize_tools(tools)
    except ToolsError as e:
        raise UsageError(f"tools file {args.tools}: {e}") from None
    raw = _read_input(args.file)
    if args.chunks:
        try:
            chunks = json.loads(raw)
        except ValueError as e:
            raise UsageError(f"--chunks input is not JSON: {e}") from None
        if not isinstance(chunks, list) or not all(isinstance(c, str) for c in chunks):
            raise UsageError("--chunks input must be a JSON list of strings")
    else:
        chunks = [raw]
    parser = StreamParser(
        args.format, tools=tools, thinking=_thinking(args.thinking), stream_arguments=args.stream_arguments
    )
    for chunk in chunks:
        parser.feed(chunk)
    parser.finish()
    json.dump(parser.message.to_dict(), sys.stdout, ensure_ascii=False, indent=2)
    sys.stdout.write("\n")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    from .fixtures import FixtureError, check_paths

    models = args.models or os.environ.get("CHATSIEVE_MODELS")
    _format_file(args)
    for p in args.paths:
        if not Path(p).exists():
            raise UsageError(f"no such fixture file or directory: {p}")
    try:
        n, failures = check_paths(args.paths, _tokenizer_resolver(models))
    except FixtureError as e:
        raise UsageError(str(e)) from None
    by_case: dict[tuple[str, str], list] = {}
    for f in failures:
        by_case.setdefault((f.case.file, f.case.name), []).append(f)
    for fs in by_case.values():  # one line per failing case: its first failure
        more = f" (+{len(fs) - 1} more modes)" if len(fs) > 1 else ""
        print(f"FAIL {fs[0]}{more}")
    print(f"{n - len(by_case)} passed, {len(by_case)} failed")
    return 1 if failures else 0


def _format_file(args: argparse.Namespace) -> None:
    """--format-file: the family registered under its name (and named by --format)."""
    if not getattr(args, "format_file", None):
        return
    from .format_file import FormatFileError, register_file

    try:
        spec = register_file(args.format_file)
    except FormatFileError as e:
        raise UsageError(str(e)) from None
    if getattr(args, "format", None) not in (None, spec.name):
        raise UsageError("give --format or --format-file, not both")
    if hasattr(args, "format"):
        args.format = spec.name


def cmd_detect(args: argparse.Namespace) -> int:
    """The format a chat template (a .jinja file, a tokenizer_config.json, a model directory or a
    GGUF) writes: its name and why, or the nearest formats (exit status 1)."""
    from .detect import analyze, read_template_file

    path = Path(args.detect)
    if not path.exists():
        raise UsageError(f"--detect {path}: no such file or directory")
    try:
        template = read_template_file(path)
    except (OSError, ValueError, UnicodeDecodeError) as e:
        raise UsageError(f"--detect {path}: {e}") from None
    tokenizer = None
    if path.is_dir() or path.suffix == ".gguf":
        try:
            from .tokenizer import load_tokenizer

            tokenizer = load_tokenizer(path)
        except (OSError, ValueError, ImportError):
            tokenizer = None  # the template alone still places it
    found = analyze(template, tokenizer)
    if args.json:
        out = {"format": found.match.name if found.match else None,
               "evidence": list(found.match.evidence) if found.match else [],
               "problem": found.problem,
               "candidates": [{"format": c.name, "score": c.score, "reads_calls": c.fits, "why": list(c.why)}
                              for c in found.candidates[:5]]}
        json.dump(out, sys.stdout, ensure_ascii=False, indent=2)
        sys.stdout.write("\n")
    elif found.match is not None:
        print(found.match.name)
        for line in found.match.evidence:
            print(f"  - {line}")
        for c in found.match.runners_up:
            print(f"  runner-up: {c}")
    else:
        print(f"no format: {found.problem}")
        for c in found.candidates[:3]:
            print(f"  nearest: {c}")
    return 0 if found.match is not None else 1


def cmd_formats(args: argparse.Namespace) -> int:
    """Print the formats table (Markdown), gates computed with the real tokenizers in --models."""
    from .table import formats_table, reference_tokenizer

    if args.detect:
        return cmd_detect(args)

    models = args.models or os.environ.get("CHATSIEVE_MODELS")
    if models and not Path(models).is_dir():
        raise UsageError(f"--models {models} is not a directory")
    tokenizer_for = (lambda ref: reference_tokenizer(Path(models), ref)) if models else None
    sys.stdout.write(formats_table(tokenizer_for))
    return 0


def _tokenizer_resolver(models: str | None):
    """Fixture `tokenizer:` names -> tokenizers: a path, a short name of the test suite's
    (`testdata.TOKENIZERS`: `deepseek_v4` is `deepseek/v4`), or a folder under --models."""
    cache: dict[str, object] = {}

    def resolve(name: str):
        if name not in cache:
            from .testdata import named_tokenizer

            try:
                cache[name] = named_tokenizer(name, models)
            except (OSError, ValueError, ImportError) as e:
                print(f"chatsieve check: token mode skipped for tokenizer {name!r}: {e}", file=sys.stderr)
                cache[name] = None
        return cache[name]

    return resolve


_DELEGATED = {
    "render": ("prompt.cli", "render_main", "render a chat prompt: text and token ids"),
    "serve": ("server", "serve_main", "OpenAI-compatible server in front of an engine"),
    "dynamo": ("integrations.dynamo", "main", "NVIDIA Dynamo's frontend with chatsieve as its chat processor"),
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(prog="chatsieve", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)

    p = sub.add_parser("parse", help="parse raw model output into a message (JSON)")
    p.add_argument("--format", help="model family, e.g. gemma4, qwen3 (required)")
    p.add_argument("--format-file", help="a family described in a format file (YAML or JSON) instead of --format")
    p.add_argument("--list-formats", action="store_true", help="print the formats table and exit")
    p.add_argument("--models", help=argparse.SUPPRESS)
    p.add_argument("--tools", help="JSON file with the request's tools")
    p.add_argument("--thinking", choices=("on", "off"))
    p.add_argument("--chunks", action="store_true", help="input is a JSON list of delta strings")
    p.add_argument("--stream-arguments", action="store_true", help="stream tool arguments (incomplete calls flagged)")
    p.add_argument("file", nargs="?", default="-", help="model output file, or - for stdin")
    p.set_defaults(run=cmd_parse)

    c = sub.add_parser("check", help="run YAML fixture files (batch, every split, random chunkings, tokens)")
    c.add_argument("paths", nargs="+")
    c.add_argument("--models", help="directory of tokenizers named by fixtures (default $CHATSIEVE_MODELS)")
    c.add_argument("--format-file", help="a format file whose family the fixtures name (format: NAME)")
    c.set_defaults(run=cmd_check)

    f = sub.add_parser("formats", help="print the formats table (Markdown): names, syntax, gates, templates")
    f.add_argument("--models", help="real tokenizers to compute the gates with (default $CHATSIEVE_MODELS)")
    f.add_argument("--detect", metavar="PATH",
                   help="print the format a chat template writes (a .jinja file, a tokenizer_config.json, a model "
                   "directory or a GGUF) and why; exit status 1 with the nearest formats when none does")
    f.add_argument("--json", action="store_true", help="with --detect: the answer as JSON")
    f.set_defaults(run=cmd_formats)

    for name, (_, _, help_) in _DELEGATED.items():
        sub.add_parser(name, help=help_, add_help=False)

    if argv and argv[0] in _DELEGATED:  # these subcommands parse their own options
        import importlib

        module, fn, _ = _DELEGATED[argv[0]]
        return getattr(importlib.import_module(f"chatsieve.{module}"), fn)(argv[1:])
    args = ap.parse_args(argv)
    try:
        return args.run(args)
    except UsageError as e:
        print(f"chatsieve {args.cmd}: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `chatsieve parse ... | head`: the reader left; not an error
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
