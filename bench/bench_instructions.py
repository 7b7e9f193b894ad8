"""Instructions per agent request, counted by valgrind: a yardstick that does not drift.

Timings on this shared virtual machine drift by up to 2x from one minute to the next
(docs/benchmarks.md), so a change of a few percent in a request's cost is lost in them. The
number of instructions a request takes does not drift: two runs of the same code agree within
0.1% per request. This runs bench_request.py (an agent's request through the server's own pieces, no
sockets) under `valgrind --tool=callgrind` with two request counts, for this checkout and for
`--other`, and prints (instructions of the longer run - the shorter) / (the difference in
requests): start-up, imports and the warm-up cancel out, and bench_request's own work (making the
bodies, checking the answers) is the same on both sides.

Instructions are not time: work that misses the caches (the cyclic collector walking the objects
of the requests in flight) costs more time per instruction than the rest, so read the change
beside bench_request's CPU times, and the bursts beside both. Each run takes about a minute.

    CHATSIEVE_MODELS=../shared/models python bench/bench_instructions.py [--other CHECKOUT]
        [--requests 64,320] [--at-once 64] [--size 2000]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ab import _RUNNER, ROOT  # noqa: E402

REQUEST = Path(__file__).resolve().parent / "bench_request.py"


def instructions(root: Path, requests: int, args: argparse.Namespace) -> int:
    """Instructions valgrind counted for one bench_request run with chatsieve from `root`."""
    cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, "-c", _RUNNER,
           str(root), str(REQUEST), "--requests", str(requests), "--at-once", str(args.at_once), "--size",
           str(args.size)]
    # the same hash seed on every run (dicts and sets probe alike), and no tokenizer thread pool
    env = {**os.environ, "PYTHONHASHSEED": "0", "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run(cmd, env=env, cwd="/", capture_output=True, text=True)
    found = re.search(r"Collected : (\d+)", done.stderr)
    if done.returncode != 0 or found is None:
        sys.exit(f"bench_instructions: the run under valgrind failed:\n{done.stdout}\n{done.stderr[-3000:]}")
    return int(found.group(1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--other", default=None, help="another checkout to count too (its root holds chatsieve/)")
    ap.add_argument("--requests", default="64,320", help="the two request counts (64,320)")
    ap.add_argument("--at-once", type=int, default=64, help="requests in flight together (64)")
    ap.add_argument("--size", type=int, default=2000, help="system prompt tokens (2000)")
    args = ap.parse_args()
    if shutil.which("valgrind") is None:
        sys.exit("bench_instructions: needs valgrind (apt-get install valgrind)")
    short, long = (int(n) for n in args.requests.split(","))
    if long <= short:
        sys.exit("bench_instructions: --requests needs a shorter count, then a longer one")
    roots = [("this checkout", ROOT)]
    if args.other is not None:
        other = Path(args.other).resolve()
        if not (other / "chatsieve" / "__init__.py").is_file():
            sys.exit(f"bench_instructions: {other} holds no chatsieve/ package")
        roots.insert(0, ("other: " + str(other), other))
    per: dict[str, float] = {}
    for label, root in roots:
        counts = [instructions(root, n, args) for n in (short, long)]
        per[label] = (counts[1] - counts[0]) / (long - short)
        print(f"{label}: {per[label]:,.0f} instructions per request ({counts[0]:,} for {short} requests, "
              f"{counts[1]:,} for {long}; system prompt {args.size} tokens, {args.at_once} at a time)", flush=True)
    if len(per) == 2:
        before, after = per.values()
        print(f"change: {after - before:+,.0f} instructions per request ({(after - before) / before:+.2%})")


if __name__ == "__main__":
    main()
