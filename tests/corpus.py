"""A varied text sample for comparing two tokenizers: this repository's fixtures and docs
(chat markup, code, CJK, emoji) and seeded random strings over scripts, marks, digits and
whitespace."""

from __future__ import annotations

import random
from pathlib import Path

_REPO = Path(__file__).resolve().parent.parent


def varied_sample(extra: list[str] | None = None) -> list[str]:
    texts = [p.read_text(encoding="utf-8") for p in sorted((_REPO / "tests" / "fixtures").rglob("*.yaml"))]
    texts += [p.read_text(encoding="utf-8") for p in (_REPO / "README.md", *sorted((_REPO / "docs").glob("*.md")))]
    texts += extra or []
    rng = random.Random(12)
    alphabet = (
        "abcXYZ 0123456789\n\t\r  éüßñ中文字符日本語のテキスト한국어😀👍🏽🏳️‍🌈'\"<>|{}[]()_-=+.,;:!?"
        "\u0301\u200b\u00a0ΑβγДжШ١٢٣ёЁ'S'LL"
    )
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 80))) for _ in range(400)]
    texts += ["".join(chr(rng.randint(32, 0xD7FF)) for _ in range(rng.randint(1, 40))) for _ in range(200)]
    return texts
