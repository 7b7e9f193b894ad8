"""tiktoken files two ways: chatsieve's conversion to a `tokenizers` BPE (what
load_tokenizer does) against tiktoken itself. Prints load time (CPU and wall), whether
the ids agree on a text sample, and token-by-token detokenization speed.

    python bench/bench_tiktoken.py          # needs tiktoken and $CHATSIEVE_MODELS
"""

from __future__ import annotations

import codecs
import json
import os
import random
import sys
import time
import unicodedata
from pathlib import Path

import tiktoken
from tiktoken.load import load_tiktoken_bpe

from chatsieve.detok import Detokenizer
from chatsieve.tiktoken_bpe import HUNYUAN_PATTERN, HUNYUAN_SPECIALS, KIMI_PATTERN, KIMI_RESERVED
from chatsieve.tokenizer import load_tokenizer


def models_dir() -> Path:
    for c in (os.environ.get("CHATSIEVE_MODELS"), Path(__file__).resolve().parents[2] / "shared" / "models"):
        if c and Path(c).is_dir():
            return Path(c)
    sys.exit("bench: set CHATSIEVE_MODELS to the shared models directory")


M = models_dir()


def tiktoken_encoding(name: str) -> tiktoken.Encoding:
    if name == "kimi-k2":
        ranks = load_tiktoken_bpe(str(M / "kimi-k2/tiktoken.model"))
        cfg = json.loads((M / "kimi-k2/tokenizer_config.json").read_text(encoding="utf-8"))
        names = {int(k): v["content"] for k, v in cfg["added_tokens_decoder"].items()}
        n = len(ranks)
        specials = {names.get(i, f"<|reserved_token_{i}|>"): i for i in range(n, n + KIMI_RESERVED)}
        return tiktoken.Encoding(name, pat_str=KIMI_PATTERN, mergeable_ranks=ranks, special_tokens=specials)
    if name == "llama4":
        spec = json.loads((M / "llama4/special_tokens.json").read_text(encoding="utf-8"))
        ranks = load_tiktoken_bpe(str(M / "llama4/tokenizer.model"))
        specials = {t: spec["num_base_tokens"] + i for i, t in enumerate(spec["special_tokens"])}
        return tiktoken.Encoding(
            name, pat_str=spec["pattern"], mergeable_ranks=ranks, special_tokens=specials
        )
    ranks = load_tiktoken_bpe(str(M / "hunyuan/hy.tiktoken"))
    specials = {t: len(ranks) + i for i, t in enumerate(HUNYUAN_SPECIALS)}
    return tiktoken.Encoding(name, pat_str=HUNYUAN_PATTERN, mergeable_ranks=ranks, special_tokens=specials)


def timed(f):
    cpu, wall = time.process_time(), time.perf_counter()
    out = f()
    return out, time.process_time() - cpu, time.perf_counter() - wall


def sample() -> list[str]:
    root = Path(__file__).resolve().parents[1]
    texts = [p.read_text(encoding="utf-8") for p in sorted(root.rglob("*.py"))]
    texts += [p.read_text(encoding="utf-8") for p in sorted((root / "tests/fixtures").rglob("*.yaml"))]
    rng = random.Random(0)
    alphabet = "abcXYZ 123\n\t  éüßñ中文日本語한국어😀🏳️‍🌈'\"<>|{}[]()_-=+.,;:!?\u0301ΑβγДж١٢٣"
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 60))) for _ in range(3000)]
    return texts


def main() -> None:
    texts = sample()
    print(f"sample: {len(texts)} texts, {sum(map(len, texts))} characters")
    for name in ("kimi-k2", "llama4", "hunyuan"):
        tok, cpu, wall = timed(lambda name=name: load_tokenizer(M / name))
        print(f"{name}: chatsieve conversion load {cpu:.2f}s CPU ({wall:.2f}s wall)")
        enc, cpu, wall = timed(lambda name=name: tiktoken_encoding(name))
        print(f"{name}: tiktoken load {cpu:.2f}s CPU ({wall:.2f}s wall)")
        nfc = name == "hunyuan"
        differ = sum(
            tok.encode(t) != enc.encode(unicodedata.normalize("NFC", t) if nfc else t, allowed_special="all")
            for t in texts
        )
        print(f"{name}: ids differ on {differ} of {len(texts)} texts")
        ids = tok.encode("".join(texts[:200]))

        def detok(ids=ids, tok=tok):
            d = Detokenizer(tok)
            for i in ids:
                d.feed([i])
            d.finish()

        def tiktoken_loop(ids=ids, enc=enc):
            u = codecs.getincrementaldecoder("utf-8")("replace")
            for i in ids:
                u.decode(enc.decode_single_token_bytes(i))

        def bytes_loop(ids=ids, tok=tok):
            u = codecs.getincrementaldecoder("utf-8")("replace")
            for i in ids:
                u.decode(tok.token_bytes(i))

        # The Detokenizer takes its bytes from token_bytes; the two bare loops compare the
        # byte sources alone (the converted vocabulary's against tiktoken's).
        for label, f in (
            ("chatsieve Detokenizer", detok),
            ("converted token_bytes + utf-8 decoder", bytes_loop),
            ("tiktoken bytes + utf-8 decoder", tiktoken_loop),
        ):
            best = min(timed(f)[1] for _ in range(3))
            print(f"{name}: {label}: {len(ids) / best / 1e3:.0f}k tokens/s ({len(ids)} tokens, one per feed)")


if __name__ == "__main__":
    main()
