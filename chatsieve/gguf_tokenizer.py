"""Builds a `tokenizers.Tokenizer` from the vocabulary a GGUF file carries in its metadata.

`gguf_tokenizer(meta)` reads `tokenizer.ggml.*` (tokens, token types, merges or scores, the
pre-tokenizer name, bos/eos ids) and returns the tokenizer plus the config it implies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .gguf import (
    TOKEN_CONTROL,
    TOKEN_NORMAL,
    TOKEN_USER_DEFINED,
    GGUFError,
)

__all__ = ["PRE_TOKENIZERS", "SUPPORTED_MODELS", "GGUFTokenizer", "gguf_tokenizer"]

SUPPORTED_MODELS = ("gpt2", "llama", "gemma4")

# Split patterns of the byte-level BPE pre-tokenizers, by llama.cpp's `tokenizer.ggml.pre`
# name: the regexes of each model's own tokenizer.json (which llama.cpp's src/llama-vocab.cpp
# rewrites for its regex engine), applied one after the other, matches and the text between
# them kept as pieces. None: GPT-2's own ByteLevel split.
_CONTRACTIONS = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)"
_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_LLAMA3 = (
    _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2 = _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
_QWEN35 = (
    _CONTRACTIONS
    + r"|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_CJK = "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+"


@dataclass(frozen=True)
class PreTokenizer:
    """How a byte-level BPE family splits text before the merges."""

    splits: tuple[str, ...] | None  # None: GPT-2's ByteLevel regex
    digits: str = ""  # "each": every digit alone first; "runs": digit runs apart
    punctuation: bool = False  # runs of punctuation apart first (Falcon)
    nfc: bool = False
    ignore_merges: bool = False  # a whole piece that is a token is that token (Llama 3)


PRE_TOKENIZERS: dict[str, PreTokenizer] = {
    "gpt-2": PreTokenizer(None),
    "mpt": PreTokenizer(None, nfc=True),
    "starcoder": PreTokenizer(None, digits="each"),
    "refact": PreTokenizer(None, digits="each"),
    "command-r": PreTokenizer(None, digits="each", nfc=True),
    "falcon": PreTokenizer(None, punctuation=True, digits="runs"),
    "llama-bpe": PreTokenizer((_LLAMA3,), ignore_merges=True),
    "llama3": PreTokenizer((_LLAMA3,), ignore_merges=True),
    "qwen2": PreTokenizer((_QWEN2,), nfc=True),
    "deepseek-r1-qwen": PreTokenizer((_QWEN2,), nfc=True),
    "qwen35": PreTokenizer((_QWEN35,)),  # no NFC: its vectors keep decomposed accents
    "deepseek-llm": PreTokenizer(
        (
            r"[\r\n]",
            "\\s?[A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af\u0370-\u0373\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1\u03a3-\u03f5\u03f7-\u0481\u048a-\u052f\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba\u1cbd-\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45\u1f48-\u1f4d\u1f50-\u1f57\u1f59\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe\u1fc2-\u1fc4\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc\u2102\u2107\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-\u2134\u2139\u213c-\u213f\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee\u2cf2\u2cf3\ua640-\ua66d\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf\ufb00-\ufb06\ufb13-\ufb17\uff21-\uff3a\uff41-\uff5a\U00010400-\U0001044f\U000104b0-\U000104d3\U000104d8-\U000104fb\U00010c80-\U00010cb2\U00010cc0-\U00010cf2\U000118a0-\U000118df\U0001e900-\U0001e943]+",
            "\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+",
            r"\s+$",
            _CJK,
            r"\p{N}+",
        )
    ),
    "deepseek-coder": PreTokenizer((r"[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", _CJK, r"\p{N}")),
}


@dataclass(frozen=True)
class GGUFTokenizer:
    """What a GGUF's vocabulary makes: the `tokenizers.Tokenizer` and the config it implies
    (bos/eos/unk/pad token text, chat templates) and the ids that end a generation."""

    hf: Any
    config: dict
    stop_ids: tuple[int, ...]


def _strings(meta: dict, key: str, where: str, n: int | None = None) -> list:
    value = meta.get(key)
    if not isinstance(value, list) or (n is not None and len(value) != n):
        want = f"a list of {n}" if n is not None else "a list"
        raise GGUFError(f"{where}: {key} is missing or not {want} (damaged vocabulary?)")
    return value


def _split_merges(merges: list[str], where: str) -> list[tuple[str, str]]:
    out = []
    for m in merges:
        cut = m.find(" ", 1)  # as llama.cpp reads them: the first space after the first character
        if cut < 0:
            raise GGUFError(f"{where}: tokenizer.ggml.merges has an entry without a space: {m!r}")
        out.append((m[:cut], m[cut + 1 :]))
    return out


def _score_merges(tokens: list[str], types: list[int], scores: list[float]) -> list[tuple[str, str]]:
    """SentencePiece BPE as merges: every split of a normal piece into two normal pieces,
    ranked by the whole piece's score (highest first), which is the order SentencePiece
    (and llama.cpp's SPM tokenizer) joins neighbours in."""
    normal = {t: i for i, t in enumerate(tokens) if types[i] in (TOKEN_NORMAL, TOKEN_USER_DEFINED)}
    order = sorted(normal.values(), key=lambda i: (-scores[i], i))
    out: list[tuple[str, str]] = []
    for i in order:
        piece = tokens[i]
        splits = []
        for cut in range(1, len(piece)):
            left, right = normal.get(piece[:cut]), normal.get(piece[cut:])
            if left is not None and right is not None:
                splits.append((left, right, cut))
        for _, _, cut in sorted(splits):
            out.append((piece[:cut], piece[cut:]))
    return out


def _byte_level_pre(tk, pre: PreTokenizer):
    parts = []
    if pre.punctuation:
        parts.append(tk.pre_tokenizers.Punctuation(behavior="contiguous"))
    if pre.digits == "each":
        parts.append(tk.pre_tokenizers.Digits(individual_digits=True))
    if pre.splits is None:
        parts.append(tk.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True))
    else:
        for pattern in pre.splits:
            parts.append(tk.pre_tokenizers.Split(tk.Regex(pattern), behavior="isolated", invert=False))
        parts.append(tk.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False))
    if pre.digits == "runs":
        parts.append(tk.pre_tokenizers.Digits(individual_digits=False))
        parts.append(tk.pre_tokenizers.Split(tk.Regex("[0-9][0-9][0-9]"), behavior="isolated", invert=False))
    return parts[0] if len(parts) == 1 else tk.pre_tokenizers.Sequence(parts)


def gguf_tokenizer(tk: Any, meta: dict[str, Any], *, where: str = "the GGUF") -> GGUFTokenizer:
    """The tokenizer of a GGUF's `tokenizer.ggml.*` metadata (`tk`: the tokenizers module).

    Raises GGUFError naming the vocabulary type (or pre-tokenizer) when it is not one this
    builds: `gpt2` (byte-level BPE) with a known `tokenizer.ggml.pre`, `llama`
    (SentencePiece with scores and byte fallback), `gemma4` (SentencePiece-style BPE).
    """
    model = meta.get("tokenizer.ggml.model")
    if model not in SUPPORTED_MODELS:
        raise GGUFError(
            f"{where}: tokenizer type {model!r} (tokenizer.ggml.model) is not supported; "
            f"supported: {', '.join(SUPPORTED_MODELS)}. Use --model-dir with the model's tokenizer.json instead"
        )
    tokens = _strings(meta, "tokenizer.ggml.tokens", where)
    n = len(tokens)
    types = meta.get("tokenizer.ggml.token_type")
    types = types if isinstance(types, list) and len(types) == n else [TOKEN_NORMAL] * n
    unk_id = meta.get("tokenizer.ggml.unknown_token_id")
    unk = tokens[unk_id] if isinstance(unk_id, int) and 0 <= unk_id < n else None
    vocab = {t: i for i, t in enumerate(tokens)}
    if len(vocab) != n:
        raise GGUFError(f"{where}: tokenizer.ggml.tokens holds the same token twice")

    add_bos = meta.get("tokenizer.ggml.add_bos_token")
    decoders = tk.decoders
    if model == "gpt2":
        pre_name = meta.get("tokenizer.ggml.pre") or "default"
        pre = PRE_TOKENIZERS.get(pre_name)
        if pre is None:
            raise GGUFError(
                f"{where}: byte-level BPE with pre-tokenizer {pre_name!r} (tokenizer.ggml.pre) is not "
                f"supported; supported: {', '.join(sorted(PRE_TOKENIZERS))}. Use --model-dir with the "
                "model's tokenizer.json instead"
            )
        merges = _split_merges(_strings(meta, "tokenizer.ggml.merges", where), where)
        hf = tk.Tokenizer(tk.models.BPE(vocab, merges, ignore_merges=pre.ignore_merges))
        if pre.nfc:
            hf.normalizer = tk.normalizers.NFC()
        hf.pre_tokenizer = _byte_level_pre(tk, pre)
        hf.decoder = decoders.ByteLevel()
        add_bos = bool(add_bos) if add_bos is not None else pre_name in ("llama-bpe", "llama3")
    else:
        if model == "gemma4":
            merges = _split_merges(_strings(meta, "tokenizer.ggml.merges", where), where)
            space_prefix = bool(meta.get("tokenizer.ggml.add_space_prefix", False))
            add_bos = True  # llama.cpp forces it for Gemma 4 (ggml-org/llama.cpp#21500)
        else:
            scores = _strings(meta, "tokenizer.ggml.scores", where, n)
            merges = _score_merges(tokens, types, scores)
            space_prefix = bool(meta.get("tokenizer.ggml.add_space_prefix", True))
            add_bos = True if add_bos is None else bool(add_bos)
        hf = tk.Tokenizer(tk.models.BPE(vocab, merges, unk_token=unk, fuse_unk=True, byte_fallback=True))
        steps = [tk.normalizers.Prepend("\u2581")] if space_prefix else []
        steps.append(tk.normalizers.Replace(" ", "\u2581"))
        hf.normalizer = steps[0] if len(steps) == 1 else tk.normalizers.Sequence(steps)
        chain = [decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()]
        if space_prefix:
            chain.append(decoders.Strip(" ", 1, 0))
        hf.decoder = decoders.Sequence(chain)

    # Control tokens are special added tokens (never made from text by the merges);
    # user-defined ones are added tokens matched in text, as their tokenizer.json has them.
    added = [
        tk.AddedToken(tokens[i], special=types[i] == TOKEN_CONTROL, normalized=False)
        for i in range(n)
        if types[i] in (TOKEN_CONTROL, TOKEN_USER_DEFINED)
    ]
    hf.add_tokens(added)

    def token(key: str) -> str | None:
        tid = meta.get(f"tokenizer.ggml.{key}_token_id")
        return tokens[tid] if isinstance(tid, int) and 0 <= tid < n else None

    bos, eos = token("bos"), token("eos")
    specials = []
    if add_bos and bos is not None:
        specials.append(bos)
    add_eos = bool(meta.get("tokenizer.ggml.add_eos_token")) and eos is not None
    if add_eos:
        specials.append(eos)
    if specials:
        single = ([f"{bos}:0"] if add_bos and bos else []) + ["$A:0"] + ([f"{eos}:0"] if add_eos else [])
        hf.post_processor = tk.processors.TemplateProcessing(
            single=single, special_tokens=[(t, vocab[t]) for t in dict.fromkeys(specials)]
        )

    config: dict[str, Any] = {
        f"{key}_token": text
        for key in ("bos", "eos", "unk", "pad")
        if (text := token("padding" if key == "pad" else "unknown" if key == "unk" else key)) is not None
    }
    arch = meta.get("general.architecture")
    context = meta.get(f"{arch}.context_length")
    if isinstance(context, int) and context > 0:
        config["model_max_length"] = context  # trained context (an engine may run a shorter one)
    templates = _chat_templates(meta)
    if templates:
        config["chat_template"] = templates
    stop_ids = tuple(
        dict.fromkeys(
            tid
            for key in ("eos", "eot", "eom")
            if isinstance(tid := meta.get(f"tokenizer.ggml.{key}_token_id"), int) and 0 <= tid < n
        )
    )
    return GGUFTokenizer(hf, config, stop_ids)


def _chat_templates(meta: dict) -> list[dict[str, str]]:
    """The default chat template and the named ones (`tokenizer.chat_template.<name>`)."""
    out = []
    if isinstance(meta.get("tokenizer.chat_template"), str):
        out.append({"name": "default", "template": meta["tokenizer.chat_template"]})
    names = meta.get("tokenizer.chat_templates")
    for name in names if isinstance(names, list) else ():
        text = meta.get(f"tokenizer.chat_template.{name}")
        if isinstance(name, str) and isinstance(text, str):
            out.append({"name": name, "template": text})
    return out

