"""Stop-string matching cost against the number of stop strings (not run as a test).

Streams a 20,000-character answer three characters per piece through StopChecker with 4, 100
and 10,000 stop strings (none matching) and prints microseconds per character: with one
automaton the cost stays flat as the count grows.
"""

from __future__ import annotations

import random
import time

from chatsieve.detok import StopChecker
from chatsieve.events import Piece


def main() -> None:
    rng = random.Random(0)
    words = ["the", "weather", "in", "Paris", "is", "sunny", "and", "mild", "today", "STO", "END"]
    text = " ".join(rng.choice(words) for _ in range(4000))[:20_000]
    pieces = [Piece(text[k : k + 3]) for k in range(0, len(text), 3)]
    for count in (4, 100, 10_000):
        stops = [f"STOP{i}" for i in range(count)]
        t = time.perf_counter()
        sc = StopChecker(stop=stops)
        for p in pieces:
            sc.feed([p])
        sc.finish()
        dt = time.perf_counter() - t
        print(f"{count:>6} stop strings: {dt * 1e6 / len(text):7.2f} us/char (incl. building the automaton)")


if __name__ == "__main__":
    main()
