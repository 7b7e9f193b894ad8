"""chatsieve against peers' streaming parsers, one token per delta.

The peers, each run when it is importable (nothing of theirs is in this repo):
SGLang's function-call detectors (Qwen2.5/Qwen3 Hermes-style and Gemma 4), fed the
text of one token at a time, against chatsieve's text mode, on the same generated output
(some content, then one call whose string argument fills the rest); and
openai-harmony's `StreamableParser` (Rust; gpt-oss), fed one token id at a time and asked
for each delta and its channel as vLLM does, against chatsieve in text and token mode,
on bench_stream's gpt-oss output (analysis, a commentary preamble, a call). Prints CPU
µs per token and the t(32k)/t(8k) ratio (linear ≈ 4, quadratic ≈ 16).

    pip install --target /tmp/sgl --no-deps sglang        # plus what its imports ask for
    pip install openai-harmony                            # or vLLM's oss-harmony fork
    PYTHONPATH=/tmp/sgl python bench/bench_peers.py [--formats gpt_oss]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_stream import PROSE, make_output, models_dir  # noqa: E402

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


def run_chatsieve_ids(fmt: str, tok, ids: list[int]) -> int:
    p = StreamParser(fmt, tools=[TOOL], tokenizer=tok)
    for i in ids:
        p.feed(token_ids=[i])
    p.finish()
    return len(p.message.tool_calls)


def harmony_runner():
    """openai-harmony's streaming parser as vLLM drives it: one id, then the delta and
    its channel; the calls are the messages addressed to `functions.*`."""
    from openai_harmony import HarmonyEncodingName, Role, StreamableParser, load_harmony_encoding

    encoding = load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)

    def run(ids: list[int]) -> int:
        p = StreamableParser(encoding, role=Role.ASSISTANT)
        reasoning, content = [], []
        for i in ids:
            p.process(i)
            delta = p.last_content_delta
            if delta:
                (reasoning if p.current_channel == "analysis" else content).append(delta)
        p.process_eos()
        return sum(1 for m in p.messages if (m.recipient or "").startswith("functions."))

    return run


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
        t0 = time.process_time()
        fn(arg)
        best = min(best, time.process_time() - t0)
    return best


def run_rows(fmt: str, runners: list[tuple[str, object]], inputs: dict) -> None:
    """Time each (name, (fn, input kind)) on each size; inputs[kind][n] is its input."""
    for name, (fn, kind) in runners:
        times = {}
        for n in SIZES:
            arg = inputs[kind][n]
            assert fn(arg) == 1, f"{name} found no call (or several) in the {fmt} output"
            slow = name == "sglang" and n == SIZES[-1]
            times[n] = best_of(fn, arg, repeat=1 if slow else 3)
            print(f"{fmt:7} {name:17} {n:7d} {times[n] * 1e6 / n:9.2f}", flush=True)
        print(f"{fmt:7} {name:17} {'32k/8k':>7} {times[SIZES[-1]] / times[SIZES[-2]]:9.2f}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--formats", default="qwen3,gemma4,gpt_oss", help="comma-separated: qwen3, gemma4, gpt_oss")
    fmts = ap.parse_args().formats.split(",")
    base = models_dir()
    print(f"{'format':7} {'parser':17} {'tokens':>7} {'µs/token':>9}")
    for fmt in fmts:
        if fmt == "gpt_oss":
            try:
                peer = harmony_runner()
            except ImportError as e:
                print(f"# gpt_oss: openai-harmony is not importable ({e}); see the docstring", flush=True)
                continue
            tok = load_tokenizer(base / "gpt-oss")
            ids = {n: make_output("gpt_oss", tok, n) for n in SIZES}
            inputs = {"ids": ids, "text": {n: [tok.decode([i]) for i in v] for n, v in ids.items()}}
            runners = [
                ("chatsieve text", (lambda p: run_chatsieve("gpt_oss", p), "text")),
                ("chatsieve ids", (lambda i, tok=tok: run_chatsieve_ids("gpt_oss", tok, i), "ids")),
                ("openai-harmony", (peer, "ids")),
            ]
            run_rows(fmt, runners, inputs)
            continue
        tok = (
            load_tokenizer(base / "qwen3")
            if fmt == "qwen3"
            else derive_gemma4_tokenizer(base / "gemma3", base / "gemma4/special_tokens.json")
        )
        runners = [("chatsieve", (lambda p, fmt=fmt: run_chatsieve(fmt, p), "text"))]
        try:
            runners.append(("sglang", (sglang_runner(fmt), "text")))
        except ImportError as e:
            print(f"# {fmt}: SGLang is not importable ({e}); see the docstring", flush=True)
        run_rows(fmt, runners, {"text": {n: output(fmt, tok, n) for n in SIZES}})


if __name__ == "__main__":
    main()
