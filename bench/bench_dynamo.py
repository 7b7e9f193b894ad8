"""CPU per streamed token inside NVIDIA Dynamo's frontend: chatsieve's chat engine factory against
Dynamo's own Rust preprocessor and parsers, on the same replayed stream, in one run.

    python bench/bench_dynamo.py [--tokens 2000] [--requests 4]

One process (tests/dynamo_app.py, inside `unshare -n`) holds the fixture worker and both frontends;
the worker replays the same real-Qwen3-tokenizer ids (reasoning, content, one tool call) one token
per item to each. The figure is that process's CPU time (user + system, from /proc) over the
streamed requests, per output token; the worker's share is the same for both frontends, so the
difference is the processors'. Needs root (for the network namespace) and
requirements/dynamo-test.txt.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests import dynamo_harness as harness  # noqa: E402


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _stream(port: int, model: str, key: str) -> int:
    body = {"model": model, "stream": True, "messages": [{"role": "user", "content": "hi"}],
            "tools": [{"type": "function", "function": {"name": "write_file", "parameters": {"type": "object"}}}],
            "nvext": {"annotations": [f"replay:{key}"]}}  # fmt: skip
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})  # fmt: skip
    events = 0
    with urllib.request.urlopen(req, timeout=120) as r:
        for line in r:
            events += line.startswith(b"data: ")
    return events


def inside(config_path: str, requests: int) -> None:
    """Runs in the namespace: start the deployment, measure, print JSON."""
    config = json.loads(Path(config_path).read_text())
    log = open(Path(config_path).with_suffix(".log"), "w")
    app = subprocess.Popen([sys.executable, str(harness.HERE / "dynamo_app.py"), config_path], stdout=log,
                           stderr=subprocess.STDOUT)  # fmt: skip
    try:
        deadline = time.monotonic() + 90
        for port, model in ((config["chatsieve_port"], "qwen3"), (config["native_port"], "qwen3-native")):
            while True:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2) as r:
                        if model in {m["id"] for m in json.load(r)["data"]}:
                            break
                except OSError:
                    pass
                if time.monotonic() > deadline or app.poll() is not None:
                    raise SystemExit("the deployment did not come up; see " + log.name)
                time.sleep(0.2)
        tokens = len(config["replays"]["bench"]["ids"])
        out = {"tokens_per_request": tokens, "requests": requests}
        for name, port, model in (("chatsieve", config["chatsieve_port"], "qwen3"),
                                  ("dynamo", config["native_port"], "qwen3-native")):  # fmt: skip
            _stream(port, model, "bench")  # warm-up (tokenizer, template, isolation caches)
            before, t0 = _cpu_seconds(app.pid), time.perf_counter()
            events = sum(_stream(port, model, "bench") for _ in range(requests))
            cpu, wall = _cpu_seconds(app.pid) - before, time.perf_counter() - t0
            out[name] = {"cpu_us_per_token": round(cpu / (tokens * requests) * 1e6, 1),
                         "wall_s": round(wall, 2), "sse_events": events}  # fmt: skip
        print(json.dumps(out))
    finally:
        app.terminate()
        app.wait(10)
        log.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=2000, help="output tokens per request (approximate)")
    ap.add_argument("--requests", type=int, default=4, help="streamed requests per frontend")
    ap.add_argument("--inside", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.inside:
        return inside(args.inside, args.requests)
    from chatsieve.tokenizer import load_tokenizer

    with tempfile.TemporaryDirectory() as tmp:
        directory = harness.model_dir(Path(tmp), "qwen3")
        tok = load_tokenizer(directory)
        words = max(args.tokens // 4, 10)
        text = ("<think>\n" + "Plan the file carefully. " * (words // 8) + "\n</think>\n\n"
                + "Here is the summary of the report, line by line. " * (words // 5)
                + '\n<tool_call>\n{"name": "write_file", "arguments": {"path": "a.txt", "content": "'
                + "abc def " * (words // 4) + '"}}\n</tool_call><|im_end|>')  # fmt: skip
        ports = harness.free_ports(2)
        config = {
            "models": [{"name": "qwen3", "path": str(directory)},
                       {"name": "qwen3-native", "path": str(directory), "tool_call_parser": "hermes",
                        "reasoning_parser": "qwen3"}],  # fmt: skip
            "replays": {"bench": {"ids": tok.encode(text), "finish": "stop"}},
            "chatsieve_port": ports[0],
            "native_port": ports[1],
            "log": str(Path(tmp) / "worker.jsonl"),
        }
        path = Path(tmp) / "bench.json"
        path.write_text(json.dumps(config))
        argv = harness.netns_command([sys.executable, __file__, "--inside", str(path), "--requests", str(args.requests)])
        env = {**harness.subprocess_env(), "DYN_LOG": "error"}
        r = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=REPO, timeout=600)
        if r.returncode != 0:
            sys.exit(f"bench failed:\n{r.stderr[-3000:]}")
        result = json.loads(r.stdout.strip().splitlines()[-1])
    n = result["tokens_per_request"]
    print(f"Dynamo 1.6 frontend, {result['requests']} streamed requests x {n} tokens, one token per engine item")
    for name in ("chatsieve", "dynamo"):
        row = result[name]
        print(f"  {name:9s}  {row['cpu_us_per_token']:7.1f} us CPU/token  ({row['wall_s']} s wall, "
              f"{row['sse_events']} SSE events)")  # fmt: skip
    print("  (the process also runs the fixture worker: the same cost in both rows)")


if __name__ == "__main__":
    main()
