"""Peak memory of `chatsieve serve` per request byte (issue 19, item 4).

A stand-in engine (this process) and `chatsieve serve` (its own process, Qwen3's tokenizer and
template); this process posts chat requests of a few megabytes — plain text, and text full of
delimiters (isolation's worst case) — one at a time and several at once, and reads the server's
peak resident memory (VmHWM, reset before each case through /proc/PID/clear_refs) and what stays
resident afterwards. Prints, per case, the peak above the idle server divided by the bytes sent.

    CHATSIEVE_MODELS=../shared/models python bench/bench_memory.py [--sizes 1,3] [--concurrency 1,3]

First, what one streaming parser holds after a long output with 20 logprob alternatives per
token, as the server runs it (logprobs sent on, not kept) and as a batch caller does (kept).

Linux only (/proc). Figures vary with the allocator's reuse: compare rows of one run.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import httpx  # noqa: E402
from fake_engines import FakeEngine, Script, ServerThread, serve_process  # noqa: E402
from models import models_dir  # noqa: E402

import chatsieve  # noqa: E402


def status_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def reset_peak(pid: int) -> None:
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # VmHWM := VmRSS


def body(size: int, delimiters: bool) -> bytes:
    unit = "The weather in Paris is sunny and mild today. "
    if delimiters:
        unit += "<tool_call> </tool_call> <|im_end|> "
    text = "[mem] " + unit * (size // len(unit))
    return json.dumps({"model": "bench", "messages": [{"role": "user", "content": text}], "max_tokens": 4,
                       "chat_template_kwargs": {"enable_thinking": False}}).encode()


def stream_memory(tok, tokens: int) -> None:
    """What one streaming parser holds after `tokens` tokens with 20 alternatives each, with the
    server's setting (logprobs sent on, not kept) and with a batch caller's (kept)."""
    import tracemalloc

    from chatsieve.events import TokenLogprob

    ids = tok.encode("The weather in Paris is sunny and mild today. " * (tokens // 10 + 1))[:tokens]
    print(f"\n| parser ({tokens} tokens, top 20) | held after the stream, MB |\n|---|---|")
    for keep in (True, False):
        tracemalloc.start()
        p = chatsieve.StreamParser("qwen3", tokenizer=tok, thinking=False, keep_logprobs=keep)
        for k in range(0, len(ids), 4):
            batch = ids[k:k + 4]
            lps = [TokenLogprob(i, "t", -0.5, tuple((str(j), -1.0 - j) for j in range(20))) for i in batch]
            p.feed(token_ids=batch, logprobs=lps)  # the events go out and are dropped, as a stream's do
        held = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        print(f"| keep_logprobs={keep} | {held / 1e6:.1f} |", flush=True)
        del p


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1,3", help="request sizes in MB")
    ap.add_argument("--concurrency", default="1,3")
    ap.add_argument("--context", type=int, default=4_000_000, help="--max-model-len (large: no early refusal)")
    ap.add_argument("--stream-tokens", type=int, default=130_000, help="tokens per stream with logprobs")
    args = ap.parse_args()
    models = models_dir()
    tok = chatsieve.load_tokenizer(models / "qwen3")
    stream_memory(tok, args.stream_tokens)
    engine = FakeEngine(tok.decode, {"[mem]": Script(tok.encode("ok<|im_end|>"))})
    with ServerThread(engine.app) as eng, serve_process(
        "--model-dir", str(models / "qwen3"), "--format", "qwen3", "--backend", eng.url,
        "--served-model-name", "bench", "--max-model-len", str(args.context),
        "--max-request-bytes", str(16 << 20), "--log-level", "warning",
    ) as (proc, _port, url):
        pid = proc.pid
        httpx.post(url + "/v1/chat/completions", content=body(10_000, True),
                   headers={"content-type": "application/json"}, timeout=600)
        print(f"idle server: {status_kb(pid, 'VmRSS') / 1024:.0f} MB resident")
        print("| request | MB each | concurrent | status | peak above idle, MB | peak / bytes sent | resident after, MB |")
        print("|---|---|---|---|---|---|---|")
        for delimiters in (False, True):
            for mb in map(float, args.sizes.split(",")):
                for n in map(int, args.concurrency.split(",")):
                    data = body(int(mb * 1_000_000), delimiters)
                    time.sleep(0.5)
                    base = status_kb(pid, "VmRSS")
                    reset_peak(pid)
                    codes: list[int] = []

                    def send(data: bytes = data, codes: list[int] = codes) -> None:
                        r = httpx.post(url + "/v1/chat/completions", content=data,
                                       headers={"content-type": "application/json"}, timeout=600)
                        codes.append(r.status_code)

                    threads = [threading.Thread(target=send) for _ in range(n)]
                    for t in threads:
                        t.start()
                    for t in threads:
                        t.join()
                    peak = status_kb(pid, "VmHWM") - base
                    time.sleep(0.5)
                    after = status_kb(pid, "VmRSS")
                    kind = "with delimiters" if delimiters else "plain text"
                    print(f"| {kind} | {len(data) / 1e6:.1f} | {n} | {sorted(set(codes))} | {peak / 1024:.0f} | "
                          f"{peak * 1024 / (len(data) * n):.1f}x | {after / 1024:.0f} |", flush=True)


if __name__ == "__main__":
    main()
