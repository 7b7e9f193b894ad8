"""Finds the coding agents (npm packages the .ci scripts install, cached by version) for tests.

Looks at the agent's environment variable, then ${CHATSIEVE_CACHE:-~/.cache/chatsieve}/NAME-VERSION.
Without it, tests skip with the reason and the command that installs it -- except under CI
(CHATSIEVE_REQUIRE_MODELS=1), where a missing agent fails the test instead.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from models import missing


@dataclass(frozen=True)
class Agent:
    name: str  # the cache directory's prefix
    version: str
    env: str  # a variable that names the binary instead
    binary: str  # inside the cache directory
    script: str  # what installs it


CODEX = Agent("codex", "0.169.0", "CHATSIEVE_CODEX", "node_modules/.bin/codex", ".ci/codex.sh")
CLAUDE_CODE = Agent(
    "claude-code", "2.1.328", "CHATSIEVE_CLAUDE", "node_modules/.bin/claude", ".ci/claude_code.sh"
)


def agent_binary(agent: Agent) -> Path:
    """The agent's binary, checked to run; or skip (fail under CI) saying how to install it."""
    given = os.environ.get(agent.env)
    cache = Path(os.environ.get("CHATSIEVE_CACHE") or Path.home() / ".cache" / "chatsieve")
    path = Path(given) if given else cache / f"{agent.name}-{agent.version}" / agent.binary
    reason = None
    if not path.is_file():
        reason = f"{agent.name} {agent.version} not found at {path}: run {agent.script} (or set {agent.env})"
    else:
        try:
            out = subprocess.run([str(path), "--version"], capture_output=True, text=True, timeout=60)
            if out.returncode != 0 or agent.version not in out.stdout:
                reason = (
                    f"{path} --version says {out.stdout.strip() or out.stderr.strip()!r}, not {agent.version}"
                )
        except (OSError, subprocess.TimeoutExpired) as e:
            reason = f"{path} does not run: {e}"
    if reason is not None:
        missing(reason)
    return path
