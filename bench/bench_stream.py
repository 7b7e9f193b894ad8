"""Streaming throughput and scaling: generated Gemma 4 / Qwen3 outputs of 2k, 8k and
32k tokens, fed one token per delta, in text mode (per-token strings) and token mode
(ids in, detokenization included). Prints µs per token and t(32k)/t(8k) (linear ≈ 4).

    python bench/bench_stream.py            # needs ../shared/models or $CHATSIEVE_MODELS
"""

from __future__ import annotations

import json
import lzma
import os
import sys
import time
from pathlib import Path

from chatsieve import StreamParser
from chatsieve.tokenizer import load_tokenizer

SIZES = (2_000, 8_000, 32_000)
REPEAT = 3


def models_dir() -> Path:
    for c in (os.environ.get("CHATSIEVE_MODELS"), Path(__file__).resolve().parents[2] / "shared" / "models"):
        if c and Path(c).is_dir():
            return Path(c)
    sys.exit("bench: set CHATSIEVE_MODELS to the shared models directory")


def gemma4_tokenizer(base: Path):
    from tokenizers import Tokenizer

    j = json.loads(lzma.open(base / "gemma3/tokenizer.json.xz", "rt", encoding="utf-8").read())
    spec = json.loads((base / "gemma4/special_tokens.json").read_text())["tokens"]
    ren = {int(i): t["content"] for i, t in spec.items() if t.get("gemma3_piece")}
    vocab = j["model"]["vocab"]
    inv = {i: t for t, i in vocab.items()}
    for i, new in ren.items():
        del vocab[inv[i]]
        vocab[new] = i
    for a in j["added_tokens"]:
        if a["id"] in ren:
            a["content"] = ren[a["id"]]
    return load_tokenizer(Tokenizer.from_str(json.dumps(j)))


PROSE = (
    "The forecast for Cambridge shows light rain in the morning, clearing by noon, with "
    "winds from the northwest at twelve miles per hour. 明天有小雨，下午转晴。 "
)


def gemma4_output(tok, n_tokens: int) -> list[int]:
    """Reasoning (40%), content (30%), then one call with a long string argument (30%)."""
    def fill(n):
        ids: list[int] = []
        while len(ids) < n:
            ids += tok.encode(PROSE)
        return ids[:n]

    r, c = int(n_tokens * 0.4), int(n_tokens * 0.3)
    ids = tok.encode("<|channel>thought\n") + fill(r) + tok.encode("<channel|>") + fill(c)
    ids += tok.encode('<|tool_call>call:write_file{path:<|"|>/tmp/notes.txt<|"|>,content:<|"|>')
    ids += fill(n_tokens - len(ids) - 8) + tok.encode('<|"|>,append:true}<tool_call|><turn|>')
    return ids


def qwen3_output(tok, n_tokens: int) -> list[int]:
    def fill(n):
        ids: list[int] = []
        while len(ids) < n:
            ids += tok.encode(PROSE)
        return ids[:n]

    r, c = int(n_tokens * 0.4), int(n_tokens * 0.3)
    ids = tok.encode("<think>\n") + fill(r) + tok.encode("\n</think>\n\n") + fill(c)
    ids += tok.encode('<tool_call>\n{"name": "write_file", "arguments": {"path": "/tmp/notes.txt", "content": "')
    ids += fill(n_tokens - len(ids) - 12) + tok.encode('", "append": true}}\n</tool_call><|im_end|>')
    return ids


def timed(fn) -> float:
    best = float("inf")
    for _ in range(REPEAT):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def run_text(fmt, pieces):
    p = StreamParser(fmt)
    for s in pieces:
        p.feed(s)
    p.finish()
    return p


def run_tokens(fmt, tok, ids):
    p = StreamParser(fmt, tokenizer=tok)
    for i in ids:
        p.feed(token_ids=[i])
    p.finish()
    return p


def main() -> None:
    base = models_dir()
    rows = []
    for fmt, tok, make in (
        ("gemma4", gemma4_tokenizer(base), gemma4_output),
        ("qwen3", load_tokenizer(base / "qwen3"), qwen3_output),
    ):
        for mode in ("text", "tokens"):
            times = {}
            for n in SIZES:
                ids = make(tok, n)
                if mode == "text":
                    pieces = [tok.decode([i]) for i in ids]
                    check = run_text(fmt, pieces)
                    t = timed(lambda pieces=pieces: run_text(fmt, pieces))
                else:
                    check = run_tokens(fmt, tok, ids)
                    t = timed(lambda ids=ids: run_tokens(fmt, tok, ids))
                assert len(check.message.tool_calls) == 1, check.message.diagnostics
                times[n] = t
                rows.append((fmt, mode, n, t * 1e6 / len(ids)))
            rows.append((fmt, mode, "ratio", times[SIZES[-1]] / times[SIZES[-2]]))
    print(f"{'format':8} {'mode':7} {'tokens':>7} {'µs/token':>9}")
    for fmt, mode, n, v in rows:
        if n == "ratio":
            print(f"{fmt:8} {mode:7} {'32k/8k':>7} {v:9.2f}")
        else:
            print(f"{fmt:8} {mode:7} {n:7d} {v:9.2f}")


if __name__ == "__main__":
    main()
