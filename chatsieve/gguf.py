"""Reads a GGUF file's metadata (not its tensors) and checks its vocabulary against a tokenizer.

Pure Python, stdlib only: `read_metadata(path)` walks the header's key/value table;
`vocab_mismatches(meta, tokenizer)` says where the model's vocabulary and the tokenizer
chatsieve will decode with disagree (size, special-token ids), so a server can refuse to start.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any, BinaryIO

MAGIC = b"GGUF"

# GGUF value types
_SCALARS = {
    0: "B",  # uint8
    1: "b",  # int8
    2: "H",  # uint16
    3: "h",  # int16
    4: "I",  # uint32
    5: "i",  # int32
    6: "f",  # float32
    7: "?",  # bool
    10: "Q",  # uint64
    11: "q",  # int64
    12: "d",  # float64
}
_STRING, _ARRAY = 8, 9

# tokenizer.ggml.token_type values
TOKEN_NORMAL, TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_USER_DEFINED, TOKEN_UNUSED, TOKEN_BYTE = 1, 2, 3, 4, 5, 6

# GGUF keys of special-token ids -> what they are called in messages
SPECIAL_ID_KEYS = {
    "tokenizer.ggml.bos_token_id": "bos",
    "tokenizer.ggml.eos_token_id": "eos",
    "tokenizer.ggml.eot_token_id": "eot",
    "tokenizer.ggml.padding_token_id": "pad",
    "tokenizer.ggml.unknown_token_id": "unk",
}


class GGUFError(ValueError):
    """The file is not a GGUF file, or its header is damaged."""


class _Reader:
    def __init__(self, f: BinaryIO, endian: str, path: Path) -> None:
        self.f = f
        self.endian = endian
        self.path = path

    def take(self, n: int) -> bytes:
        data = self.f.read(n)
        if len(data) != n:
            raise GGUFError(f"{self.path}: the GGUF header ends early (truncated file?)")
        return data

    def scalar(self, code: str) -> Any:
        size = struct.calcsize(code)
        return struct.unpack(self.endian + code, self.take(size))[0]

    def string(self) -> str:
        n = self.scalar("Q")
        if n > 1 << 30:
            raise GGUFError(f"{self.path}: implausible string length {n} in the GGUF header")
        return self.take(n).decode("utf-8", "replace")

    def value(self, vtype: int) -> Any:
        if vtype in _SCALARS:
            return self.scalar(_SCALARS[vtype])
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            etype = self.scalar("I")
            count = self.scalar("Q")
            if count > 1 << 28:
                raise GGUFError(f"{self.path}: implausible array length {count} in the GGUF header")
            if etype in _SCALARS:  # one unpack for the whole array
                code = _SCALARS[etype]
                size = struct.calcsize(code)
                return list(struct.unpack(f"{self.endian}{count}{code}", self.take(size * count)))
            return [self.value(etype) for _ in range(count)]
        raise GGUFError(f"{self.path}: unknown GGUF value type {vtype}")


def read_metadata(path: str | Path) -> dict[str, Any]:
    """The key/value metadata of a GGUF file (tensor data is not read)."""
    path = Path(path)
    with path.open("rb") as f:
        if f.read(4) != MAGIC:
            raise GGUFError(f"{path} is not a GGUF file (no GGUF magic)")
        raw_version = f.read(4)
        if len(raw_version) != 4:
            raise GGUFError(f"{path}: the GGUF header ends early (truncated file?)")
        endian = "<"
        version = struct.unpack("<I", raw_version)[0]
        if version > 0xFFFF:  # written big-endian
            endian = ">"
            version = struct.unpack(">I", raw_version)[0]
        if version not in (1, 2, 3):
            raise GGUFError(f"{path}: unsupported GGUF version {version}")
        r = _Reader(f, endian, path)
        count_code = "I" if version == 1 else "Q"
        r.scalar(count_code)  # tensor count
        kv_count = r.scalar(count_code)
        meta: dict[str, Any] = {"GGUF.version": version}
        for _ in range(kv_count):
            key = r.string()
            meta[key] = r.value(r.scalar("I"))
        return meta


def vocab_mismatches(meta: dict[str, Any], tokenizer: Any) -> list[str]:
    """Where a GGUF's vocabulary and a chatsieve Tokenizer disagree; empty when they agree.

    Checked: the vocabulary size (the tokenizer may only add tokens past the model's end);
    every control token of the GGUF has the same text at the
    same id in the tokenizer; every special token of the tokenizer below the GGUF's size is
    the same token there; and the GGUF's bos/eos/eot/pad/unk ids name the same tokens.
    """
    tokens = meta.get("tokenizer.ggml.tokens")
    if not isinstance(tokens, list) or not tokens:
        return ["the GGUF has no tokenizer.ggml.tokens (no embedded vocabulary to compare)"]
    types = meta.get("tokenizer.ggml.token_type")
    types = types if isinstance(types, list) and len(types) == len(tokens) else None
    hf = tokenizer.hf
    problems: list[str] = []
    n_model, n_tok = len(tokens), hf.get_vocab_size(with_added_tokens=True)
    # A tokenizer may carry added tokens past the model's vocabulary (Gemma 3's tokenizer
    # has <image_soft_token> at 262144; the text-only GGUF stops at 262143): the model can
    # never produce them, so only ordinary tokens past the end, or a shorter tokenizer, differ.
    extra = range(n_model, n_tok)
    if n_model > n_tok or any(not tokenizer.is_added(tid) for tid in extra):
        problems.append(f"vocabulary size differs: the GGUF has {n_model} tokens, the tokenizer {n_tok}")

    def differs(tid: int, what: str) -> None:
        have = hf.id_to_token(tid)
        if have != tokens[tid]:
            problems.append(f"{what} id {tid} is {tokens[tid]!r} in the GGUF but {have!r} in the tokenizer")

    if types is not None:
        for tid, kind in enumerate(types):
            if kind == TOKEN_CONTROL:
                differs(tid, "control token")
    special = getattr(tokenizer, "special_ids", frozenset())
    for tid in sorted(special):
        if tid < n_model and (types is None or types[tid] != TOKEN_CONTROL):
            differs(tid, "special token")
    for key, what in SPECIAL_ID_KEYS.items():
        tid = meta.get(key)
        if isinstance(tid, int) and 0 <= tid < n_model:
            differs(tid, f"{what} token")
    return problems[:20] + ([f"... and {len(problems) - 20} more"] if len(problems) > 20 else [])


def check_vocab(path: str | Path, tokenizer: Any) -> None:
    """Raise GGUFError naming the differences when the GGUF at `path` does not match `tokenizer`."""
    problems = vocab_mismatches(read_metadata(path), tokenizer)
    if problems:
        raise GGUFError(
            f"the model {path} and the tokenizer do not match (wrong --model-dir for this engine?): "
            + "; ".join(problems)
        )
