"""The suite's own set-up: what differs between a CI machine and a laptop must not
change which tests pass."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

CONFTEST = Path(__file__).parent / "conftest.py"

MANY_CASES = """
import pytest
from hypothesis import given, settings, strategies as st

@pytest.mark.parametrize("n", range(1500))
@settings(max_examples=1)
@given(st.integers())
def test_many(n, x):
    pass
"""


def test_hypothesis_with_a_ci_variable_runs_a_test_with_many_parametrized_cases(tmp_path):
    # Hypothesis's own "ci" profile (loaded when CI is set) made this a RecursionError
    # past ~950 cases; tests/conftest.py loads one profile everywhere.
    shutil.copy(CONFTEST, tmp_path / "conftest.py")
    (tmp_path / "test_many.py").write_text(MANY_CASES)
    env = {**os.environ, "CI": "true"}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_many.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout[-3000:]
    assert "1500 passed" in run.stdout
