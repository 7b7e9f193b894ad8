"""The whole fixture corpus, tallied per format: cases and passes (must stay 100%).

Each case is checked as `chatsieve check` does it in batch (whole calls and
`stream_arguments`, against its expectation and the invariants); every split point,
the fast lane and token mode are `test_fixtures.py`'s. The table prints with `-s`
and in the failure message.
"""

from __future__ import annotations

from pathlib import Path

from chatsieve import formats
from chatsieve.fixtures import (
    Failure,
    _invariants,
    _run,
    compare,
    iter_fixture_files,
    load_cases,
    tally,
    tally_table,
)

FIXTURES = Path(__file__).parent / "fixtures"


def _batch_failures(case) -> list[Failure]:
    spec = formats.get(case.format)
    thought = frozenset() if spec.calls_inside_reasoning else frozenset((*spec.call_open, *spec.call_close, *spec.inner))
    plain = all(not s for _, s in case.segments)
    out = []
    for stream in (False, True):
        expect = case.expect_stream if stream and case.expect_stream is not None else case.expect
        try:
            msg, events = _run(case, [case.text], stream=stream)
        except Exception as e:  # noqa: BLE001 - a parser must never raise on model output
            out.append(Failure(case, "batch", f"raised {type(e).__name__}: {e}"))
            break
        problem = (compare(msg, expect) if plain else None) or _invariants(msg, events, spec.delimiters, plain, thought, frozenset(spec.literal_outside))
        if problem:
            out.append(Failure(case, f"batch, stream_arguments={stream}", problem))
            break
    return out


def test_corpus_per_format(capsys) -> None:
    cases = [c for f in iter_fixture_files([FIXTURES]) for c in load_cases(f)]
    failures = [f for c in cases for f in _batch_failures(c)]
    rows = tally(cases, failures)
    table = tally_table(rows)
    with capsys.disabled():
        print("\n" + table)
    missing = {formats.get(n).name for n in formats.names()} - {r.format for r in rows}
    assert not missing, f"formats without fixtures: {sorted(missing)}"
    assert not failures, table + "\n" + "\n".join(map(str, failures[:20]))
