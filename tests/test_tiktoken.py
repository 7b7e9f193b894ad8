"""tiktoken BPE files (Kimi K2, Llama 4, Hunyuan) loaded by load_tokenizer, and GLM-5's
tokenizer.json: the ids of shared/models/README.md, and the same ids as tiktoken itself."""

from __future__ import annotations

import base64
import functools
import json
import unicodedata

import pytest
import tiktoken
from corpus import varied_sample
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from models import model_path
from tiktoken.load import load_tiktoken_bpe

from chatsieve.tiktoken_bpe import read_ranks
from chatsieve.tokenizer import Tokenizer, TokenizerNotFoundError, load_tokenizer

# Ids from shared/models/README.md (each verified there by encoding with tiktoken).
SPECIAL_IDS = {
    "kimi-k2": {
        "[BOS]": 163584,
        "[EOS]": 163585,
        "<|im_end|>": 163586,
        "<|im_user|>": 163587,
        "<|im_assistant|>": 163588,
        "[EOT]": 163593,
        "<|im_system|>": 163594,
        "<|tool_calls_section_begin|>": 163595,
        "<|tool_calls_section_end|>": 163596,
        "<|tool_call_begin|>": 163597,
        "<|tool_call_argument_begin|>": 163598,
        "<|tool_call_end|>": 163599,
        "<|im_middle|>": 163601,
        "<think>": 163606,
        "</think>": 163607,
        "[UNK]": 163838,
        "[PAD]": 163839,
    },
    "llama4": {
        "<|begin_of_text|>": 200000,
        "<|end_of_text|>": 200001,
        "<|header_start|>": 200005,
        "<|header_end|>": 200006,
        "<|eom|>": 200007,
        "<|eot|>": 200008,
        "<|step|>": 200009,
        "<|python_start|>": 200016,
        "<|python_end|>": 200017,
        "<|finetune_right_pad|>": 200018,
        "<|image|>": 200090,
        "<|reasoning_thinking_start|>": 201142,
        "<|reasoning_thinking_end|>": 201143,
    },
    "hunyuan": {
        "<|endoftext|>": 127957,
        "<|startoftext|>": 127958,
        "<|bos|>": 127959,
        "<|eos|>": 127960,
        "<|pad|>": 127961,
        "<|extra_0|>": 127962,
        "<|extra_4|>": 127966,
        "<|extra_5|>": 127967,
        "<|extra_204|>": 127962 + 204,
    },
    "glm/glm-5": {
        "<|endoftext|>": 154820,
        "[gMASK]": 154822,
        "<sop>": 154824,
        "<eop>": 154825,
        "<|system|>": 154826,
        "<|user|>": 154827,
        "<|assistant|>": 154828,
        "<|observation|>": 154829,
        "<think>": 154841,
        "</think>": 154842,
        "<tool_call>": 154843,
        "</tool_call>": 154844,
        "<tool_response>": 154845,
        "</tool_response>": 154846,
        "<arg_key>": 154847,
        "</arg_key>": 154848,
        "<arg_value>": 154849,
        "</arg_value>": 154850,
        "/nothink": 154851,
    },
}
VOCAB_SIZES = {"kimi-k2": 163_840, "llama4": 202_048, "hunyuan": 128_167}
STOP_IDS = {
    "kimi-k2": {163585, 163586},  # [EOS] (eos_token), <|im_end|>
    "llama4": {200001, 200007, 200008},  # <|end_of_text|> (eos), <|eom|>, <|eot|>
    "hunyuan": {127957, 127960},  # <|endoftext|>, <|eos|> (eos_token)
}

# The split patterns as shared/models/README.md gives them (from tokenization_kimi.py and
# tokenization_hy.py), written out here independently of chatsieve's copies.
_KIMI_PAT = "|".join(
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
_HY_PAT = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""


@functools.cache
def tok(name: str) -> Tokenizer:
    return load_tokenizer(model_path(name))


@functools.cache
def reference(name: str) -> tiktoken.Encoding:
    """tiktoken's own encoding of the same files, built as shared/models/README.md shows."""
    if name == "kimi-k2":
        ranks = load_tiktoken_bpe(str(model_path("kimi-k2/tiktoken.model")))
        cfg = json.loads(model_path("kimi-k2/tokenizer_config.json").read_text(encoding="utf-8"))
        names = {int(k): v["content"] for k, v in cfg["added_tokens_decoder"].items()}
        specials = {names.get(i, f"<|reserved_token_{i}|>"): i for i in range(len(ranks), len(ranks) + 256)}
        return tiktoken.Encoding("kimi-k2", pat_str=_KIMI_PAT, mergeable_ranks=ranks, special_tokens=specials)
    if name == "llama4":
        spec = json.loads(model_path("llama4/special_tokens.json").read_text(encoding="utf-8"))
        ranks = load_tiktoken_bpe(str(model_path("llama4/tokenizer.model")))
        specials = {t: spec["num_base_tokens"] + i for i, t in enumerate(spec["special_tokens"])}
        return tiktoken.Encoding(
            "llama4", pat_str=spec["pattern"], mergeable_ranks=ranks, special_tokens=specials
        )
    assert name == "hunyuan"
    lines = model_path("hunyuan/hy.tiktoken").read_text(encoding="utf-8").splitlines()
    ranks = {base64.b64decode(line.split()[0]): i for i, line in enumerate(lines) if line.strip()}
    names = ["<|endoftext|>", "<|startoftext|>", "<|bos|>", "<|eos|>", "<|pad|>"] + [
        f"<|extra_{i}|>" for i in range(205)
    ]
    specials = {t: len(ranks) + i for i, t in enumerate(names)}
    return tiktoken.Encoding("hunyuan", pat_str=_HY_PAT, mergeable_ranks=ranks, special_tokens=specials)


def reference_ids(name: str, text: str) -> list[int]:
    if name == "hunyuan":  # tokenization_hy.py NFC-normalizes its input
        text = unicodedata.normalize("NFC", text)
    return reference(name).encode(text, allowed_special="all")


TIKTOKEN = ["kimi-k2", "llama4", "hunyuan"]


@pytest.mark.parametrize("name", sorted(SPECIAL_IDS))
def test_special_token_ids(name):
    t = tok(name)
    for text, expected in SPECIAL_IDS[name].items():
        assert t.encode(text) == [expected], text
        assert t.token_to_id(text) == expected and t.single_token_id(text) == expected
        assert t.is_added(expected) and t.decode([expected]) == text


@pytest.mark.parametrize("name", TIKTOKEN)
def test_vocabulary_size_and_stop_ids(name):
    assert tok(name).hf.get_vocab_size() == VOCAB_SIZES[name] == reference(name).n_vocab
    assert tok(name).stop_token_ids == STOP_IDS[name]


def test_kimi_keeps_the_config_special_flags():
    kimi = tok("kimi-k2")
    # tokenizer_config.json marks the tool-call tokens and <think> as not special
    for text in ("<|tool_calls_section_begin|>", "<|tool_call_begin|>", "<think>", "</think>"):
        assert (
            kimi.is_added(kimi.single_token_id(text)) and kimi.single_token_id(text) not in kimi.special_ids
        )
    for text in ("<|im_end|>", "[EOS]", "<|im_middle|>"):
        assert kimi.single_token_id(text) in kimi.special_ids
    assert kimi.single_token_id("<|reserved_token_163600|>") == 163600  # unlisted slots
    assert (kimi.bos_token, kimi.eos_token) == ("[BOS]", "[EOS]")


def test_llama4_bos_eos_from_its_special_tokens_file():
    llama4 = tok("llama4")
    assert (llama4.bos_token, llama4.eos_token) == ("<|begin_of_text|>", "<|end_of_text|>")
    assert len(llama4.added_tokens()) == 2048 and llama4.special_ids == frozenset(range(200000, 202048))


def test_hunyuan_tags_are_plain_text():
    hy = tok("hunyuan")
    # README: no single-id delimiter exists for Hunyuan's tool and think tags
    assert hy.encode("<tool_calls>") == [27, 14506, 46736, 29]
    assert hy.encode("</tool_calls>") == [524, 14506, 46736, 29]
    assert hy.encode("<think>") == [14023, 771, 29]
    for tag in ("<tool_calls>", "<tool_call>", "<think>", "</think>", "<answer>", "<tool_sep>"):
        assert hy.single_token_id(tag) is None
    assert hy.chat_template is not None and "<|extra_0|>" in hy.chat_template


SAMPLE = varied_sample()


@pytest.mark.parametrize("name", TIKTOKEN)
def test_same_ids_as_tiktoken_on_a_varied_sample(name):
    t = tok(name)
    assert sum(map(len, SAMPLE)) > 100_000
    for text in SAMPLE:
        want = reference_ids(name, text)
        assert t.encode(text) == want, text[:80]
        assert t.decode(want) == reference(name).decode(want)


@pytest.mark.parametrize("name", TIKTOKEN)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.text(st.characters(codec="utf-8"), max_size=60))
def test_same_ids_as_tiktoken_on_any_text(name, text):
    assert tok(name).encode(text) == reference_ids(name, text)


@pytest.mark.parametrize("name", TIKTOKEN)
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_same_bytes_per_token_as_tiktoken(name, data):
    ids = data.draw(st.lists(st.integers(0, reference(name).n_vocab - 1), max_size=30))
    ref = reference(name)
    for i in ids:
        assert tok(name).token_bytes(i) == ref.decode_single_token_bytes(i)


def test_spelled_specials_are_ordinary_pieces_in_both():
    kimi = tok("kimi-k2")
    # README: without allowed_special, tiktoken spells the text from ordinary pieces
    spelled = reference("kimi-k2").encode("<|tool_call_begin|>", disallowed_special=())
    assert spelled == [27, 91, 20960, 21568, 37763, 91, 29]
    assert kimi.decode(spelled) == "<|tool_call_begin|>" and not any(kimi.is_added(i) for i in spelled)


# -- loader errors --------------------------------------------------------------------


def test_unknown_tiktoken_layout_is_a_clear_error(tmp_path):
    (tmp_path / "tiktoken.model").symlink_to(model_path("kimi-k2/tiktoken.model"))
    with pytest.raises(ValueError, match="split pattern and special tokens are unknown.*TikTokenTokenizer"):
        load_tokenizer(tmp_path)


def test_malformed_tiktoken_line(tmp_path):
    (tmp_path / "x.tiktoken").write_text("IQ== 0\nnot-base64!! 1\n")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "HYTokenizer"}))
    with pytest.raises(ValueError, match=r"x.tiktoken:2: not a tiktoken line"):
        load_tokenizer(tmp_path)


def test_ranks_must_be_dense(tmp_path):
    (tmp_path / "gap.tiktoken").write_text("IQ== 0\nIg== 2\n")
    with pytest.raises(ValueError, match="ranks are not 0..1"):
        read_ranks(tmp_path / "gap.tiktoken")


def test_a_sentencepiece_tokenizer_model_is_not_taken_for_tiktoken(tmp_path):
    (tmp_path / "tokenizer.model").write_bytes(b"\n\x0e\n\x05<unk>\x15\x00\x00\x00\x00\x18\x02")
    with pytest.raises(TokenizerNotFoundError, match="found: tokenizer.model"):
        load_tokenizer(tmp_path)
