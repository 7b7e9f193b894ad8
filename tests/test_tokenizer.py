"""load_tokenizer on the real tokenizers in shared/models: ids, stop tokens, templates, errors."""

from __future__ import annotations

import functools
import json

import pytest
from models import DEV_INSTALL, gemma4_tokenizer_json, model_path, require_module

from chatsieve.tokenizer import Tokenizer, TokenizerNotFoundError, load_tokenizer

tokenizers = require_module("tokenizers", DEV_INSTALL)


@functools.cache
def _load(rel: str) -> Tokenizer:
    return load_tokenizer(model_path(rel))


@functools.cache
def _gemma4() -> Tokenizer:
    return load_tokenizer(tokenizers.Tokenizer.from_str(gemma4_tokenizer_json()))


def _link(dst_dir, src_dir, names):
    """Symlink real model files into a scratch directory (never copied into the repo)."""
    for name in names:
        (dst_dir / name).symlink_to(src_dir / name)


@pytest.fixture(scope="module")
def qwen3_vocab_merges(tmp_path_factory) -> Tokenizer:
    d = tmp_path_factory.mktemp("qwen3-vocab-merges")
    _link(d, model_path("qwen3"), ["vocab.json", "merges.txt", "tokenizer_config.json"])
    return load_tokenizer(d)


def tok_for(name: str) -> Tokenizer:
    return _gemma4() if name == "gemma4" else _load(name)


# Ids from shared/models/README.md.
SPECIAL_IDS = {
    "qwen3": {
        "<|endoftext|>": 151643,
        "<|im_start|>": 151644,
        "<|im_end|>": 151645,
        "<tool_call>": 151657,
        "</tool_call>": 151658,
        "<tool_response>": 151665,
        "</tool_response>": 151666,
        "<think>": 151667,
        "</think>": 151668,
    },
    "llama3": {
        "<|begin_of_text|>": 128000,
        "<|end_of_text|>": 128001,
        "<|finetune_right_pad_id|>": 128004,
        "<|start_header_id|>": 128006,
        "<|end_header_id|>": 128007,
        "<|eom_id|>": 128008,
        "<|eot_id|>": 128009,
        "<|python_tag|>": 128010,
    },
    "deepseek": {
        "<｜begin▁of▁sentence｜>": 0,
        "<｜end▁of▁sentence｜>": 1,
        "<think>": 128798,
        "</think>": 128799,
        "<｜User｜>": 128803,
        "<｜Assistant｜>": 128804,
        "<｜tool▁calls▁begin｜>": 128806,
        "<｜tool▁calls▁end｜>": 128807,
        "<｜tool▁call▁begin｜>": 128808,
        "<｜tool▁call▁end｜>": 128809,
        "<｜tool▁sep｜>": 128814,
    },
    "deepseek/v4": {"<think>": 128821, "</think>": 128822, "｜DSML｜": 128825, "<｜tool▁sep｜>": 128814},
    "gpt-oss": {
        "<|startoftext|>": 199998,
        "<|endoftext|>": 199999,
        "<|return|>": 200002,
        "<|constrain|>": 200003,
        "<|channel|>": 200005,
        "<|start|>": 200006,
        "<|end|>": 200007,
        "<|message|>": 200008,
        "<|call|>": 200012,
    },
    "gemma4": {
        "<pad>": 0,
        "<eos>": 1,
        "<bos>": 2,
        "<|tool>": 46,
        "<tool|>": 47,
        "<|tool_call>": 48,
        "<tool_call|>": 49,
        "<|tool_response>": 50,
        "<tool_response|>": 51,
        '<|"|>': 52,
        "<|think|>": 98,
        "<|channel>": 100,
        "<channel|>": 101,
        "<|turn>": 105,
        "<turn|>": 106,
    },
    "gemma3": {"<start_of_turn>": 105, "<end_of_turn>": 106, "<start_of_image>": 255999},
}

STOP_IDS = {
    "qwen3": {151643, 151645},  # <|endoftext|>, <|im_end|> (eos)
    "llama3": {128001, 128008, 128009},  # <|end_of_text|> (eos), <|eom_id|>, <|eot_id|>
    "deepseek": {1},
    "gpt-oss": {199999, 200002, 200012},  # <|endoftext|>, <|return|> (eos), <|call|>
    "gemma4": {1, 106},  # <eos>, <turn|> (no config: found as special added tokens)
    "gemma3": {1, 106},  # <eos>, <end_of_turn> (eos); its HTML "</s>" (212) is not special
}

SAMPLES = [
    "Hello, world!",
    '<tool_call>\n{"name": "f", "arguments": {"x": 1}}\n</tool_call>',
    "  indented\n\n\tcode()  \r\n",
    "中文字符和日本語のテキスト",
    "emoji 😀👍🏽🏳️‍🌈 and e\u0301 combining",
    "<think>reasoning</think>answer<|im_end|>",
    "it's 1234567 o'clock, WE'LL see",
]


@pytest.mark.parametrize("name", sorted(SPECIAL_IDS))
def test_special_token_ids(name):
    tok = tok_for(name)
    added = tok.added_tokens()
    for text, expected in SPECIAL_IDS[name].items():
        assert tok.encode(text) == [expected], text
        assert tok.token_to_id(text) == expected
        assert tok.single_token_id(text) == expected
        assert tok.is_added(expected)
        assert added[text] == expected


@pytest.mark.parametrize("name", sorted(STOP_IDS))
def test_stop_token_ids(name):
    assert tok_for(name).stop_token_ids == frozenset(STOP_IDS[name])


def test_bos_eos_strings_and_dicts():
    assert (tok_for("qwen3").bos_token, tok_for("qwen3").eos_token) == (None, "<|im_end|>")
    assert tok_for("llama3").bos_token == "<|begin_of_text|>"
    # DeepSeek's config gives them as {"__type": "AddedToken", "content": ...}.
    ds = tok_for("deepseek")
    assert (ds.bos_token, ds.eos_token) == ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>")


def test_config_values():
    qwen = tok_for("qwen3")
    assert qwen.model_max_length == 131072
    assert qwen.truncation_side == "right"
    assert qwen.path == model_path("qwen3")
    assert qwen.config["tokenizer_class"] == "Qwen2Tokenizer"
    assert tok_for("gpt-oss").model_max_length is None  # transformers' int(1e30) "no limit"
    assert tok_for("gemma4").config == {} and tok_for("gemma4").path is None


def test_single_token_id_only_for_whole_added_tokens():
    qwen = tok_for("qwen3")
    assert qwen.single_token_id("<tool_call>") == 151657
    for text in ("<tool_call", "<tool_call> ", "hello", "", "<TOOL_CALL>"):
        assert qwen.single_token_id(text) is None
    assert not qwen.is_added(qwen.encode("hello")[0])
    # added_tokens() is a fresh dict: changing it changes nothing.
    qwen.added_tokens().clear()
    assert qwen.single_token_id("<think>") == 151667


def test_added_tokens_include_non_special_ones():
    qwen = tok_for("qwen3")
    added = qwen.added_tokens()
    assert len(added) == 26
    specials = {i for i, t in qwen.hf.get_added_tokens_decoder().items() if t.special}
    assert added["<tool_call>"] not in specials and added["<|im_end|>"] in specials


def test_chat_templates():
    qwen = tok_for("qwen3")
    jinja = model_path("qwen3/chat_template.jinja").read_text(encoding="utf-8")
    assert qwen.chat_template == jinja  # from tokenizer_config.json, identical to the file
    assert qwen.chat_templates == {"default": jinja}
    # gpt-oss's config has none: chat_template.jinja beside it is used.
    assert tok_for("gpt-oss").chat_template == model_path("gpt-oss/chat_template.jinja").read_text(
        encoding="utf-8"
    )
    assert tok_for("llama3").chat_template is None  # no template in config, no chat_template.jinja


def test_named_chat_templates_pick_default():
    hf = tok_for("qwen3").hf
    cfg = {
        "chat_template": [
            {"name": "tool_use", "template": "T"},
            {"name": "default", "template": "D"},
        ]
    }
    tok = load_tokenizer(hf, config=cfg)
    assert tok.chat_template == "D"
    assert tok.chat_templates == {"tool_use": "T", "default": "D"}
    assert load_tokenizer(hf).chat_template is None


def test_chat_template_file_and_generation_config(tmp_path):
    _link(tmp_path, model_path("qwen3"), ["tokenizer.json.xz"])
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|im_end|>"}))
    (tmp_path / "chat_template.jinja").write_text("{{ messages }}", encoding="utf-8")
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [7, 151643]}))
    tok = load_tokenizer(tmp_path)
    assert tok.chat_template == "{{ messages }}"
    assert tok.stop_token_ids == {7, 151643, 151645}
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": 9}))
    assert load_tokenizer(str(tmp_path)).stop_token_ids == {9, 151643, 151645}


def test_config_keyword_replaces_the_file():
    tok = load_tokenizer(model_path("qwen3"), config={"eos_token": {"content": "<|endoftext|>"}})
    assert tok.eos_token == "<|endoftext|>" and tok.chat_template is not None  # .jinja beside it
    assert tok.stop_token_ids == {151643, 151645}


def test_tokenizer_config_xz():
    g3 = tok_for("gemma3")
    assert g3.eos_token == "<end_of_turn>" and g3.bos_token == "<bos>"
    assert g3.model_max_length == 32768
    assert g3.chat_template.startswith("{{ bos_token }}")


def test_tokenizer_file_path():
    tok = load_tokenizer(model_path("qwen3/tokenizer.json.xz"))
    assert tok.path == model_path("qwen3") and tok.eos_token == "<|im_end|>"
    assert tok.encode(SAMPLES[1]) == tok_for("qwen3").encode(SAMPLES[1])


def test_vocab_merges_matches_tokenizer_json(qwen3_vocab_merges):
    ref, tok = tok_for("qwen3"), qwen3_vocab_merges
    for text in SAMPLES:
        assert tok.encode(text) == ref.encode(text), text
        ids = ref.encode(text)
        assert tok.decode(ids) == ref.decode(ids)
    assert tok.added_tokens() == ref.added_tokens()
    flags = {i: t.special for i, t in tok.hf.get_added_tokens_decoder().items()}
    assert flags == {i: t.special for i, t in ref.hf.get_added_tokens_decoder().items()}
    assert tok.stop_token_ids == ref.stop_token_ids
    assert tok.chat_template == ref.chat_template


def test_vocab_merges_with_wrong_added_ids(tmp_path):
    _link(tmp_path, model_path("qwen3"), ["vocab.json", "merges.txt"])
    cfg = json.loads(model_path("qwen3/tokenizer_config.json").read_text())
    cfg["added_tokens_decoder"] = {"5": {"content": "<x>", "special": True}}
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="<x>"):
        load_tokenizer(tmp_path)


def test_missing_directory(tmp_path):
    missing = tmp_path / "nope"
    with pytest.raises(TokenizerNotFoundError) as e:
        load_tokenizer(missing)
    assert isinstance(e.value, FileNotFoundError) and isinstance(e.value, ValueError)
    assert str(missing) in str(e.value) and "tokenizer.json" in str(e.value)


def test_directory_without_tokenizer_files(tmp_path):
    (tmp_path / "vocab.json").write_text("{}")  # merges.txt missing
    with pytest.raises(TokenizerNotFoundError) as e:
        load_tokenizer(tmp_path)
    msg = str(e.value)
    assert str(tmp_path) in msg
    assert "tokenizer.json, tokenizer.json.xz, or vocab.json + merges.txt" in msg
    assert "found: vocab.json" in msg


def test_unreadable_config(tmp_path):
    _link(tmp_path, model_path("qwen3"), ["tokenizer.json.xz"])
    (tmp_path / "tokenizer_config.json").write_text("{not json")
    with pytest.raises(ValueError, match="tokenizer_config.json"):
        load_tokenizer(tmp_path)


def test_tokenizer_passes_through():
    qwen = tok_for("qwen3")
    assert load_tokenizer(qwen) is qwen
    again = load_tokenizer(qwen, config={"eos_token": "<|endoftext|>"})
    assert again.hf is qwen.hf and again.eos_token == "<|endoftext|>"


def test_wrong_type():
    with pytest.raises(TypeError, match="tokenizers.Tokenizer"):
        load_tokenizer(42)


def test_gemma4_vocab_test_vectors():
    """The Gemma 4 test tokenizer, wrapped, reproduces llama.cpp's Gemma 4 vectors."""
    tok = tok_for("gemma4")
    inputs = model_path("gemma4/vocab_test.inp").read_text(encoding="utf-8").split("\n__ggml_vocab_test__\n")
    outputs = model_path("gemma4/vocab_test.out").read_text(encoding="utf-8").rstrip("\n").split("\n")
    assert len(inputs) == len(outputs) == 46
    for text, line in zip(inputs, outputs):
        assert tok.encode(text) == [int(x) for x in line.split()], repr(text)
