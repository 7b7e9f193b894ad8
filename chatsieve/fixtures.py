"""The fixture runner behind the test suite and `chatsieve check`.

A fixture file is YAML: defaults (`format`, `tools`, `tokenizer`, `thinking`) and
`cases`, each with `text` (or `segments`) and `expect`. Every case is parsed in
batch, streamed at every split point, on seeded random chunkings, with argument
streaming on, and in token mode when a tokenizer is named. See docs/api.md, "Fixtures".
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .events import Message, ToolCallArgsDelta, ToolCallEnd
from .parser import StreamParser
from .tools import json_text

EVERY_SPLIT_LIMIT = 1500  # longer texts: splits near markers plus an even sample
RANDOM_CHUNKINGS = 12
_CASE_KEYS = {
    "name", "text", "segments", "expect", "expect_stream", "thinking", "tools", "prompt",
    "format", "tokenizer", "token_mode", "finish_reason", "stop", "include_stop_str_in_output",
}  # fmt: skip
_EXPECT_KEYS = {"reasoning", "content", "tool_calls", "finish_reason", "diagnostics"}


class FixtureError(ValueError):
    """A fixture file that cannot be read as fixtures."""


@dataclass
class Case:
    name: str
    file: str
    format: str
    segments: list[tuple[str, bool]]  # (text, spelled): spelled text never becomes a marker id
    expect: dict
    expect_stream: dict | None = None
    options: dict = field(default_factory=dict)
    tokenizer: str | None = None
    token_mode: bool = True
    finish_reason: str | None = None

    @property
    def text(self) -> str:
        return "".join(t for t, _ in self.segments)


@dataclass
class Failure:
    case: Case
    mode: str
    detail: str

    def __str__(self) -> str:
        return f"{self.case.file}::{self.case.name} [{self.mode}] {self.detail}"


def load_cases(path: str | Path) -> list[Case]:
    try:
        import yaml
    except ImportError:
        raise FixtureError("reading fixtures needs PyYAML: pip install 'chatsieve[fixtures]'") from None

    p = Path(path)
    try:
        doc = yaml.safe_load(p.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as e:
        raise FixtureError(f"{p}: cannot read fixtures: {e}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("cases"), list):
        raise FixtureError(f"{p}: expected a mapping with a 'cases' list")
    cases = []
    for i, raw in enumerate(doc["cases"]):
        where = f"{p}: case {i}"
        if not isinstance(raw, dict):
            raise FixtureError(f"{where}: not a mapping")
        unknown = set(raw) - _CASE_KEYS
        if unknown:
            raise FixtureError(f"{where}: unknown keys {sorted(unknown)}")
        name = str(raw.get("name", f"case{i}"))
        fmt = raw.get("format", doc.get("format"))
        if not fmt:
            raise FixtureError(f"{where} ({name}): no format (set it for the file or the case)")
        if "segments" in raw:
            segs = []
            for s in raw["segments"]:
                if isinstance(s, str):
                    segs.append((s, False))
                elif isinstance(s, dict) and isinstance(s.get("text"), str):
                    segs.append((s["text"], bool(s.get("spelled", False))))
                else:
                    raise FixtureError(f"{where} ({name}): a segment is a string or {{text, spelled}}")
        elif isinstance(raw.get("text"), str):
            segs = [(raw["text"], False)]
        else:
            raise FixtureError(f"{where} ({name}): needs 'text' or 'segments'")
        expect = raw.get("expect")
        if not isinstance(expect, dict) or set(expect) - _EXPECT_KEYS:
            raise FixtureError(f"{where} ({name}): 'expect' must be a mapping of {sorted(_EXPECT_KEYS)}")
        options = {
            "tools": raw.get("tools", doc.get("tools")),
            "thinking": raw.get("thinking", doc.get("thinking")),
            "prompt": raw.get("prompt"),
            "stop": raw.get("stop"),
            "include_stop_str_in_output": raw.get("include_stop_str_in_output", False),
        }
        cases.append(
            Case(
                name=name,
                file=f"{p.parent.name}/{p.name}",
                format=fmt,
                segments=segs,
                expect=expect,
                expect_stream=raw.get("expect_stream"),
                options=options,
                tokenizer=raw.get("tokenizer", doc.get("tokenizer")),
                token_mode=raw.get("token_mode", True),
                finish_reason=raw.get("finish_reason"),
            )
        )
    return cases


def iter_fixture_files(paths: list[str | Path]) -> Iterator[Path]:
    for p in map(Path, paths):
        if p.is_dir():
            yield from sorted(p.rglob("*.yaml"))
        else:
            yield p


# ---- checking -------------------------------------------------------------------------------
def normalized(msg: Message) -> dict:
    d = msg.to_dict()
    for c in d["tool_calls"]:
        c.pop("id")
    d["diagnostics"] = len(d["diagnostics"])
    return d


def compare(msg: Message, expect: dict) -> str | None:
    """None when the message meets the expectation, else what differs."""
    got = msg.to_dict()
    for key in ("reasoning", "content", "finish_reason"):
        if key in expect and got[key] != expect[key]:
            return f"{key}: expected {expect[key]!r}, got {got[key]!r}"
    if "tool_calls" in expect:
        want = expect["tool_calls"] or []
        calls = got["tool_calls"]
        if len(calls) != len(want):
            return f"tool_calls: expected {len(want)}, got {len(calls)}: {calls}"
        raw_calls = msg.tool_calls
        for i, (c, w) in enumerate(zip(calls, want)):
            if "arguments_json" in w and raw_calls[i].arguments != w["arguments_json"]:
                return f"tool_calls[{i}].arguments: expected exactly {w['arguments_json']!r}, got {raw_calls[i].arguments!r}"
            for k in ("name", "arguments", "id", "incomplete"):
                if k in w and c.get(k, False if k == "incomplete" else None) != w[k]:
                    return f"tool_calls[{i}].{k}: expected {w[k]!r}, got {c.get(k)!r}"
    if "diagnostics" in expect:
        want = expect["diagnostics"]
        diags = got["diagnostics"]
        if isinstance(want, int):
            if len(diags) != want:
                return f"diagnostics: expected {want}, got {len(diags)}: {diags}"
        else:
            for s in want:
                if not any(s in d["raw"] or s in d["why"] for d in diags):
                    return f"diagnostics: none mentions {s!r}: {diags}"
    return None


def _run(case: Case, chunks: list, *, stream: bool, tokenizer=None, fast_lane: bool = True) -> tuple[Message, list]:
    p = StreamParser(case.format, stream_arguments=stream, tokenizer=tokenizer, fast_lane=fast_lane, **case.options)
    events = []
    for ch in chunks:
        events += p.feed(token_ids=ch) if tokenizer is not None else p.feed(ch)
    events += p.finish(case.finish_reason)
    return p.message, events


def _invariants(
    msg: Message,
    events: list,
    spec_delims: tuple[str, ...],
    text_mode: bool,
    thought: frozenset[str] = frozenset(),
    literal: frozenset[str] = frozenset(),
) -> str | None:
    """`thought`: call markers that are reasoning text inside a reasoning block; `literal`:
    markers that are plain text outside a call region (`FormatSpec.literal_outside`)."""
    args: dict[int, list[str]] = {}
    ended: dict[int, bool] = {}
    for e in events:
        if isinstance(e, ToolCallArgsDelta):
            args.setdefault(e.index, []).append(e.json_text)
        elif isinstance(e, ToolCallEnd):
            ended[e.index] = e.incomplete
    for i, call in enumerate(msg.tool_calls):
        if "".join(args.get(i, [])) != call.arguments:
            return f"tool call {i}: argument deltas do not concatenate to the final arguments"
        if not ended.get(i, True) and json_text(call.arguments) is None:  # any depth
            return f"tool call {i} ended complete with invalid JSON arguments {call.arguments[:200]!r}"
    if text_mode:
        for field_name in ("content", "reasoning"):
            v = getattr(msg, field_name) or ""
            for d in spec_delims:
                if d in v and d not in literal and not (field_name == "reasoning" and d in thought):
                    return f"control marker {d!r} leaked into {field_name}"
    return None


def split_points(text: str, delims: tuple[str, ...]) -> list[int]:
    n = len(text)
    if n <= EVERY_SPLIT_LIMIT:
        return list(range(1, n))
    pts = set(range(1, n, max(1, n // 100)))
    for d in delims:
        start = text.find(d)
        while start >= 0:
            pts.update(k for k in range(start - 2, start + len(d) + 3) if 0 < k < n)
            start = text.find(d, start + 1)
    return sorted(pts)


def check_case(case: Case, tokenizer_for: Callable[[str], Any] | None = None) -> list[Failure]:
    from . import formats

    spec = formats.get(case.format)
    delims = spec.delimiters
    # a call written inside a reasoning block stays reasoning text (docs/policies.md)
    thought = frozenset((*spec.call_open, *spec.call_close, *spec.inner))
    if spec.calls_inside_reasoning:
        thought = frozenset()
    literal = frozenset(spec.literal_outside)
    text = case.text
    failures: list[Failure] = []

    def expect_for(stream: bool) -> dict:
        return case.expect_stream if stream and case.expect_stream is not None else case.expect

    for stream in (False, True):
        mode = "stream_arguments" if stream else "whole calls"
        expect = expect_for(stream)
        try:
            base, events = _run(case, [text], stream=stream)
        except Exception as e:  # a parser must never raise on model output
            failures.append(Failure(case, f"batch, {mode}", f"raised {type(e).__name__}: {e}"))
            continue
        plain = all(not s for _, s in case.segments)  # no spelled segment: text mode sees what tokens see
        problem = compare(base, expect) if plain else None
        problem = problem or _invariants(base, events, delims, plain, thought, literal)
        if problem:
            failures.append(Failure(case, f"batch, {mode}", problem))
            continue
        want = normalized(base)
        rng = random.Random(f"{case.file}:{case.name}")
        chunkings = [[text[:k], text[k:]] for k in split_points(text, delims)]
        chunkings.append(list(text))
        for _ in range(RANDOM_CHUNKINGS):
            cuts = sorted(rng.sample(range(1, len(text)), min(len(text) - 1, rng.randint(1, 12)))) if len(text) > 1 else []
            bounds = [0, *cuts, len(text)]
            chunkings.append([text[a:b] for a, b in zip(bounds, bounds[1:])])
        # (chunks, fast lane): every chunking with StreamParser's fast lane, and one
        # character at a time through the full pipeline only (the lane off)
        runs = [(chunks, True) for chunks in chunkings] + [(list(text), False)]
        for chunks, fast in runs:
            where = f"stream{'' if fast else ' full pipeline'}, {mode}"
            try:
                msg, events = _run(case, chunks, stream=stream, fast_lane=fast)
            except Exception as e:
                failures.append(Failure(case, where, f"raised {type(e).__name__} at {chunks[:3]}…: {e}"))
                break
            problem = None if normalized(msg) == want else f"differs from batch at chunks {_short(chunks)}: {normalized(msg)} != {want}"
            problem = problem or _invariants(msg, events, delims, plain, thought, literal)
            if problem:
                failures.append(Failure(case, where, problem))
                break

        if case.tokenizer and case.token_mode and tokenizer_for is not None:
            tok = tokenizer_for(case.tokenizer)
            if tok is None:
                continue
            ids = encode_segments(tok, case.segments)
            for size, fast in ((1, True), (3, True), (len(ids) or 1, True), (1, False)):
                chunks = [ids[k : k + size] for k in range(0, len(ids), size)]
                where = f"tokens/{size}{'' if fast else ' full pipeline'}, {mode}"
                try:
                    msg, events = _run(case, chunks, stream=stream, tokenizer=tok, fast_lane=fast)
                except Exception as e:
                    failures.append(Failure(case, where, f"raised {type(e).__name__}: {e}"))
                    break
                problem = compare(msg, expect) or _invariants(msg, events, (), False)
                if problem:
                    failures.append(Failure(case, where, problem))
                    break
    return failures


def _short(chunks: list) -> str:
    s = repr(chunks)
    return s if len(s) < 200 else s[:200] + "…"


def encode_segments(tok: Any, segments: list[tuple[str, bool]]) -> list[int]:
    """Token ids for the case: plain segments as the tokenizer encodes them (markers
    become their ids); spelled segments from ordinary sub-word pieces only."""
    ids: list[int] = []
    for text, spelled in segments:
        ids += encode_spelled(tok, text) if spelled else tok.encode(text)
    text = "".join(t for t, _ in segments)
    if tok.decode(ids) != text:
        raise FixtureError(f"the tokenizer does not round-trip this case's text: {text[:80]!r}")
    return ids


def encode_spelled(tok: Any, text: str) -> list[int]:
    """Encode text so that no added token matches: each added-token string in it is
    cut after its first character, so it is spelled from ordinary pieces."""
    added = sorted((t for t in tok.added_tokens() if len(t) > 1 and t in text), key=len, reverse=True)
    parts: list[str] = []
    i = 0
    while i < len(text):
        hit = next((t for t in added if text.startswith(t, i)), None)
        if hit is None:
            j = i + 1
            while j < len(text) and not any(text.startswith(t, j) for t in added):
                j += 1
            parts.append(text[i:j])
            i = j
        else:
            parts += [hit[0], hit[1:]]
            i += len(hit)
    ids: list[int] = []
    for part in parts:
        ids += tok.encode(part)
    return ids


def check_paths(paths: list[str | Path], tokenizer_for: Callable[[str], Any] | None = None) -> tuple[int, list[Failure]]:
    """Run every case in the files/directories; return (cases run, failures)."""
    n = 0
    failures: list[Failure] = []
    for f in iter_fixture_files(paths):
        for case in load_cases(f):
            n += 1
            failures += check_case(case, tokenizer_for)
    return n, failures


@dataclass
class FormatTally:
    """Cases of one format and how many passed."""

    format: str
    cases: int = 0
    passes: int = 0


def tally(cases: list[Case], failures: list[Failure]) -> list[FormatTally]:
    """Per format (the spec's name, aliases folded), cases and passes, by format name."""
    from . import formats

    failed = {id(f.case) for f in failures}
    out: dict[str, FormatTally] = {}
    for c in cases:
        name = formats.get(c.format).name
        t = out.setdefault(name, FormatTally(name))
        t.cases += 1
        t.passes += id(c) not in failed
    return [out[k] for k in sorted(out)]


def tally_table(rows: list[FormatTally]) -> str:
    """The tally as a plain-text table, with a total line."""
    lines = [f"{'format':<18} {'cases':>6} {'passes':>6}"]
    lines += [f"{r.format:<18} {r.cases:>6} {r.passes:>6}{'' if r.passes == r.cases else '  <- FAILING'}" for r in rows]
    lines.append(f"{'total':<18} {sum(r.cases for r in rows):>6} {sum(r.passes for r in rows):>6}")
    return "\n".join(lines)
