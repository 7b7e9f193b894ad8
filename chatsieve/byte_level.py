"""GPT-2's byte-level alphabet: the printable character each byte is spelled with in a byte-level
BPE vocabulary, shared by the tokenizer loaders (tokenizer.py, tiktoken_bpe.py)."""

from __future__ import annotations


def gpt2_byte_decoder() -> dict[str, int]:
    """The GPT-2 byte-level alphabet: printable stand-in character -> byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), 256)]
    chars = list(printable)
    n = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(printable, chars)}
