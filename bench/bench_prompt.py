"""Time to first token added by building the prompt: what `chatsieve serve` does for a request
before it sends the engine anything (render the chat template, tokenize, isolate delimiters, make
the stream parser), for an agent's request: a system prompt of 500 / 2k / 8k tokens, 20 tools, a
user message. CPU milliseconds per request (best of several), for:

  cold        a system prompt and tools never seen before (each request its own)
  agent       the same system prompt and tools as the requests before it, a new user message
  next turn   the previous request's conversation, with the answer and a new message appended
  delimiter   as agent, with a delimiter (`<tool_call>`, `<|start|>`) in the user message

    python bench/bench_prompt.py [--formats qwen3,gpt_oss]   # needs ../shared/models
    python bench/ab.py OTHER_CHECKOUT bench/bench_prompt.py  # against other code, interleaved
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_stream import PROSE, models_dir  # noqa: E402

from chatsieve import StreamParser, load_tokenizer, render_prompt  # noqa: E402

SIZES = (500, 2_000, 8_000)
REPEAT = 5
# format -> (tokenizer directory, a delimiter of the format)
FORMATS = {"qwen3": ("qwen3", "<tool_call>"), "gpt_oss": ("gpt-oss", "<|start|>")}


def agent_tools(n: int) -> list[dict]:
    return [
        {
            "type": "function",
            "function": {
                "name": f"tool_{i}",
                "description": f"Tool number {i}. " + PROSE[:160],
                "parameters": {
                    "type": "object",
                    "properties": {
                        "path": {"type": "string", "description": "the file to work on"},
                        "mode": {"type": "string", "enum": ["read", "write", "append"]},
                        "count": {"type": "integer", "description": "how many lines"},
                    },
                    "required": ["path"],
                },
            },
        }
        for i in range(n)
    ]


def system_prompt(tok, n_tokens: int, seed: int) -> str:
    """About `n_tokens` tokens of prose, different for each seed from its first words on."""
    return f"You are agent {seed}. " + PROSE * max(1, n_tokens // len(tok.encode(PROSE)))


def best(fn, arg_of) -> float:
    """Best CPU ms of REPEAT calls fn(arg_of(k))."""
    out = float("inf")
    for k in range(REPEAT):
        arg = arg_of(k)
        t0 = time.process_time()
        fn(arg)
        out = min(out, time.process_time() - t0)
    return out * 1e3


def ask(k: int, system: str, extra: str = "") -> list[dict]:
    return [{"role": "system", "content": system}, {"role": "user", "content": f"Task {k}: {extra}go."}]


def measure(build, tok, n: int, delimiter: str) -> tuple[float, float, float, float]:
    """(cold, agent, next turn, delimiter) CPU ms for system prompts of about `n` tokens."""
    systems = [system_prompt(tok, n, seed) for seed in range(REPEAT + 1)]
    shared = systems[-1]
    cold = best(build, lambda k: ask(k, systems[k]))
    build(ask(-1, shared))
    agent = best(build, lambda k: ask(k, shared))
    conv = ask(-1, shared)

    def next_turn(k: int) -> list[dict]:
        conv.extend([{"role": "assistant", "content": f"Done {k}."}, {"role": "user", "content": f"Now {k}."}])
        return list(conv)

    build(next_turn(-2))
    turn = best(build, next_turn)
    delim = best(build, lambda k: ask(k, shared, f"write {delimiter} literally, "))
    return cold, agent, turn, delim


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--formats", default=",".join(FORMATS), help=f"comma-separated, of {', '.join(FORMATS)}")
    fmts = ap.parse_args().formats.split(",")
    base = models_dir()
    tools = agent_tools(20)
    print(f"{'format':8} {'system':>7} {'prompt':>7} {'cold':>7} {'agent':>7} {'next turn':>9} {'delimiter':>9}  (CPU ms)")
    for fmt in fmts:
        tok = load_tokenizer(base / FORMATS[fmt][0])
        delimiter = FORMATS[fmt][1]

        def build(messages: list[dict], fmt=fmt, tok=tok) -> None:
            render_prompt(messages, tokenizer=tok, tools=tools, format=fmt)
            StreamParser(fmt, tools=tools, tokenizer=tok, stop_token_ids=[0])

        build([{"role": "user", "content": "warm up " + delimiter}])
        for n in SIZES:
            cold, agent, turn, delim = measure(build, tok, n, delimiter)
            size = len(render_prompt(ask(0, system_prompt(tok, n, 0)), tokenizer=tok, tools=tools, format=fmt).token_ids)
            print(f"{fmt:8} {n:7d} {size:7d} {cold:7.2f} {agent:7.2f} {turn:9.2f} {delim:9.2f}", flush=True)


if __name__ == "__main__":
    main()
