"""Run a benchmark alternately against two checkouts of chatsieve, in the same minutes.

Timings on a shared virtual machine drift by up to 2x from one minute to the next, so a
before/after comparison made at different times says little. This runs SCRIPT (a bench
under bench/, from this checkout) ROUNDS times with `chatsieve` imported from OTHER, then
from this checkout, interleaved, and prints each run's output under its label.

    git worktree add /tmp/before <commit>
    python bench/ab.py --rounds 2 /tmp/before bench/bench_stream.py [script arguments]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Imports chatsieve from the first argument's checkout (even over an editable install of
# another), then runs the script with the remaining arguments.
_RUNNER = """
import runpy, sys
root = sys.argv[1]
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
sys.path.insert(0, root)
import chatsieve
assert chatsieve.__file__.startswith(root), f"chatsieve came from {chatsieve.__file__}, not {root}"
sys.argv = sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("other", help="the other checkout (its root holds chatsieve/)")
    ap.add_argument("script", help="the benchmark script to run, e.g. bench/bench_stream.py")
    ap.add_argument("--rounds", type=int, default=2, help="alternations (2); before OTHER")
    ap.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the script")
    a = ap.parse_args()
    other = Path(a.other).resolve()
    if not (other / "chatsieve" / "__init__.py").is_file():
        sys.exit(f"ab: {other} holds no chatsieve/ package")
    script = str(Path(a.script).resolve())
    for r in range(1, a.rounds + 1):
        for label, root in (("other: " + str(other), other), ("this checkout", ROOT)):
            print(f"## round {r}, {label}", flush=True)
            cmd = [sys.executable, "-c", _RUNNER, str(root), script, *a.args]
            subprocess.run(cmd, check=True, cwd="/")


if __name__ == "__main__":
    main()
