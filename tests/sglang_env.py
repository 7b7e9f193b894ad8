"""Finds the SGLang venv (.ci/sglang.sh builds it, cached by version) for the SGLang plugin tests.

Looks at $CHATSIEVE_SGLANG_PYTHON, then ${CHATSIEVE_CACHE:-~/.cache/chatsieve}/sglang-VERSION.
Without it, tests skip with the reason and the command that builds it -- except under CI
(CHATSIEVE_REQUIRE_MODELS=1), where a missing venv fails the test instead.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from models import missing

SGLANG_VERSION = "0.5.23"
ENV = "CHATSIEVE_SGLANG_PYTHON"
SCRIPT = ".ci/sglang.sh"


def sglang_python() -> Path:
    """The SGLang venv's python, checked to import SGLang VERSION; or skip (fail under CI)."""
    given = os.environ.get(ENV)
    cache = Path(os.environ.get("CHATSIEVE_CACHE") or Path.home() / ".cache" / "chatsieve")
    path = Path(given) if given else cache / f"sglang-{SGLANG_VERSION}" / "bin" / "python"
    reason = None
    if not path.is_file():
        reason = f"the SGLang {SGLANG_VERSION} venv is not at {path}: run {SCRIPT} (or set {ENV})"
    elif not given and not (path.parent.parent / ".complete").is_file():
        reason = f"the SGLang venv at {path.parent.parent} is incomplete: run {SCRIPT} again"
    else:
        probe = "from importlib.metadata import version; print(version('sglang'))"
        try:
            out = subprocess.run([str(path), "-c", probe], capture_output=True, text=True, timeout=120)
            if out.returncode != 0 or out.stdout.strip() != SGLANG_VERSION:
                reason = f"{path} has sglang {out.stdout.strip() or out.stderr.strip()[-300:]!r}, not {SGLANG_VERSION}"
        except (OSError, subprocess.TimeoutExpired) as e:
            reason = f"{path} does not run: {e}"
    if reason is not None:
        missing(reason)
    return path
