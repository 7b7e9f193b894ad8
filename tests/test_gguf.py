"""The GGUF metadata reader and the vocabulary check behind `chatsieve serve`'s start-up refusal."""

from __future__ import annotations

import struct

import models
import pytest
import real_engine

from chatsieve.gguf import GGUFError, check_vocab, read_metadata, vocab_mismatches
from chatsieve.server.model_check import ModelMismatch, check_model


def _string(s: str) -> bytes:
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def write_gguf(path, kv: dict, version: int = 3) -> None:
    """A GGUF header with `kv` (str, int (uint32), float, bool, list of str / int) and no tensors."""
    out = [b"GGUF", struct.pack("<IQQ", version, 0, len(kv))]
    for key, value in kv.items():
        out.append(_string(key))
        if isinstance(value, bool):
            out.append(struct.pack("<I?", 7, value))
        elif isinstance(value, int):
            out.append(struct.pack("<II", 4, value))
        elif isinstance(value, float):
            out.append(struct.pack("<If", 6, value))
        elif isinstance(value, str):
            out.append(struct.pack("<I", 8) + _string(value))
        elif all(isinstance(v, str) for v in value):
            out.append(struct.pack("<IIQ", 9, 8, len(value)) + b"".join(map(_string, value)))
        else:
            out.append(struct.pack("<IIQ", 9, 5, len(value)) + struct.pack(f"<{len(value)}i", *value))
    path.write_bytes(b"".join(out))


class FakeHF:
    def __init__(self, tokens):
        self.tokens = tokens

    def get_vocab_size(self, with_added_tokens=True):
        return len(self.tokens)

    def id_to_token(self, i):
        return self.tokens[i] if 0 <= i < len(self.tokens) else None


class FakeTokenizer:
    def __init__(self, tokens, special=(), added=()):
        self.hf = FakeHF(tokens)
        self.special_ids = frozenset(special)
        self._added = set(added) | set(special)

    def is_added(self, i):
        return i in self._added


TOKENS = ["<pad>", "<eos>", "<bos>", "a", "b", "<end_of_turn>"]
TYPES = [3, 3, 3, 1, 1, 3]
META = {
    "general.architecture": "test",
    "general.ratio": 0.5,
    "general.flag": True,
    "tokenizer.ggml.tokens": TOKENS,
    "tokenizer.ggml.token_type": TYPES,
    "tokenizer.ggml.bos_token_id": 2,
    "tokenizer.ggml.eos_token_id": 1,
}


def test_read_metadata(tmp_path):
    p = tmp_path / "m.gguf"
    write_gguf(p, META)
    meta = read_metadata(p)
    assert meta["general.architecture"] == "test" and meta["general.flag"] is True
    assert meta["general.ratio"] == 0.5 and meta["tokenizer.ggml.bos_token_id"] == 2
    assert meta["tokenizer.ggml.tokens"] == TOKENS and meta["tokenizer.ggml.token_type"] == TYPES


@pytest.mark.parametrize(
    ("data", "message"),
    [(b"", "not a GGUF file"), (b"GGML\x03\x00\x00\x00", "not a GGUF file"), (b"GGUF\x09\x00\x00\x00", "version 9"),
     (b"GGUF\x03\x00\x00\x00\x00", "ends early")],
)  # fmt: skip
def test_not_a_gguf(tmp_path, data, message):
    p = tmp_path / "x.gguf"
    p.write_bytes(data)
    with pytest.raises(GGUFError, match=message):
        read_metadata(p)


def test_truncated_header(tmp_path):
    p = tmp_path / "m.gguf"
    write_gguf(p, META)
    p.write_bytes(p.read_bytes()[:-7])
    with pytest.raises(GGUFError, match="ends early"):
        read_metadata(p)


def test_agreeing_vocabularies():
    tok = FakeTokenizer(TOKENS, special={0, 1, 2, 5})
    assert vocab_mismatches(dict(META), tok) == []
    # a tokenizer may add tokens past the model's end (Gemma 3's <image_soft_token>)
    assert vocab_mismatches(dict(META), FakeTokenizer([*TOKENS, "<img>"], special={0, 1, 2, 5, 6})) == []


@pytest.mark.parametrize(
    ("tok", "message"),
    [
        (FakeTokenizer(TOKENS[:5], special={0, 1, 2}), "size differs: the GGUF has 6 tokens, the tokenizer 5"),
        (FakeTokenizer([*TOKENS, "c"], special={0, 1, 2, 5}), "size differs"),  # an ordinary extra token
        (FakeTokenizer(["<pad>", "<bos>", "<eos>", "a", "b", "<end_of_turn>"], special={0, 1, 2, 5}),
         "control token id 1 is '<eos>' in the GGUF but '<bos>' in the tokenizer"),
        (FakeTokenizer(["<pad>", "<eos>", "<bos>", "<x>", "b", "<end_of_turn>"], special={0, 1, 2, 3, 5}),
         "special token id 3 is 'a' in the GGUF but '<x>'"),
    ],
)  # fmt: skip
def test_disagreeing_vocabularies(tok, message):
    assert any(message in p for p in vocab_mismatches(dict(META), tok)), vocab_mismatches(dict(META), tok)


def test_no_vocabulary_in_the_gguf():
    assert "no tokenizer.ggml.tokens" in vocab_mismatches({}, FakeTokenizer(TOKENS))[0]


def test_the_real_gemma3_model_matches_only_its_own_tokenizer():
    path = real_engine.gguf_path()
    check_vocab(path, models.tokenizer("gemma3"))  # agrees
    with pytest.raises(ModelMismatch, match="refusing to serve.*vocabulary size differs.*control token id 1"):
        check_model(path, models.tokenizer("qwen3"))


def test_serve_refuses_a_gguf_that_does_not_match_the_tokenizer(capsys):
    from chatsieve.server import serve_main

    gguf = real_engine.gguf_path()
    code = serve_main(["--model-dir", str(models.model_path("qwen3")), "--format", "qwen3",
                       "--backend", "http://127.0.0.1:9", "--gguf", str(gguf)])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("chatsieve serve: error: refusing to serve: the model ")
    assert "vocabulary size differs: the GGUF has 262144 tokens, the tokenizer 151669" in err
