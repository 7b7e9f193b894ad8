"""Time to first token under a burst of agent requests, against the same client straight to the engine.

A team's coding agents send requests that share a system prompt and their tools and differ in the
user turn. Here N such requests (a system prompt of about S tokens, 20 tools, one user message
each, every one different; one API key for all of them, as one team's agents share one) are sent
at once, on connections opened beforehand, to `chatsieve serve` in front of a stand-in vLLM engine
(bench_server's, its own process: one token per stream every `--step-ms`), and the same client
sends N requests at once straight to the engine. Printed per prompt size, burst size and
`--workers`: time to first token (send to the first event that carries output) p50 / p99 for both,
the difference (what chatsieve adds), and the server's CPU per request (every thread, answers
included). The floor: the same burst (bodies as long as the agents', nothing in them read) through
bench_server's bare relay, one uvloop process that copies bytes between client and engine; what it
adds over direct is what any process in chatsieve's place pays on this machine (`--no-floor`
skips it). Each server also answers one request right after start-up and then single warm ones:
their TTFT ratio is the start-up penalty. Every answer is checked against batch parsing.

    CHATSIEVE_MODELS=../shared/models python bench/bench_burst.py [--sizes 500,2000,8000] [--bursts 1,32,128]
        [--workers 1,2] [--rounds 2] [--profile-gil FILE] [--timeline]

The server runs the chatsieve this process imported (`bench/ab.py OTHER bench/bench_burst.py`
compares two checkouts). `--profile-gil FILE` records the one-worker server's bursts with py-spy
(`--gil`: only samples holding the interpreter, so shares are of interpreter time) and prints
where they went. `--timeline` splits each burst's time to first token into its phases, from stamps
the server makes (bench/timeline/sitecustomize.py) and the client's own. Figures are noisy on a shared machine: compare rows of one run, and note `uptime`.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_prompt import agent_tools, system_prompt  # noqa: E402
from bench_server import (  # noqa: E402
    _PROFILED,
    ROOT,
    ClientConnection,
    Response,
    free_port,
    loop_policy,
    pct,
    read_chat,
    read_engine,
    stop,
    tree_cpu,
    wait_up,
)
from bench_stream import TOOLS, make_output, models_dir  # noqa: E402

MODEL = "bench"
KEY = "sk-bench-burst-team-key-0123456789"


def sockets_by_process(pid: int) -> dict[int, int]:
    """Open sockets of `pid`'s worker processes (itself when it has none), by process id."""
    pids = [int(p) for p in os.listdir("/proc") if p.isdigit() and _parent(int(p)) == pid] or [pid]
    out = {}
    for p in pids:
        try:
            out[p] = sum(1 for fd in os.listdir(f"/proc/{p}/fd") if os.readlink(f"/proc/{p}/fd/{fd}").startswith("socket:"))
        except OSError:
            pass
    return out


def _parent(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


async def burst(port: int, path: str, bodies: list[bytes], key: str | None, server_pid: int | None = None,
                spread: list | None = None) -> list[Response]:
    """Every body sent at once, each on its own connection opened beforehand; the responses. With
    `server_pid`, how the connections were spread over its workers is appended to `spread`."""
    loop = asyncio.get_running_loop()
    auth = f"authorization: Bearer {key}\r\n" if key else ""
    before = sockets_by_process(server_pid) if server_pid else None
    conns = [(await loop.create_connection(ClientConnection, "127.0.0.1", port))[1] for _ in bodies]
    heads = [
        (f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\ncontent-type: application/json\r\n{auth}"
         f"accept: text/event-stream\r\ncontent-length: {len(b)}\r\n\r\n").encode()
        for b in bodies
    ]
    await asyncio.sleep(0.05)  # the server has taken every connection
    if server_pid and spread is not None:
        after = sockets_by_process(server_pid)
        spread.append(sorted((after[p] - before.get(p, 0) for p in after if after[p] != before.get(p, 0)),
                             reverse=True))
    try:
        return list(await asyncio.gather(*(c.request(h, b) for c, h, b in zip(conns, heads, bodies, strict=True))))
    finally:
        for c in conns:
            c.transport.close()


def ttfts(responses: list[Response], read) -> list[float]:
    out = []
    for r in responses:
        times = read(r)
        out.append((times[0] - r.sent) * 1e3)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="500,2000,8000", help="system prompt sizes in tokens, comma-separated")
    ap.add_argument("--bursts", default="1,32,128", help="requests sent at once, comma-separated")
    ap.add_argument("--workers", default="1,2", help="chatsieve serve --workers values, comma-separated")
    ap.add_argument("--rounds", type=int, default=2, help="bursts of each size per server (2): direct, then served")
    ap.add_argument("--tokens", type=int, default=100, help="tokens per answer (100)")
    ap.add_argument("--step-ms", type=float, default=10.0, help="the engine's decode step (10 ms)")
    ap.add_argument("--keys", type=int, default=1, help="API keys the burst's requests are spread over (1)")
    ap.add_argument("--serve-arg", action="append", default=[], help="extra argument for chatsieve serve")
    ap.add_argument("--no-floor", action="store_true",
                    help="skip the bare relay's bursts (bench_server's: one uvloop process copying bytes between "
                    "client and engine, nothing parsed)")
    ap.add_argument("--profile", metavar="FILE", default=None,
                    help="run the one-worker server's event loop thread under cProfile (thread CPU time) and "
                    "write its stats to FILE.SIZE")
    ap.add_argument("--profile-gil", metavar="FILE", default=None,
                    help="record the one-worker server with py-spy --gil during the bursts; raw stacks to FILE")
    ap.add_argument("--timeline", action="store_true",
                    help="stamp each request's phases in the server (bench/timeline/sitecustomize.py) and print, "
                    "per burst, where the time to first token went")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    bursts = [int(s) for s in args.bursts.split(",")]
    workers = [int(w) for w in args.workers.split(",")]

    from chatsieve import load_tokenizer, parse

    models = models_dir()
    tok = load_tokenizer(models / "qwen3")
    ids = make_output("qwen3", tok, args.tokens)
    expected = parse(token_ids=ids, format="qwen3", tokenizer=tok, tools=TOOLS, thinking=True)
    assert len(expected.tool_calls) == 1 and expected.reasoning and expected.content, expected.diagnostics
    want_calls = [{"name": c.name, "arguments": c.arguments} for c in expected.tool_calls]
    ids_file = Path(f"/tmp/chatsieve-burst-{os.getpid()}.json")
    ids_file.write_text(json.dumps(ids))
    tools = [*agent_tools(19), *TOOLS]  # the answer calls write_file, so it is offered
    keys = [f"{KEY}-{k}" for k in range(args.keys)]

    def check_served(r: Response) -> list[float]:
        msg, times = read_chat(r)
        assert msg["done"], "the stream did not end"
        assert msg["reasoning"] == expected.reasoning, "reasoning differs from batch parsing"
        assert msg["content"] == expected.content, "content differs from batch parsing"
        assert [msg["calls"][k] for k in sorted(msg["calls"])] == want_calls, "calls differ from batch parsing"
        assert msg["finish"] == "tool_calls", msg["finish"]
        return times

    # The first engine event after which chatsieve has output to send (the reasoning opens with a
    # marker and a newline, which show nothing): the direct client's TTFT is that event's arrival.
    from chatsieve import StreamParser
    from chatsieve.events import ContentDelta, ReasoningDelta, ToolCallArgsDelta

    probe = StreamParser("qwen3", tools=tools, thinking=True, tokenizer=tok, stop_token_ids=sorted(tok.stop_token_ids))
    first_output = next(i for i, t in enumerate(ids) if any(
        type(e) in (ReasoningDelta, ContentDelta, ToolCallArgsDelta) and e.text for e in probe.feed(token_ids=[t])))

    def check_direct(r: Response) -> list[float]:
        got, times = read_engine(r)
        assert got == ids, "the stand-in engine sent the wrong ids"
        return times[first_output:]

    serial = iter(range(10**9))

    def agent_bodies(system: str, n: int) -> list[bytes]:
        return [
            json.dumps({
                "model": MODEL,
                "messages": [
                    {"role": "system", "content": system},
                    {"role": "user", "content": f"Task {k}: fix the failing test in module_{k}.py and explain why."},
                ],
                "tools": tools,
                "stream": True,
                "chat_template_kwargs": {"enable_thinking": True},
            }).encode()
            for k in (next(serial) for _ in range(n))
        ]

    print(f"# {time.strftime('%Y-%m-%d %H:%M:%S')}; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}; "
          f"{os.cpu_count()} cores")
    print(f"# {args.tokens}-token answers, one token per engine event every {args.step_ms:g} ms; "
          f"{len(tools)} tools; {args.keys} API key(s); the direct TTFT is the arrival of engine event "
          f"{first_output + 1}, the first after which chatsieve has output to send")
    loop_policy()
    code = Path(sys.modules["chatsieve"].__file__).resolve().parents[1]
    print(f"# chatsieve from {code}\n", flush=True)
    env = {**os.environ, "PYTHONPATH": str(code), "CHATSIEVE_MODELS": str(models)}
    engine_port = free_port()
    engine = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve().parent / "bench_server.py"), "--engine", str(engine_port),
         str(ids_file), str(args.step_ms)], env=env, cwd=ROOT)
    engine_body = json.dumps({"prompt": [1, 2, 3], "stream": True}).encode()
    relay = relay_port = None
    rows = []
    header = ("| workers | system prompt | burst | direct TTFT p50 / p99 ms | served TTFT p50 / p99 ms "
              "| added p50 / p99 ms | bare relay added p50 / p99 ms | server CPU ms/request | connections per worker |")
    try:
        wait_up(engine_port, engine, "/stats")
        asyncio.run(burst(engine_port, "/v1/completions", [engine_body], None))
        if not args.no_floor:
            relay_port = free_port()
            relay = subprocess.Popen([sys.executable, str(Path(__file__).resolve().parent / "bench_server.py"),
                                      "--relay", str(relay_port), str(engine_port)], env=env, cwd=ROOT)
            wait_up(relay_port, relay, "/stats")
        for w in workers:
            for size in sizes:
                system = system_prompt(tok, size, 0)
                port = free_port()
                profile = f"{args.profile}.{size}" if args.profile and w == 1 else None
                cmd = [sys.executable, *(["-c", _PROFILED, profile] if profile else ["-m", "chatsieve.cli"]), "serve", "--model-dir", str(models / "qwen3"),
                       "--format", "qwen3", "--backend", f"http://127.0.0.1:{engine_port}", "--port", str(port),
                       "--served-model-name", MODEL, "--log-level", "warning", "--response-store", ":memory:"
                       if w == 1 else f"/tmp/chatsieve-burst-{os.getpid()}.sqlite3",
                       *[a for k in keys for a in ("--api-key", k)], *args.serve_arg]
                if w != 1:
                    cmd += ["--workers", str(w)]
                stamps = f"/tmp/chatsieve-burst-timeline-{os.getpid()}-{w}-{size}"
                server_env = {**env, "CHATSIEVE_BENCH_TIMELINE": stamps,
                              "PYTHONPATH": f"{Path(__file__).resolve().parent / 'timeline'}:{code}"} if args.timeline else env
                server = subprocess.Popen(cmd, env=server_env, cwd=code)
                spy = None
                try:
                    wait_up(port, server)
                    # the first request after start-up, then warm single requests (the median of 5)
                    first = ttfts(asyncio.run(burst(port, "/v1/chat/completions", agent_bodies(system, 1), keys[0])),
                                  check_served)[0]
                    warm = sorted(
                        ttfts(asyncio.run(burst(port, "/v1/chat/completions", agent_bodies(system, 1), keys[0])),
                              check_served)[0] for _ in range(5))[2]
                    print(f"workers {w}, system prompt {size}: first request after start-up {first:.1f} ms, "
                          f"warm {warm:.1f} ms ({first / warm:.1f}x)", flush=True)
                    if args.profile_gil and w == 1 and spy is None:
                        spy = subprocess.Popen([shutil.which("py-spy") or "py-spy", "record", "--gil", "--threads",
                                                "-r", "250", "-f", "raw", "-o", f"{args.profile_gil}.{size}",
                                                "--pid", str(server.pid)], stdout=subprocess.DEVNULL)
                        time.sleep(1.0)
                    for n in bursts:
                        for _ in range(args.rounds):
                            direct = ttfts(asyncio.run(burst(engine_port, "/v1/completions", [engine_body] * n,
                                                             None)), check_direct)
                            bodies = agent_bodies(system, n)
                            cpu0 = tree_cpu(server.pid)
                            spread: list = []
                            responses = asyncio.run(_spread(port, bodies, keys, server.pid, spread))
                            cpu = tree_cpu(server.pid) - cpu0
                            served = ttfts(responses, check_served)
                            relayed = None
                            if relay_port is not None:  # as many bytes in as the agents' bodies, copied to the engine
                                pad = len(bodies[0]) - len(engine_body) - len(', "pad": ""')
                                floor_body = json.dumps({"prompt": [1, 2, 3], "stream": True, "pad": "x" * pad}).encode()
                                relayed = ttfts(asyncio.run(burst(relay_port, "/v1/completions", [floor_body] * n,
                                                                  None)), check_direct)
                            if args.timeline:
                                print(f"  where the time to first token went (burst {n}): "
                                      f"{split_timeline(stamps, responses, served)}", flush=True)
                            floor = (pct(relayed, .5) - pct(direct, .5), pct(relayed, .99) - pct(direct, .99)) \
                                if relayed is not None else None
                            row = (w, size, n, pct(direct, .5), pct(direct, .99), pct(served, .5), pct(served, .99),
                                   floor, cpu * 1e3 / n, "/".join(map(str, spread[0])) if spread else "")
                            rows.append(row)
                            if len(rows) == 1:
                                print(header + "\n|---|---|---|---|---|---|---|---|---|")
                            print(_row(row), flush=True)
                finally:
                    if spy is not None:
                        spy.send_signal(2)
                        spy.wait(timeout=60)
                    stop(server, interrupt=bool(profile))
    finally:
        if relay is not None:
            stop(relay)
        stop(engine)
        ids_file.unlink(missing_ok=True)
        for p in Path("/tmp").glob(f"chatsieve-burst-{os.getpid()}.sqlite3*"):
            p.unlink()
    print(f"\n# load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}\n")
    print(header + "\n|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        print(_row(row))
    if args.profile_gil:
        for size in sizes:
            path = Path(f"{args.profile_gil}.{size}")
            if path.is_file():
                print(f"\n# where the one-worker server's interpreter time went, system prompt {size}")
                split(path)


async def _spread(port: int, bodies: list[bytes], keys: list[str], server_pid: int, spread: list) -> list[Response]:
    """The burst, its requests spread over `keys` in turn, all sent at once."""
    groups = [(key, bodies[k::len(keys)]) for k, key in enumerate(keys)]
    got = await asyncio.gather(*(burst(port, "/v1/chat/completions", b, key, server_pid if k == 0 else None, spread)
                                 for k, (key, b) in enumerate(groups) if b))
    out: list[Response] = []
    for part in got:
        out += part
    return out


# The phases `split_timeline` reports, between the stamps of bench/timeline/sitecustomize.py and
# the client's: sent, at the app, prepare entered, preparation began, ended, prepare returned,
# stream began, engine request sent, first output arrived.
TIMELINE = ("to the app (transfer, HTTP, its task to start)", "to its preparation (middleware, body, parse)",
            "waiting for a preparation thread or the loop's turn", "preparation", "back on the loop", "to the stream",
            "to the engine request (its connection, the write)", "to the first output (engine, parse, write)")


def split_timeline(prefix: str, responses: list[Response], served: list[float]) -> str:
    """The mean ms of each TIMELINE phase over the burst's requests, and over its slowest tenth
    (by time to first token): its requests' stamps are read from the server's files (and removed),
    and matched to the responses by their x-request-id."""
    stamps, on_loop, opened = {}, 0, 0
    for path in Path(prefix).parent.glob(Path(prefix).name + ".*"):
        for line in path.read_text().splitlines():
            got = json.loads(line)
            stamps[got["id"]] = got["stamps"]
            on_loop += got["loop"]
            opened += got["new_connection"]
        path.unlink()
    rows = []
    for r, ttft in zip(responses, served, strict=True):
        head = bytes(r.raw[: r.raw.find(b"\r\n\r\n")]).lower().split(b"\r\n")
        rid = next((h.split(b":", 1)[1].strip().decode() for h in head if h.startswith(b"x-request-id:")), None)
        if rid in stamps:
            times = [r.sent, *stamps[rid], r.sent + ttft / 1e3]
            rows.append((ttft, [(b - a) * 1e3 for a, b in zip(times, times[1:])]))
    if len(rows) != len(responses):
        return f"stamps for {len(rows)} of {len(responses)} requests: not shown"
    rows.sort()
    slow = rows[-max(len(rows) // 10, 1):]
    return "; ".join(f"{name} {sum(p[k] for _, p in rows) / len(rows):.1f} / {sum(p[k] for _, p in slow) / len(slow):.1f}"
                     for k, name in enumerate(TIMELINE)) + (f" (ms: mean / mean of the slowest tenth); {on_loop} of "
                                                            f"{len(stamps)} prepared on the event loop, {opened} "
                                                            "engine connections opened for them")


def _row(row) -> str:
    w, size, n, d50, d99, s50, s99, floor, cpu, spread = row
    relay = f"{floor[0]:.1f} / {floor[1]:.1f}" if floor is not None else "—"
    return (f"| {w} | {size} | {n} | {d50:.1f} / {d99:.1f} | {s50:.1f} / {s99:.1f} | {s50 - d50:.1f} / {s99 - d99:.1f} "
            f"| {relay} | {cpu:.2f} | {spread} |")


# Where a sample's time goes: the first rule whose text is in the sample's stack (innermost frame
# first, so the work a request does is named before the framework that called it).
PARTS = (
    ("preparation: isolation scan (collecting caller strings, the delimiter search)",
     ("_strings (chatsieve/prompt/isolation.py", "_mark (chatsieve/prompt/isolation.py", "_mark_string",
      "maybe_marked")),
    ("preparation: copies (deepcopy, plain)", ("deepcopy", "plain (chatsieve/prompt/context.py")),
    ("preparation: prefix cache lookup", ("_longest (chatsieve/prefix_cache.py", "_common_prefix", "_keep (chatsieve")),
    ("preparation: tokenizing", ("encode_batch", "_whole (chatsieve/prefix_cache.py")),
    ("preparation: Jinja", ("render_template (chatsieve/jinja_env.py",)),
    ("preparation: the stream parser", ("__init__ (chatsieve/parser.py",)),
    ("preparation: other", ("_prepare (chatsieve/server/service.py", "render_prompt")),
    ("request intake: JSON, the protocol's parse", ("parse_body (chatsieve/server/intake.py",)),
    ("streaming the answers", ("data_received (chatsieve/server/client.py", "_produce (", "_stream (",
                               "push (chatsieve")),
    ("HTTP, middleware, the framework", ("uvicorn", "starlette", "h11", "security.py", "metrics.py")),
    ("event loop, threads", ("asyncio", "uvloop", "threading.py", "anyio", "concurrent")),
)


def split(path: Path) -> None:
    """Shares of py-spy's raw (collapsed) samples by PARTS."""
    counts: collections.Counter[str] = collections.Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not n.isdigit():
            continue
        frames = stack.split(";")[::-1]
        total += int(n)
        for name, needles in PARTS:
            if any(needle in f for f in frames for needle in needles):
                counts[name] += int(n)
                break
        else:
            counts["other"] += int(n)
    for name, n in counts.most_common():
        print(f"  {100 * n / max(total, 1):5.1f}%  {name}")
    print(f"  ({total} samples)")


if __name__ == "__main__":
    main()
