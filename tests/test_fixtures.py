"""Every YAML fixture: batch, every split point, random chunkings, argument
streaming, and token mode with the real tokenizer the fixture names."""

from __future__ import annotations

from pathlib import Path

import models
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chatsieve.fixtures import Case, check_case, compare, iter_fixture_files, load_cases, normalized
from chatsieve.parser import StreamParser, parse

FIXTURES = Path(__file__).parent / "fixtures"
CASES = [c for f in iter_fixture_files([FIXTURES]) for c in load_cases(f)]


def _id(case: Case) -> str:
    return f"{case.file.removesuffix('.yaml')}::{case.name}"


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_fixture(case: Case) -> None:
    failures = check_case(case, models.tokenizer)
    assert not failures, "\n".join(map(str, failures))


PLAIN = [c for c in CASES if all(not s for _, s in c.segments) and len(c.text) < 3000]


# check_case already streams every case through 12 seeded random chunkings per argument mode;
# this adds a few unseeded ones per run, with shrinking when one fails
@pytest.mark.parametrize("case", PLAIN, ids=_id)
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_chunking_matches_batch(case: Case, data) -> None:
    text = case.text
    stream = data.draw(st.booleans(), label="stream_arguments")
    cuts = data.draw(st.lists(st.integers(0, len(text)), max_size=20), label="cuts")
    bounds = sorted({0, len(text), *cuts})
    p = StreamParser(case.format, stream_arguments=stream, **case.options)
    for a, b in zip(bounds, bounds[1:]):
        p.feed(text[a:b])
    p.finish(case.finish_reason)
    batch = parse(text, case.format, stream_arguments=stream, **case.options)
    assert normalized(p.message) == normalized(batch)
    want = case.expect_stream if stream and case.expect_stream is not None else case.expect
    assert compare(p.message, want) is None
