"""How long `/health` waits while `chatsieve serve` takes in worst-case request bodies (issue 33,
item 3): 4 MB bodies of many small parts (items, messages, blocks), whose decoding and parsing
is the work, several at once, while other processes keep both cores busy.

A stand-in engine (a process of its own) and `chatsieve serve` (its own process, Qwen3's tokenizer and
template, its default context, so such prompts are refused as too long once rendered); this
process posts N bodies to one route at once and asks for /health every 20 ms meanwhile. Prints,
per route, the slowest /health answer and the bodies' statuses.

    CHATSIEVE_MODELS=../shared/models python bench/bench_health.py [--concurrency 5] [--busy 2]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
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

SIZE = 3_900_000


def _spin(stop) -> None:  # a busy core
    while not stop.is_set():
        sum(range(10_000))


def _engine(models: Path, urls, stop) -> None:
    """The stand-in engine, in a process of its own: /health asks it whether it is up (at most
    once a second), and it should answer as a real engine would, not wait for this process's
    uploads."""
    tok = chatsieve.load_tokenizer(models / "qwen3")
    with ServerThread(FakeEngine(tok.decode, {"[mem]": Script(tok.encode("ok<|im_end|>"))}).app) as eng:
        urls.put(eng.url)
        stop.wait()


def body(route: str) -> tuple[str, bytes]:
    """The route's path and a body of about SIZE bytes made of as many small parts as fit."""
    if route == "responses":
        unit = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "[mem] hi"}]}
        n = SIZE // len(json.dumps(unit))
        return "/v1/responses", json.dumps({"model": "bench", "input": [unit] * n, "max_output_tokens": 4,
                                            "reasoning": {"effort": "none"}}).encode()
    if route == "chat":
        unit = {"role": "user", "content": [{"type": "text", "text": "[mem] hi"}]}
        n = SIZE // len(json.dumps(unit))
        return "/v1/chat/completions", json.dumps({"model": "bench", "messages": [unit] * n, "max_tokens": 4,
                                                   "chat_template_kwargs": {"enable_thinking": False}}).encode()
    unit = {"type": "text", "text": "[mem] hi"}
    n = SIZE // len(json.dumps(unit))
    path = "/v1/messages/count_tokens" if route == "count_tokens" else "/v1/messages"
    return path, json.dumps({"model": "bench", "max_tokens": 4,
                             "messages": [{"role": "user", "content": [unit] * n}]}).encode()


def burst(url: str, route: str, n: int) -> tuple[float, list[int], float]:
    """(slowest /health in seconds, the bodies' statuses, the burst's duration)."""
    path, data = body(route)
    codes: list[int] = []
    done = threading.Event()

    def send() -> None:
        r = httpx.post(url + path, content=data, headers={"content-type": "application/json"}, timeout=600)
        codes.append(r.status_code)

    threads = [threading.Thread(target=send) for _ in range(n)]
    started = time.monotonic()
    for t in threads:
        t.start()
    slowest = 0.0

    def watch() -> None:
        nonlocal slowest
        with httpx.Client(timeout=60) as c:
            while not done.is_set():
                t0 = time.monotonic()
                c.get(url + "/health")
                slowest = max(slowest, time.monotonic() - t0)
                time.sleep(0.02)

    watcher = threading.Thread(target=watch)
    watcher.start()
    for t in threads:
        t.join()
    took = time.monotonic() - started
    done.set()
    watcher.join()
    return slowest, sorted(codes), took


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--concurrency", type=int, default=5)
    ap.add_argument("--busy", type=int, default=2, help="processes spinning meanwhile (busy cores)")
    ap.add_argument("--routes", default="responses,chat,messages,count_tokens")
    args = ap.parse_args()
    models = models_dir()
    stop, engine_stop, urls = multiprocessing.Event(), multiprocessing.Event(), multiprocessing.Queue()
    engine = multiprocessing.Process(target=_engine, args=(models, urls, engine_stop))
    engine.start()
    spinners = [multiprocessing.Process(target=_spin, args=(stop,)) for _ in range(args.busy)]
    with serve_process(
        "--model-dir", str(models / "qwen3"), "--format", "qwen3", "--backend", urls.get(timeout=120),
        "--served-model-name", "bench", "--response-store", ":memory:", "--log-level", "warning",
    ) as (_proc, _port, url):
        for p in spinners:
            p.start()
        try:
            print("| route | bodies at once | MB each | statuses | slowest /health, s | burst, s |")
            print("|---|---|---|---|---|---|")
            for route in args.routes.split(","):
                slowest, codes, took = burst(url, route, args.concurrency)
                size = len(body(route)[1]) / 1e6
                print(f"| {route} | {args.concurrency} | {size:.1f} | {sorted(set(codes))} | {slowest:.2f} | "
                      f"{took:.1f} |", flush=True)
        finally:
            stop.set()
            for p in spinners:
                p.join()
    engine_stop.set()
    engine.join()


if __name__ == "__main__":
    main()
