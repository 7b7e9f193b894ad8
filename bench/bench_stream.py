"""Streaming throughput and scaling: generated outputs of 2k, 8k and 32k tokens (Gemma 4,
Qwen3, gpt-oss, DeepSeek V3.1, Kimi K2), fed one token per delta, in text mode (per-token
strings) and token mode (ids in, detokenization included). Prints µs per token and
t(32k)/t(8k) (linear ≈ 4). `xml_repeat`: a Qwen3-Coder call whose parameter is given again, its
long value undecided (a repeat or an example?) until that value's close, t(4N)/t(N).

    python bench/bench_stream.py [--formats gpt_oss,kimi_k2,xml_repeat]   # needs ../shared/models or $CHATSIEVE_MODELS

`--fast-lane off` runs the parser without its fast lane (`StreamParser(fast_lane=False)`);
`--fast-lane both` runs each output both ways, alternately, and adds the ratio off ÷ on.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from chatsieve import StreamParser
from chatsieve.tokenizer import derive_gemma4_tokenizer, load_tokenizer

SIZES = (2_000, 8_000, 32_000)
REPEAT = 5


def models_dir() -> Path:
    for c in (os.environ.get("CHATSIEVE_MODELS"), Path(__file__).resolve().parents[2] / "shared" / "models"):
        if c and Path(c).is_dir():
            return Path(c)
    sys.exit("bench: set CHATSIEVE_MODELS to the shared models directory")


# the tool the generated outputs call (benches that pass tools use this one)
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "write_file",
            "parameters": {
                "type": "object",
                "properties": {
                    "path": {"type": "string"},
                    "content": {"type": "string"},
                    "append": {"type": "boolean"},
                },
            },
        },
    }
]

PROSE = (
    "The forecast for Cambridge shows light rain in the morning, clearing by noon, with "
    "winds from the northwest at twelve miles per hour. 明天有小雨，下午转晴。 "
)


# (reasoning open, reasoning close, call opening up to the long string, call end)
SHAPES = {
    "gemma4": (
        "<|channel>thought\n",
        "<channel|>",
        '<|tool_call>call:write_file{path:<|"|>/tmp/notes.txt<|"|>,content:<|"|>',
        '<|"|>,append:true}<tool_call|><turn|>',
    ),
    "qwen3": (
        "<think>\n",
        "\n</think>\n\n",
        '<tool_call>\n{"name": "write_file", "arguments": {"path": "/tmp/notes.txt", "content": "',
        '", "append": true}}\n</tool_call><|im_end|>',
    ),
    # analysis, a commentary preamble (content), then the call message
    "gpt_oss": (
        "<|channel|>analysis<|message|>",
        "<|end|><|start|>assistant<|channel|>commentary<|message|>",
        "<|end|><|start|>assistant to=functions.write_file<|channel|>commentary <|constrain|>json<|message|>"
        '{"path": "/tmp/notes.txt", "content": "',
        '", "append": true}<|call|>',
    ),
    # thinking on: the prompt opened the block
    "deepseek_v31": (
        "",
        "</think>",
        '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>write_file<｜tool▁sep｜>{"path": "/tmp/notes.txt", "content": "',
        '", "append": true}<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜>',
    ),
    "kimi_k2": (
        "<think>",
        "</think>",
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.write_file:0<|tool_call_argument_begin|>"
        '{"path": "/tmp/notes.txt", "content": "',
        '", "append": true}<|tool_call_end|><|tool_calls_section_end|><|im_end|>',
    ),
}

# each format's tokenizer directory under the models directory ("gemma4": derived from Gemma 3's)
TOKENIZERS = {"gemma4": "", "qwen3": "qwen3", "gpt_oss": "gpt-oss", "deepseek_v31": "deepseek", "kimi_k2": "kimi-k2"}


def bench_tokenizer(fmt: str, base: Path):
    """The real tokenizer of `fmt` (a key of TOKENIZERS)."""
    if fmt == "gemma4":
        return derive_gemma4_tokenizer(base / "gemma3", base / "gemma4/special_tokens.json")
    return load_tokenizer(base / TOKENIZERS[fmt])


def make_output(fmt: str, tok, n_tokens: int) -> list[int]:
    """Reasoning (40%), content (30%), then one call whose string argument fills the rest."""
    r_open, r_close, call_open, call_end = (tok.encode(s) for s in SHAPES[fmt])

    def fill(n: int) -> list[int]:
        ids: list[int] = []
        while len(ids) < n:
            ids += tok.encode(PROSE)
        return ids[:n]

    ids = r_open + fill(int(n_tokens * 0.4)) + r_close + fill(int(n_tokens * 0.3)) + call_open
    return ids + fill(n_tokens - len(ids) - len(call_end)) + call_end


# A parameter the call already has, opened again: whether it is a repeat (the last value wins) or an
# example inside the value is known only at that value's close (xml_kv's read-ahead, at most 4096
# characters). The value is code that names the call's tags inline, as a parser's tests do; its sizes
# in tokens keep it inside the read-ahead, so the whole value is streamed undecided.
REPEAT_SIZES = (250, 1_000)
REPEAT_LINE = "    assert '<function=f>' in text and '</parameter' not in text\n"
REPEAT_TOOLS = [{"name": "write_file", "parameters": {"type": "object", "properties": {"content": {"type": "string"}}}}]


def make_repeat(tok, n_tokens: int) -> list[int]:
    head = tok.encode("<tool_call>\n<function=write_file>\n<parameter=content>\none\n</parameter>\n<parameter=content>\n")
    body: list[int] = []
    while len(body) < n_tokens:
        body += tok.encode(REPEAT_LINE)
    return head + body[:n_tokens] + tok.encode("\n</parameter>\n</function>\n</tool_call><|im_end|>")


def bench_repeat(base: Path) -> list[tuple]:
    tok = load_tokenizer(base / "qwen3")
    rows = []
    for mode in ("text", "tokens"):
        times = {}
        for n in REPEAT_SIZES:
            ids = make_repeat(tok, n)
            if mode == "text":
                pieces = [tok.decode([i]) for i in ids]

                def run(pieces=pieces):
                    p = StreamParser("qwen3_coder", tools=REPEAT_TOOLS, thinking=False)
                    for s in pieces:
                        p.feed(s)
                    p.finish()
                    return p
            else:

                def run(ids=ids):
                    p = StreamParser("qwen3_coder", tokenizer=tok, tools=REPEAT_TOOLS, thinking=False)
                    for i in ids:
                        p.feed(token_ids=[i])
                    p.finish()
                    return p
            msg = run().message
            assert len(msg.tool_calls) == 1 and "repeated argument" in str(msg.diagnostics), msg.diagnostics
            times[n] = timed(run)
            rows.append(("xml_repeat", mode, n, times[n] * 1e6 / len(ids)))
        rows.append(("xml_repeat", mode, "ratio", times[REPEAT_SIZES[-1]] / times[REPEAT_SIZES[0]]))
    return rows


def timed(fn) -> float:
    best = float("inf")
    for _ in range(REPEAT):
        t0 = time.process_time()
        fn()
        best = min(best, time.process_time() - t0)
    return best


def run_text(fmt, pieces, fast=True):
    p = StreamParser(fmt, thinking=True, fast_lane=fast)
    for s in pieces:
        p.feed(s)
    p.finish()
    return p


def run_tokens(fmt, tok, ids, fast=True):
    p = StreamParser(fmt, tokenizer=tok, thinking=True, fast_lane=fast)
    for i in ids:
        p.feed(token_ids=[i])
    p.finish()
    return p


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    names = [*SHAPES, "xml_repeat"]
    ap.add_argument("--formats", default=",".join(names), help=f"comma-separated, of {', '.join(names)}")
    ap.add_argument("--fast-lane", choices=("on", "off", "both"), default="on", help="the parser's fast lane (on)")
    a = ap.parse_args()
    fmts = a.formats.split(",")
    lanes = {"on": (True,), "off": (False,), "both": (False, True)}[a.fast_lane]
    base = models_dir()
    rows = []
    if "xml_repeat" in fmts:
        fmts.remove("xml_repeat")
        rows += bench_repeat(base)
    for fmt in fmts:
        tok = bench_tokenizer(fmt, base)
        for mode in ("text", "tokens"):
            times: dict = {}
            for n in SIZES:
                ids = make_output(fmt, tok, n)
                pieces = [tok.decode([i]) for i in ids] if mode == "text" else None
                results = {}
                for fast in lanes:
                    if mode == "text":
                        check = run_text(fmt, pieces, fast)
                        t = timed(lambda fmt=fmt, pieces=pieces, fast=fast: run_text(fmt, pieces, fast))
                    else:
                        check = run_tokens(fmt, tok, ids, fast)
                        t = timed(lambda fmt=fmt, tok=tok, ids=ids, fast=fast: run_tokens(fmt, tok, ids, fast))
                    msg = check.message
                    assert len(msg.tool_calls) == 1 and msg.reasoning and msg.content, msg.diagnostics
                    results[fast] = (msg.reasoning, msg.content, [(c.name, c.arguments) for c in msg.tool_calls])
                    times[n, fast] = t
                if len(results) == 2:
                    assert results[True] == results[False], f"{fmt} {mode} {n}: the fast lane changed the message"
                rows.append((fmt, mode, n, [times[n, f] * 1e6 / len(ids) for f in lanes]))
            rows.append((fmt, mode, "ratio", [times[SIZES[-1], f] / times[SIZES[-2], f] for f in lanes]))
    heads = {"on": ["µs/token"], "off": ["µs/token"], "both": ["off", "on", "off÷on"]}[a.fast_lane]
    print(f"{'format':12} {'mode':7} {'tokens':>7} " + " ".join(f"{h:>9}" for h in heads))
    for fmt, mode, n, v in rows:
        if not isinstance(v, list):
            v = [v]
        if n != "ratio" and len(v) == 2:
            v = [*v, v[0] / v[1]]
        cells = " ".join(f"{x:9.2f}" for x in v)
        if n == "ratio":
            label = f"{REPEAT_SIZES[-1]}/{REPEAT_SIZES[0]}" if fmt == "xml_repeat" else "32k/8k"
            print(f"{fmt:12} {mode:7} {label:>7} {cells}")
        else:
            print(f"{fmt:12} {mode:7} {n:7d} {cells}")


if __name__ == "__main__":
    main()
