"""Reads tiktoken BPE files (Kimi K2, Llama 4, Hunyuan) into a `tokenizers.Tokenizer`.

A tiktoken file is one `base64(token bytes) rank` line per token; the split pattern and
the special tokens live beside it, in a layout that differs per family (`LAYOUTS`).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .byte_level import gpt2_byte_decoder

__all__ = ["LAYOUTS", "TiktokenLayout", "find_tiktoken_file", "read_ranks", "tiktoken_tokenizer"]

# Kimi K2's split (its tokenization_kimi.py): Han runs apart, letters with `&&` class
# intersections that keep Han out of them, digits in threes.
KIMI_PATTERN = "|".join(
    [
        r"""[\p{Han}]+""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)
# Hunyuan-A13B's split (its tokenization_hy.py; the Qwen2 pattern, single digits).
HUNYUAN_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
KIMI_RESERVED = 256  # Kimi's special-token slots after the ranks
HUNYUAN_SPECIALS = ("<|endoftext|>", "<|startoftext|>", "<|bos|>", "<|eos|>", "<|pad|>") + tuple(
    f"<|extra_{i}|>" for i in range(205)
)

_LINE = re.compile(rb"[A-Za-z0-9+/]+={0,2} \d+")


@dataclass(frozen=True)
class Special:
    content: str
    id: int
    special: bool = True  # False: an added token the config marks as not special


@dataclass(frozen=True)
class TiktokenLayout:
    """How one family lays out a tiktoken vocabulary: its split pattern, NFC or not, and
    its special tokens (given the rank count, the directory and tokenizer_config.json)."""

    family: str
    pattern: str
    specials: Callable[[int, Path, dict], list[Special]]
    nfc: bool = False


def _kimi_specials(n_ranks: int, directory: Path, config: dict) -> list[Special]:
    listed = {int(k): v for k, v in (config.get("added_tokens_decoder") or {}).items()}
    out = []
    for i in range(n_ranks, n_ranks + KIMI_RESERVED):
        entry = listed.get(i)
        if entry is None:
            out.append(Special(f"<|reserved_token_{i}|>", i))
        else:
            out.append(Special(entry["content"], i, bool(entry.get("special", True))))
    return out


def _hunyuan_specials(n_ranks: int, directory: Path, config: dict) -> list[Special]:
    return [Special(t, n_ranks + k) for k, t in enumerate(HUNYUAN_SPECIALS)]


def _special_tokens_json(directory: Path) -> dict:
    data = json.loads((directory / "special_tokens.json").read_text(encoding="utf-8"))
    if not isinstance(data, dict) or not isinstance(data.get("pattern"), str):
        raise ValueError(f"{directory / 'special_tokens.json'} has no split 'pattern'")
    return data


def _listed_specials(n_ranks: int, directory: Path, config: dict) -> list[Special]:
    data = _special_tokens_json(directory)
    base = int(data.get("num_base_tokens", n_ranks))
    if base != n_ranks:
        raise ValueError(f"special_tokens.json says {base} base tokens, the tiktoken file has {n_ranks}")
    return [Special(t, base + k) for k, t in enumerate(data["special_tokens"])]


# tokenizer_config.json's `tokenizer_class` -> layout; a special_tokens.json with a
# `pattern` (Llama 4's, as staged from llama_models' tokenizer.py) is the "listed" layout.
LAYOUTS: dict[str, TiktokenLayout] = {
    "TikTokenTokenizer": TiktokenLayout("Kimi K2", KIMI_PATTERN, _kimi_specials),
    "HYTokenizer": TiktokenLayout("Hunyuan", HUNYUAN_PATTERN, _hunyuan_specials, nfc=True),
}


def find_tiktoken_file(directory: Path) -> Path | None:
    """`tiktoken.model`, a `*.tiktoken` file, or a `tokenizer.model` in tiktoken's text
    format (a SentencePiece `tokenizer.model` is binary and is not taken)."""
    candidates = [
        directory / "tiktoken.model",
        *sorted(directory.glob("*.tiktoken")),
        directory / "tokenizer.model",
    ]
    for p in candidates:
        if p.is_file():
            with p.open("rb") as f:
                first = f.readline().strip()
            if _LINE.fullmatch(first):
                return p
    return None


def read_ranks(path: Path) -> dict[bytes, int]:
    """token bytes -> rank; ranks must be 0..n-1 (each once)."""
    ranks: dict[bytes, int] = {}
    for n, line in enumerate(path.read_bytes().splitlines(), 1):
        if not line.strip():
            continue
        try:
            token, rank = line.split()
            ranks[base64.b64decode(token, validate=True)] = int(rank)
        except (ValueError, binascii.Error):
            raise ValueError(f"{path}:{n}: not a tiktoken line (base64 token, space, rank)") from None
    if sorted(ranks.values()) != list(range(len(ranks))):
        raise ValueError(f"{path}: ranks are not 0..{len(ranks) - 1}, each once")
    return ranks


def _merges(vocab: dict[str, int]) -> list[tuple[str, str]]:
    """Every split of every token into two tokens, ordered by the whole token's rank
    (then by the ranks of the two parts).

    tiktoken merges the adjacent pair whose concatenation has the lowest rank; a BPE
    whose merge priority is that rank, with every pair that can make the token, merges
    the same pairs (ties between two splits of one token inside one word aside).
    """
    by_rank = [""] * len(vocab)
    for token, rank in vocab.items():
        by_rank[rank] = token
    out: list[tuple[str, str]] = []
    add = out.append
    get = vocab.get
    for token in by_rank:
        n = len(token)
        if n == 2:
            add((token[0], token[1]))
        elif n > 2:
            splits = [(left, get(token[i:]), i) for i in range(1, n) if (left := get(token[:i])) is not None]
            splits = sorted(s for s in splits if s[1] is not None)
            for _, _, i in splits:
                add((token[:i], token[i:]))
    return out


def _byte_alphabet() -> dict[int, str]:
    """GPT-2's byte-level alphabet: byte -> the printable character standing for it."""
    return {b: c for c, b in gpt2_byte_decoder().items()}


def tiktoken_tokenizer(tk: Any, path: Path, config: dict) -> tuple[Any, dict]:
    """A `tokenizers.Tokenizer` equal to the tiktoken encoding in `path` (same ids for
    ordinary text, special tokens as added tokens), and the config values its layout
    implies (bos/eos for Llama 4). `config` is tokenizer_config.json's content."""
    directory = path.parent
    cls = str(config.get("tokenizer_class") or "")
    implied: dict = {}
    if cls in LAYOUTS:
        layout = LAYOUTS[cls]
        pattern = layout.pattern
        specials_of = layout.specials
        nfc = layout.nfc
    elif isinstance((data := _read_json_dict(directory / "special_tokens.json")).get("pattern"), str):
        pattern, specials_of, nfc = data["pattern"], _listed_specials, False
        implied = {
            "bos_token": data.get("bos"),
            "eos_token": data.get("eos"),
            "stop_tokens": [t for t in data.get("stop_tokens") or () if isinstance(t, str)],
        }
    else:
        raise ValueError(
            f"{path} is a tiktoken BPE file, but its split pattern and special tokens are unknown: "
            "expected a tokenizer_config.json whose tokenizer_class is "
            f"{' or '.join(sorted(LAYOUTS))}, or a special_tokens.json with 'pattern' and 'special_tokens'"
        )

    ranks = read_ranks(path)
    # Work in GPT-2's byte-level alphabet (one character per byte) from here on.
    to_chars = str.maketrans({chr(b): c for b, c in _byte_alphabet().items()})
    vocab = {t.decode("latin-1").translate(to_chars): r for t, r in ranks.items()}
    merges = _merges(vocab)
    # ignore_merges: a whole split piece that is a token is that token, as in tiktoken.
    hf = tk.Tokenizer(tk.models.BPE(vocab, merges, ignore_merges=True))
    if nfc:
        hf.normalizer = tk.normalizers.NFC()
    hf.pre_tokenizer = tk.pre_tokenizers.Sequence(
        [
            tk.pre_tokenizers.Split(tk.Regex(pattern), behavior="isolated", invert=False),
            tk.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    hf.decoder = tk.decoders.ByteLevel()
    specials = sorted(specials_of(len(ranks), directory, config), key=lambda s: s.id)
    if [s.id for s in specials] != list(range(len(ranks), len(ranks) + len(specials))):
        raise ValueError(f"{path}: special token ids do not follow the {len(ranks)} ranks without gaps")
    # One call: add_tokens keeps each token's own special flag (add_special_tokens would
    # mark all special), and one call is linear where a call per token is quadratic.
    hf.add_tokens([tk.AddedToken(s.content, special=s.special, normalized=False) for s in specials])
    for s in specials:
        if hf.token_to_id(s.content) != s.id:
            raise ValueError(
                f"{path}: special token {s.content!r} got id {hf.token_to_id(s.content)}, expected {s.id}"
            )
    return hf, {k: v for k, v in implied.items() if v}


def _read_json_dict(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
