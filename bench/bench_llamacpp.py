"""What `chatsieve serve` costs in front of a real engine: the same prompt streamed by llama-server
directly (/completion on the prompt ids) and through chatsieve (/v1/chat/completions), Gemma 3
270M on CPU, greedy, end tokens banned so both generate exactly --tokens tokens. Prints the
median tokens/s and time to first token of each, and chatsieve/direct as ratios.

    .ci/llama_server.sh                       # once: builds llama-server into ~/.cache/chatsieve
    python bench/bench_llamacpp.py [--tokens 128] [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import real_engine  # noqa: E402  (tests/real_engine.py: finds and starts llama-server)
from bench_stream import models_dir  # noqa: E402

from chatsieve import load_tokenizer, render_prompt  # noqa: E402

MESSAGES = [{"role": "user", "content": "Tell me a long story about a lighthouse keeper."}]
END_IDS = (1, 106)  # <eos>, <end_of_turn>: banned so every run has the same length


def sse_events(resp: httpx.Response):
    for line in resp.iter_lines():
        if line.startswith("data:"):
            data = line[5:].strip()
            if data and data != "[DONE]":
                yield json.loads(data)


def run_direct(url: str, ids: list[int], n: int) -> tuple[float, float, int]:
    # cache_prompt as chatsieve sends it, so both find the prompt cached after the warm-up
    body = {"prompt": ids, "n_predict": n, "temperature": 0, "stream": True, "return_tokens": True,
            "cache_prompt": True, "logit_bias": [[i, -100] for i in END_IDS]}  # fmt: skip
    t0 = time.perf_counter()
    first = None
    count = 0
    with httpx.stream("POST", url + "/completion", json=body, timeout=300) as r:
        for event in sse_events(r):
            got = len(event.get("tokens") or [])
            if got and first is None:
                first = time.perf_counter()
            count += got
            if event.get("stop"):
                break
    end = time.perf_counter()
    return first - t0, (count - 1) / (end - first), count


def run_chatsieve(url: str, n: int) -> tuple[float, float, int]:
    body = {"messages": MESSAGES, "max_tokens": n, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}, "logit_bias": {str(i): -100 for i in END_IDS}}  # fmt: skip
    t0 = time.perf_counter()
    first = None
    count = 0
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=300) as r:
        for event in sse_events(r):
            if event.get("usage"):
                count = event["usage"]["completion_tokens"]
            choices = event.get("choices") or []
            if choices and choices[0]["delta"].get("content") and first is None:
                first = time.perf_counter()
    end = time.perf_counter()
    return first - t0, (count - 1) / (end - first), count


def wait_http(url: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    sys.exit(f"bench: {url} did not answer")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1, help="llama-server -t (1 suits a shared machine)")
    args = ap.parse_args()

    gemma3 = models_dir() / "gemma3"
    tok = load_tokenizer(gemma3)
    ids = list(render_prompt(MESSAGES, tokenizer=tok, format="gemma3").token_ids)
    with real_engine.LlamaServer(real_engine.llama_server_path(), real_engine.gguf_path(), slots=1,
                                 threads=args.threads) as engine:
        port = real_engine.free_port()
        proxy = f"http://127.0.0.1:{port}"
        serve = subprocess.Popen(
            [sys.executable, "-m", "chatsieve.cli", "serve", "--model-dir", str(gemma3), "--format", "gemma3",
             "--backend", engine.url, "--backend-kind", "llamacpp", "--port", str(port), "--log-level", "warning"],
        )  # fmt: skip
        try:
            wait_http(proxy + "/health")
            run_direct(engine.url, ids, 8)  # warm-up both paths
            run_chatsieve(proxy, 8)
            direct, through = [], []
            for _ in range(args.runs):  # interleaved, so drift hits both alike
                direct.append(run_direct(engine.url, ids, args.tokens))
                through.append(run_chatsieve(proxy, args.tokens))
        finally:
            serve.terminate()
            serve.wait(10)

    def med(rows, i):
        return statistics.median(r[i] for r in rows)

    counts = {r[2] for r in direct + through}
    print(f"Gemma 3 270M Q4_K_M, llama-server -np 1 -t {args.threads}, {args.tokens} tokens, "
          f"{args.runs} runs each (median)")
    print(f"tokens generated per run: {sorted(counts)}")
    print(f"{'':12} {'TTFT ms':>9} {'tokens/s':>9}")
    print(f"{'direct':12} {med(direct, 0) * 1e3:9.1f} {med(direct, 1):9.1f}")
    print(f"{'chatsieve':12} {med(through, 0) * 1e3:9.1f} {med(through, 1):9.1f}")
    print(f"ratio chatsieve/direct: TTFT {med(through, 0) / med(direct, 0):.2f}x, "
          f"tokens/s {med(through, 1) / med(direct, 1):.3f}x")  # fmt: skip


if __name__ == "__main__":
    main()
