"""Peak memory of `chatsieve serve` per request byte (issue 19, item 4).

A stand-in engine (this process) and `chatsieve serve` (its own process, Qwen3's tokenizer and
template); this process posts chat requests of a few megabytes — plain text, and text full of
delimiters (isolation's worst case) — one at a time and several at once, and reads the server's
peak resident memory (VmHWM, reset before each case through /proc/PID/clear_refs) and what stays
resident afterwards. Prints, per case, the peak above the idle server divided by the bytes sent.

    CHATSIEVE_MODELS=../shared/models python bench/bench_memory.py [--sizes 1,3] [--concurrency 1,3]

First, what one streaming parser holds after a long output with 20 logprob alternatives per
token, as the server runs it (logprobs sent on, not kept) and as a batch caller does (kept).

Then the Responses store (issue 33): the files of a file store after a 20-step
previous_response_id chain against the bytes sent (each step a big reasoning item, which the
template drops, and a short question); the server's peak memory while 8 tiny continuations of
that chain's last response run at once; the same for a chain of 3.9 MB steps (as many as the
server takes); and a streamed Responses answer of 100k tokens with 3 logprob alternatives each:
the server's peak growth against the closing events' size and the last event's (response.completed;
chat completions beside it).

Linux only (/proc). Figures vary with the allocator's reuse: compare rows of one run.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
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


def post(url: str, path: str, data: dict) -> httpx.Response:
    return httpx.post(url + path, content=json.dumps(data), headers={"content-type": "application/json"},
                      timeout=600)


def store_files(path: Path) -> int:
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))


def chain(url: str, steps: int, step_bytes: int) -> tuple[str | None, int, int, list[int]]:
    """A previous_response_id chain of `steps` requests, each a reasoning item of `step_bytes`
    and a question; (last stored id, steps taken, bytes sent for them, statuses)."""
    last, sent, taken, codes = None, 0, 0, []
    for i in range(steps):
        items = [{"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "x" * step_bytes}]},
                 {"role": "user", "content": f"[mem] step {i}"}]
        data = {"model": "bench", "input": items, "previous_response_id": last, "max_output_tokens": 4,
                "reasoning": {"effort": "none"}}
        r = post(url, "/v1/responses", data)
        codes.append(r.status_code)
        if r.status_code != 200:
            break
        last, taken = r.json()["id"], taken + 1
        sent += len(json.dumps(data))
    return last, taken, sent, codes


def continuations(url: str, pid: int, last: str, n: int) -> tuple[float, list[int]]:
    """Peak resident memory above the server's before (MB) while `n` tiny continuations of
    `last` run at once; their statuses."""
    time.sleep(0.5)
    base = status_kb(pid, "VmRSS")
    reset_peak(pid)
    codes: list[int] = []
    data = {"model": "bench", "previous_response_id": last, "input": "[mem] go", "max_output_tokens": 4,
            "reasoning": {"effort": "none"}}
    threads = [threading.Thread(target=lambda: codes.append(post(url, "/v1/responses", data).status_code))
               for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return (status_kb(pid, "VmHWM") - base) / 1024, sorted(set(codes))


def store_memory(models: Path, tok, store_dir: Path) -> None:
    engine = FakeEngine(tok.decode, {"[mem]": Script(tok.encode("ok<|im_end|>"))})
    print("\n| store chain | steps taken | bytes sent, MB | store files, MB | files / sent | 8 continuations: "
          "peak above idle, MB | their statuses |\n|---|---|---|---|---|---|---|")
    for name, steps, step_bytes in (("20 steps of 190 KB", 20, 190_000), ("3.9 MB steps", 8, 3_900_000)):
        path = store_dir / name.replace(" ", "_") / "responses.db"
        with ServerThread(engine.app) as eng, serve_process(
            "--model-dir", str(models / "qwen3"), "--format", "qwen3", "--backend", eng.url,
            "--served-model-name", "bench", "--response-store", str(path), "--log-level", "warning",
        ) as (proc, _port, url):
            last, taken, sent, codes = chain(url, steps, step_bytes)
            files = store_files(path)
            peak, statuses = continuations(url, proc.pid, last, 8) if last else (0.0, [])
            print(f"| {name} | {taken} ({sorted(set(codes))}) | {sent / 1e6:.1f} | {files / 1e6:.1f} | "
                  f"{files / max(sent, 1):.2f}x | {peak:.0f} | {statuses} |", flush=True)


def logprob_stream_memory(models: Path, tok, tokens: int) -> None:
    ids = tok.encode("The weather in Paris is sunny and mild today. " * (tokens // 10 + 1))[:tokens]
    end = tok.encode("<|im_end|>")
    engine = FakeEngine(tok.decode, {"[lp]": Script([*ids, *end], batch=64)})
    print(f"\n| streamed answer, {tokens} tokens, 3 alternatives | peak above idle, MB | closing events, MB | "
          "the closing event (the last), MB | peak / the closing event |\n|---|---|---|---|---|")
    with ServerThread(engine.app) as eng, serve_process(
        "--model-dir", str(models / "qwen3"), "--format", "qwen3", "--backend", eng.url,
        "--served-model-name", "bench", "--response-store", ":memory:", "--log-level", "warning",
    ) as (proc, _port, url):
        cases = {
            "responses": ("/v1/responses", {"input": "[lp] go", "include": ["message.output_text.logprobs"],
                                             "top_logprobs": 3, "reasoning": {"effort": "none"}, "store": False},
                          b"event: response.output_text.done"),
            "chat completions": ("/v1/chat/completions", {"messages": [{"role": "user", "content": "[lp] go"}],
                                                          "logprobs": True, "top_logprobs": 3,
                                                          "chat_template_kwargs": {"enable_thinking": False}},
                                 b'"finish_reason":"stop"'),
        }
        for name, (path, data, marker) in cases.items():
            time.sleep(0.5)
            base = status_kb(proc.pid, "VmRSS")
            reset_peak(proc.pid)
            got = bytearray()
            with httpx.stream("POST", url + path, json={"model": "bench", "stream": True, **data}, timeout=600) as r:
                for chunk in r.iter_raw():
                    got += chunk
            peak = (status_kb(proc.pid, "VmHWM") - base) / 1024
            at = got.rfind(marker)
            closing = (len(got) - got.rfind(b"\n\n", 0, at) if at >= 0 else 0) / 1e6
            last = (len(got) - got.rfind(b"\n\n", 0, len(got) - 2)) / 1e6  # the final event
            ratio = f"{peak / last:.1f}x" if last > 0.01 else "-"
            print(f"| {name} | {peak:.0f} | {closing:.1f} | {last:.1f} | {ratio} |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1,3", help="request sizes in MB")
    ap.add_argument("--concurrency", default="1,3")
    ap.add_argument("--context", type=int, default=4_000_000, help="--max-model-len (large: no early refusal)")
    ap.add_argument("--stream-tokens", type=int, default=130_000, help="tokens per stream with logprobs")
    ap.add_argument("--only", default="parser,store,logprobs,requests",
                    help="which parts to run: parser, store, logprobs, requests")
    args = ap.parse_args()
    only = set(args.only.split(","))
    models = models_dir()
    tok = chatsieve.load_tokenizer(models / "qwen3")
    if "parser" in only:
        stream_memory(tok, args.stream_tokens)
    if "store" in only:
        with tempfile.TemporaryDirectory() as tmp:
            store_memory(models, tok, Path(tmp))
    if "logprobs" in only:
        logprob_stream_memory(models, tok, 100_000)
    if "requests" not in only:
        return
    engine = FakeEngine(tok.decode, {"[mem]": Script(tok.encode("ok<|im_end|>"))})
    with ServerThread(engine.app) as eng, serve_process(
        "--model-dir", str(models / "qwen3"), "--format", "qwen3", "--backend", eng.url,
        "--served-model-name", "bench", "--max-model-len", str(args.context),
        "--max-request-bytes", str(16 << 20), "--log-level", "warning", "--response-store", ":memory:",
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
