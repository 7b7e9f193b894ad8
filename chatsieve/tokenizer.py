"""Loads a Hugging Face tokenizer (a directory or a `tokenizers.Tokenizer`) into `Tokenizer`.

`Tokenizer` wraps the `tokenizers` object with what chatsieve needs: special and stop
tokens, added tokens, and the chat template. Every file is read once; nothing is cached
globally.
"""

from __future__ import annotations

import functools
import json
import lzma
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .byte_level import gpt2_byte_decoder
from .gguf import MAGIC as GGUF_MAGIC
from .gguf import read_metadata
from .gguf_tokenizer import gguf_tokenizer
from .tiktoken_bpe import find_tiktoken_file, tiktoken_tokenizer

if TYPE_CHECKING:
    import tokenizers

__all__ = [
    "END_OF_GENERATION_TOKENS",
    "Tokenizer",
    "TokenizerNotFoundError",
    "load_gguf_tokenizer",
    "load_tokenizer",
]

# Tokens that end a generation in some family; each one that is a *special* added token
# of the loaded vocabulary joins `stop_token_ids` (special only: Gemma's vocabulary has a
# non-special HTML `</s>`).
#   <|im_end|>, <|endoftext|>            Qwen / ChatML, GPT-style end of text
#   <turn|>, <eos>, <end_of_turn>        Gemma 4, Gemma, Gemma 2/3
#   <|eot_id|>, <|eom_id|>, <|end_of_text|>   Llama 3 (end of turn, end of message
#                                        after a tool call, end of text)
#   <|eot|>, <|eom|>                     Llama 4 (the same two)
#   <|return|>, <|call|>                 gpt-oss (final answer; a tool call also ends
#                                        the generation with <|call|>)
#   <｜end▁of▁sentence｜>                DeepSeek
#   </s>                                 Llama 2 / Mistral
# `[/INST]` is deliberately absent: it closes the user turn, it does not end a generation.
END_OF_GENERATION_TOKENS: tuple[str, ...] = (
    "<|im_end|>",
    "<|endoftext|>",
    "<turn|>",
    "<eos>",
    "<end_of_turn>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<|end_of_text|>",
    "<|eot|>",
    "<|eom|>",
    "<|return|>",
    "<|call|>",
    "<｜end▁of▁sentence｜>",
    "</s>",
)

# transformers stores "no limit" as int(1e30); anything this large means no limit.
_NO_LIMIT = 10**18

# Qwen2/Qwen3 pre-tokenizer split (from their tokenizer.json); GPT-2-style vocabularies
# use ByteLevel's own regex instead.
_QWEN2_SPLIT = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)


# The decoder under which `Tokenizer.piecewise` holds (Gemma 2/3/4).
_PIECEWISE_DECODER = {
    "type": "Sequence",
    "decoders": [
        {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
        {"type": "ByteFallback"},
        {"type": "Fuse"},
    ],
}
_UNSET = object()
# every spelling of a byte-fallback token, as the decoder's hex parse accepts it
_BYTE_SPELLINGS = tuple(f"<0x{a}{b}>" for a in "0123456789abcdefABCDEF+" for b in "0123456789abcdefABCDEF")

_LOOKED_FOR = "tokenizer.json, tokenizer.json.xz, or vocab.json + merges.txt, or a tiktoken file"


class TokenizerNotFoundError(FileNotFoundError, ValueError):
    """A tokenizer directory or its tokenizer files are missing."""



def _import_tokenizers():
    try:
        import tokenizers
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError(
            "chatsieve needs the 'tokenizers' package to load a tokenizer; "
            "install it with: pip install 'chatsieve[tokenizers]'"
        ) from e
    return tokenizers


def _token_content(value: Any) -> str | None:
    """A config token entry: a string, or a dict like {"content": ..., ...}."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


class Tokenizer:
    """A `tokenizers.Tokenizer` plus its config: special tokens, stop ids, chat template."""

    def __init__(
        self,
        hf: tokenizers.Tokenizer,
        *,
        path: Path | None = None,
        config: dict | None = None,
        generation_config: dict | None = None,
        chat_template_file: str | None = None,
    ) -> None:
        self.hf = hf
        self.path = path
        self.config: dict = config or {}
        self.generation_config: dict = generation_config or {}
        cfg = self.config

        self.bos_token: str | None = _token_content(cfg.get("bos_token"))
        self.eos_token: str | None = _token_content(cfg.get("eos_token"))
        mml = cfg.get("model_max_length")
        self.model_max_length: int | None = (
            int(mml) if isinstance(mml, int | float) and 0 < mml < _NO_LIMIT else None
        )
        self.truncation_side: str = cfg.get("truncation_side") or "right"

        # All named templates (a list of {name, template} in newer configs); the
        # "default" one (or the only string) is `chat_template`.
        self.chat_templates: dict[str, str] = {}
        raw = cfg.get("chat_template")
        if isinstance(raw, str):
            self.chat_templates["default"] = raw
        elif isinstance(raw, list):
            for item in raw:
                if isinstance(item, dict) and isinstance(item.get("template"), str):
                    self.chat_templates[str(item.get("name", "default"))] = item["template"]
        elif isinstance(raw, dict):
            self.chat_templates.update({k: v for k, v in raw.items() if isinstance(v, str)})
        if not self.chat_templates and chat_template_file is not None:
            self.chat_templates["default"] = chat_template_file
        self.chat_template: str | None = self.chat_templates.get("default")

        decoder = sorted(hf.get_added_tokens_decoder().items())
        self._added: dict[str, int] = {tok.content: i for i, tok in decoder}
        self._added_ids: frozenset[int] = frozenset(self._added.values())
        self._special_ids: frozenset[int] = frozenset(i for i, tok in decoder if tok.special)
        self.stop_token_ids: frozenset[int] = frozenset(self._find_stop_token_ids())
        self.byte_level = type(hf.decoder).__name__ == "ByteLevel"
        self._byte_map = gpt2_byte_decoder() if self.byte_level else None
        self._token_bytes: dict[int, bytes] = {}
        self.plain_texts: dict[int, str | None] = {}  # memo of `plain_text`

    def _find_stop_token_ids(self) -> Iterable[int]:
        if self.eos_token is not None:
            i = self.token_to_id(self.eos_token)
            if i is not None:
                yield i
        gen_eos = self.generation_config.get("eos_token_id")
        if isinstance(gen_eos, int):
            yield gen_eos
        elif isinstance(gen_eos, list):
            yield from (i for i in gen_eos if isinstance(i, int))
        for text in END_OF_GENERATION_TOKENS:
            i = self._added.get(text)
            if i is not None and i in self._special_ids:
                yield i

    # -- encoding ---------------------------------------------------------------------

    def encode(self, text: str, *, add_special_tokens: bool = False) -> list[int]:
        return self.hf.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids: Sequence[int], *, skip_special_tokens: bool = False) -> str:
        return self.hf.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def token_to_id(self, token: str) -> int | None:
        return self.hf.token_to_id(token)

    def id_to_token(self, id: int) -> str | None:
        return self.hf.id_to_token(id)

    # -- added tokens -----------------------------------------------------------------

    def added_tokens(self) -> dict[str, int]:
        """content -> id of every added token (special or not); a fresh dict."""
        return dict(self._added)

    def is_added(self, id: int) -> bool:
        return id in self._added_ids

    def token_bytes(self, token_id: int) -> bytes:
        """A token's raw bytes, as the decoder would produce them (memoised per tokenizer):
        byte-level pieces through GPT-2's byte alphabet (a piece outside it verbatim),
        `<0xNN>` byte-fallback pieces as that byte, U+2581 as a space, added tokens as
        their text."""
        b = self._token_bytes.get(token_id)
        if b is None:
            b = self._token_bytes[token_id] = self._raw_bytes(token_id)
        return b

    def _raw_bytes(self, token_id: int) -> bytes:
        piece = self.id_to_token(token_id)
        if piece is None:
            return b""
        if token_id in self._added_ids:
            return piece.encode("utf-8")
        if self._byte_map is not None:
            if all(c in self._byte_map for c in piece):
                return bytes(self._byte_map[c] for c in piece)
            return piece.encode("utf-8")
        if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
            try:
                return bytes([int(piece[3:5], 16)])
            except ValueError:
                pass
        return piece.replace("\u2581", " ").encode("utf-8")

    def plain_text(self, token_id: int) -> str | None:
        """The text an ordinary token makes on its own when nothing is pending before it,
        or None: an added token, a byte that needs its neighbours (a byte-fallback
        `<0xHH>`, or bytes that are not whole UTF-8 characters), or no text at all. Holds
        for byte-level decoders and `piecewise` ones only: the detokenizer asks for no
        other. Memoised in `plain_texts`, which the detokenizer reads directly."""
        text = self.plain_texts.get(token_id, _UNSET)
        if text is _UNSET:
            text = self.plain_texts[token_id] = self._plain_text(token_id)
        return text

    def _plain_text(self, token_id: int) -> str | None:
        if token_id in self._added_ids:
            return None
        if self.byte_level:
            try:
                return self.token_bytes(token_id).decode("utf-8") or None
            except UnicodeDecodeError:
                return None
        if token_id in self.byte_fallback_ids:
            return None
        piece = self.id_to_token(token_id)
        if piece is None:
            return None
        return piece.replace("\u2581", " ") or None

    @property
    def piecewise(self) -> bool:
        """Whether decode() is token by token under a SentencePiece byte-fallback decoder
        (Gemma's: U+2581 -> space, byte fallback, fuse): each token's text is its piece
        with U+2581 as a space, except that a run of `<0xHH>` tokens decodes as a whole
        (invalid UTF-8 anywhere in it makes every byte U+FFFD). Read from the decoder on
        each call: a caller may swap `hf.decoder`."""
        decoder = self.hf.decoder
        if decoder is None:
            return False
        try:
            state = json.loads(decoder.__getstate__())
        except (AttributeError, TypeError, ValueError):
            return False
        return state == _PIECEWISE_DECODER and not self._added_byte_spelling

    @functools.cached_property
    def _added_byte_spelling(self) -> bool:
        """An added token looks like a byte token: decode() would fold it into byte runs."""
        return any(t in self._added for t in _BYTE_SPELLINGS)

    @property
    def special_ids(self) -> frozenset[int]:
        """Ids of the added tokens marked special: control tokens, never shown as text."""
        return self._special_ids

    def single_token_id(self, text: str) -> int | None:
        """The id if `text` is exactly the content of one added token, else None."""
        return self._added.get(text)

    @functools.cached_property
    def byte_fallback_ids(self) -> frozenset[int]:
        """Ids of `<0xHH>` byte tokens when the decoder turns them back into bytes.

        Such a decoder (SentencePiece-style byte fallback, e.g. Gemma) decodes a run of
        byte tokens as a whole: if the run is not valid UTF-8, every byte becomes U+FFFD.
        A byte token is `<0xHH>` with HH as its u8::from_str_radix(_, 16) reads it (either
        case, a leading '+').
        """
        decoder = self.hf.decoder
        if decoder is None or "ByteFallback" not in repr(decoder):
            return frozenset()
        ids = (self.hf.token_to_id(t) for t in _BYTE_SPELLINGS)
        return frozenset(i for i in ids if i is not None and i not in self._added_ids)

    def __repr__(self) -> str:
        where = f" from {self.path}" if self.path else ""
        return f"<Tokenizer{where}: vocab {self.hf.get_vocab_size()}, eos {self.eos_token!r}>"


# -- loading ----------------------------------------------------------------------------


def _read_text(path: Path) -> str:
    if path.suffix == ".xz":
        with lzma.open(path, "rt", encoding="utf-8") as f:
            return f.read()
    return path.read_text(encoding="utf-8")


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(_read_text(path))
    except (ValueError, lzma.LZMAError) as e:
        raise ValueError(f"cannot read {path}: {e}") from e
    if not isinstance(data, dict):
        raise ValueError(f"cannot read {path}: expected a JSON object")
    return data


def _first_existing(directory: Path, names: Iterable[str]) -> Path | None:
    for name in names:
        p = directory / name
        if p.is_file():
            return p
    return None


def _byte_level_bpe(tk, vocab: Path, merges: Path, config: dict):
    """A byte-level BPE from vocab.json + merges.txt, with the config's added tokens.

    Qwen2/Qwen3 vocabularies get their NFC normalizer and split regex; others the
    GPT-2 ByteLevel pre-tokenizer.
    """
    hf = tk.Tokenizer(tk.models.BPE.from_file(str(vocab), str(merges)))
    byte_level = tk.pre_tokenizers.ByteLevel
    if str(config.get("tokenizer_class", "")).startswith("Qwen2"):
        hf.normalizer = tk.normalizers.NFC()
        hf.pre_tokenizer = tk.pre_tokenizers.Sequence(
            [
                tk.pre_tokenizers.Split(tk.Regex(_QWEN2_SPLIT), behavior="isolated", invert=False),
                byte_level(add_prefix_space=False, use_regex=False),
            ]
        )
    else:
        hf.pre_tokenizer = byte_level(
            add_prefix_space=bool(config.get("add_prefix_space", False)), use_regex=True
        )
    hf.decoder = tk.decoders.ByteLevel()
    entries = config.get("added_tokens_decoder") or {}
    for key, entry in sorted(entries.items(), key=lambda kv: int(kv[0])):
        token = tk.AddedToken(
            entry["content"],
            single_word=entry.get("single_word", False),
            lstrip=entry.get("lstrip", False),
            rstrip=entry.get("rstrip", False),
            normalized=entry.get("normalized", False),
            special=entry.get("special", False),
        )
        # add_special_tokens would mark every token special; keep the config's flag.
        if entry.get("special", False):
            hf.add_special_tokens([token])
        else:
            hf.add_tokens([token])
        got = hf.token_to_id(entry["content"])
        if got != int(key):
            raise ValueError(
                f"added token {entry['content']!r} got id {got}, but tokenizer_config.json "
                f"says {key}; {vocab} and tokenizer_config.json do not belong together"
            )
    return hf


def load_tokenizer(
    path: str | Path | tokenizers.Tokenizer | Tokenizer, *, config: dict | None = None
) -> Tokenizer:
    """Load a tokenizer directory, tokenizer.json file or GGUF file, or wrap a `tokenizers.Tokenizer`.

    A directory holds `tokenizer.json` (or `tokenizer.json.xz`), or `vocab.json` +
    `merges.txt`, or a tiktoken BPE file (`tiktoken.model`, `*.tiktoken`, a text
    `tokenizer.model`: Kimi K2, Hunyuan, Llama 4; converted to a `tokenizers` BPE with
    the same ids, see tiktoken_bpe.py); optionally `tokenizer_config.json[.xz]`, `generation_config.json`
    and `chat_template.jinja`. `config`, if given, is used instead of
    tokenizer_config.json. A `Tokenizer` is returned as it is (re-wrapped with
    `config` if one is given). A GGUF file (llama.cpp's model format) gives the vocabulary
    and chat template embedded in its metadata (see `load_gguf_tokenizer`).
    """
    if isinstance(path, Tokenizer) and config is None:
        return path
    tk = _import_tokenizers()
    if isinstance(path, Tokenizer):
        path = path.hf
    if isinstance(path, tk.Tokenizer):
        return Tokenizer(path, config=dict(config) if config is not None else {})
    if not isinstance(path, str | Path):
        raise TypeError(
            f"load_tokenizer expects a directory path or a tokenizers.Tokenizer, got {type(path).__name__}"
        )

    given = Path(path)
    if given.is_file() and _is_gguf(given):
        return load_gguf_tokenizer(given, config=config)
    tokenizer_file: Path | None = None
    if given.is_file():
        tokenizer_file, directory = given, given.parent
    else:
        directory = given
        if not directory.is_dir():
            raise TokenizerNotFoundError(
                f"tokenizer directory not found: {directory} (expected a directory holding "
                f"{_LOOKED_FOR})"
            )

    if config is None:
        cfg_file = _first_existing(directory, ("tokenizer_config.json", "tokenizer_config.json.xz"))
        config = _read_json(cfg_file) if cfg_file else {}
    else:
        config = dict(config)

    if tokenizer_file is None:
        tokenizer_file = _first_existing(directory, ("tokenizer.json", "tokenizer.json.xz"))
    generation_config: dict = {}
    vocab, merges = directory / "vocab.json", directory / "merges.txt"
    tiktoken_file = None if tokenizer_file is not None else find_tiktoken_file(directory)
    if tokenizer_file is not None:
        try:
            hf = tk.Tokenizer.from_str(_read_text(tokenizer_file))
        except Exception as e:
            raise ValueError(f"cannot load tokenizer from {tokenizer_file}: {e}") from e
    elif vocab.is_file() and merges.is_file():
        hf = _byte_level_bpe(tk, vocab, merges, config)
    elif tiktoken_file is not None:
        hf, implied = tiktoken_tokenizer(tk, tiktoken_file, config)
        stops = implied.pop("stop_tokens", ())
        config = {**implied, **config}
        stop_ids = [hf.token_to_id(t) for t in stops]
        generation_config = {"eos_token_id": [i for i in stop_ids if i is not None]} if stop_ids else {}
    else:
        present = sorted(p.name for p in directory.iterdir())
        raise TokenizerNotFoundError(
            f"no tokenizer files in {directory}: looked for {_LOOKED_FOR}; "
            f"found: {', '.join(present) or 'nothing'}"
        )

    gen_file = directory / "generation_config.json"
    if gen_file.is_file():
        generation_config = _read_json(gen_file)
    template_file = directory / "chat_template.jinja"
    chat_template_file = None
    if not config.get("chat_template") and template_file.is_file():
        chat_template_file = template_file.read_text(encoding="utf-8")
    return Tokenizer(
        hf,
        path=directory,
        config=config,
        generation_config=generation_config,
        chat_template_file=chat_template_file,
    )


def _is_gguf(path: Path) -> bool:
    with path.open("rb") as f:
        return f.read(4) == GGUF_MAGIC


def load_gguf_tokenizer(path: str | Path, *, config: dict | None = None) -> Tokenizer:
    """The tokenizer embedded in a GGUF file: its vocabulary (byte-level BPE, SentencePiece,
    Gemma 4), special tokens, `add_bos_token` and chat templates. Only the metadata is read,
    never the tensors. `config` entries override what the GGUF implies. A vocabulary type
    chatsieve cannot build raises GGUFError naming it."""
    path = Path(path)
    built = gguf_tokenizer(_import_tokenizers(), read_metadata(path), where=str(path))
    merged = {**built.config, **(config or {})}
    return Tokenizer(
        built.hf,
        path=path,
        config=merged,
        generation_config={"eos_token_id": list(built.stop_ids)} if built.stop_ids else {},
    )


def derive_gemma4_tokenizer(gemma3_dir: str | Path, special_tokens: str | Path) -> Tokenizer:
    """A Gemma 4 tokenizer made from Gemma 3's: Gemma 4 keeps Gemma 3's vocabulary and
    gives control meanings to placeholder pieces at the same ids. `special_tokens` is a
    JSON table `{"tokens": {id: {"content", "gemma3_piece"}}}` naming the renamed pieces
    (shared/models/gemma4/special_tokens.json); its README shows this reproduces the
    Gemma 4 tokenizer test vectors."""
    tk = _import_tokenizers()
    gemma3 = Path(gemma3_dir)
    tok_file = _first_existing(gemma3, ("tokenizer.json", "tokenizer.json.xz"))
    if tok_file is None:
        raise TokenizerNotFoundError(f"no tokenizer.json(.xz) in {gemma3}")
    data = json.loads(_read_text(tok_file))
    table = _read_json(Path(special_tokens))["tokens"]
    renamed = {int(i): t["content"] for i, t in table.items() if t.get("gemma3_piece")}
    vocab = data["model"]["vocab"]
    piece_of = {i: piece for piece, i in vocab.items()}
    for i, content in renamed.items():
        del vocab[piece_of[i]]
        vocab[content] = i
    for added in data["added_tokens"]:
        if added["id"] in renamed:
            added["content"] = renamed[added["id"]]
    return Tokenizer(tk.Tokenizer.from_str(json.dumps(data)), config={})
