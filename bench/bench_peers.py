"""chatsieve against a peer's streaming tool-call parser, one token per delta.

The peer is SGLang's function-call detectors (Qwen2.5/Qwen3 Hermes-style and Gemma 4),
imported from an SGLang installation you provide; nothing of theirs is in this repo.
Both parse the same generated output — some content, then one call whose string
argument fills the rest — fed one token's text at a time. Prints µs per token and
the t(32k)/t(8k) ratio (linear ≈ 4, quadratic ≈ 16).

    pip install --target /tmp/sgl --no-deps sglang        # plus what its imports ask for
    PYTHONPATH=/tmp/sgl python bench/bench_peers.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_stream import PROSE, models_dir  # noqa: E402

from chatsieve import StreamParser  # noqa: E402
from chatsieve.tokenizer import derive_gemma4_tokenizer, load_tokenizer  # noqa: E402

SIZES = (2_000, 8_000, 32_000)
CALLS = {
    "qwen3": ('<tool_call>\n{"name": "write_file", "arguments": {"path": "/tmp/n.txt", "content": "', '"}}\n</tool_call>'),
    "gemma4": ('<|tool_call>call:write_file{path:<|"|>/tmp/n.txt<|"|>,content:<|"|>', '<|"|>}<tool_call|>'),
}
TOOL = {
    "type": "function",
    "function": {
        "name": "write_file",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}}},
    },
}


def output(fmt: str, tok, n: int) -> list[str]:
    head, tail = (tok.encode(s) for s in CALLS[fmt])
    fill: list[int] = []
    while len(fill) < n:
        fill += tok.encode(PROSE)
    content = fill[: n // 4]
    ids = content + head + fill[: n - len(content) - len(head) - len(tail)] + tail
    return [tok.decode([i]) for i in ids]


def run_chatsieve(fmt: str, pieces: list[str]) -> int:
    p = StreamParser(fmt, tools=[TOOL], thinking=False)
    for s in pieces:
        p.feed(s)
    p.finish()
    return len(p.message.tool_calls)


def sglang_runner(fmt: str):
    from sglang.srt.entrypoints.openai.protocol import Tool
    from sglang.srt.function_call.gemma4_detector import Gemma4Detector
    from sglang.srt.function_call.qwen25_detector import Qwen25Detector

    detector_class = {"qwen3": Qwen25Detector, "gemma4": Gemma4Detector}[fmt]
    tools = [Tool.model_validate(TOOL)]

    def run(pieces: list[str]) -> int:
        d = detector_class()
        names = set()
        for s in pieces:
            for call in d.parse_streaming_increment(s, tools).calls:
                if call.name:
                    names.add(call.name)
        return len(names)

    return run


def best_of(fn, arg, repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn(arg)
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    base = models_dir()
    toks = {
        "qwen3": load_tokenizer(base / "qwen3"),
        "gemma4": derive_gemma4_tokenizer(base / "gemma3", base / "gemma4/special_tokens.json"),
    }
    try:
        peers = {fmt: sglang_runner(fmt) for fmt in toks}
    except ImportError as e:
        sys.exit(f"bench_peers: SGLang is not importable ({e}); see the docstring")
    print(f"{'format':7} {'parser':10} {'tokens':>7} {'µs/token':>9}")
    for fmt, tok in toks.items():
        for name, fn in (("chatsieve", lambda p, fmt=fmt: run_chatsieve(fmt, p)), ("sglang", peers[fmt])):
            times = {}
            for n in SIZES:
                pieces = output(fmt, tok, n)
                assert fn(pieces) == 1, f"{name} found no call in the {fmt} output"
                times[n] = best_of(fn, pieces, repeat=1 if name == "sglang" and n == SIZES[-1] else 3)
                print(f"{fmt:7} {name:10} {n:7d} {times[n] * 1e6 / n:9.2f}", flush=True)
            print(f"{fmt:7} {name:10} {'32k/8k':>7} {times[SIZES[-1]] / times[SIZES[-2]]:9.2f}", flush=True)


if __name__ == "__main__":
    main()
