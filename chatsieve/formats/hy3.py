"""Hunyuan HY3 with a `token_suffix`: some HY3 tokenizers declare a `token_suffix` in
their tokenizer config, and every HY3 control tag then carries it (`<tool_calls{S}>`,
`<tool_call{S}>`, `<tool_sep{S}>`, `<arg_key{S}>`, `<arg_value{S}>` and their closing
forms; `<think{S}>`/`</think{S}>`). `hy3_format(suffix)` builds that family's spec;
with an empty suffix it is `hunyuan`. Register it to parse by name:

    from chatsieve.formats import register
    from chatsieve.formats.hy3 import hy3_format
    register(hy3_format("SUFFIX", name="hy3_mine"))
"""

from __future__ import annotations

import dataclasses

from ..args.xml_kv import xml_kv_codec
from ..spec import FormatSpec
from .hunyuan import HUNYUAN, HUNYUAN_SYNTAX


def _tag(tag: str, suffix: str) -> str:
    """`<tool_call>` -> `<tool_call{suffix}>`."""
    return tag[:-1] + suffix + ">" if tag.startswith("<") and tag.endswith(">") and "|" not in tag else tag


def hy3_format(suffix: str, *, name: str | None = None) -> FormatSpec:
    """The `hunyuan` (HY3) spec with `suffix` appended inside each of its tags."""
    if not suffix:
        return HUNYUAN
    if any(c in suffix for c in "<>\n"):
        raise ValueError(f"hy3_format: a token suffix cannot hold '<', '>' or a newline: {suffix!r}")
    syn = HUNYUAN_SYNTAX
    syntax = dataclasses.replace(
        syn,
        call_open=_tag(syn.call_open, suffix),
        name_close=tuple(_tag(t, suffix) for t in syn.name_close),
        call_close=_tag(syn.call_close, suffix),
        key_open=_tag(syn.key_open, suffix),
        key_close=_tag(syn.key_close, suffix),
        value_open=_tag(syn.value_open, suffix),
        value_close=_tag(syn.value_close, suffix),
        structural=tuple(_tag(t, suffix) for t in syn.structural),
        openers=tuple(_tag(t, suffix) for t in syn.openers),
        closers=tuple(_tag(t, suffix) for t in syn.closers),
    )

    def tags(group: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(_tag(t, suffix) for t in group)

    return dataclasses.replace(
        HUNYUAN,
        name=name or f"hy3{suffix}",
        description=f"Tencent Hunyuan HY3 with token suffix {suffix!r}",
        aliases=(),
        reasoning_open=tags(HUNYUAN.reasoning_open),
        reasoning_close=tags(HUNYUAN.reasoning_close),
        call_open=tags(HUNYUAN.call_open),
        call_close=tags(HUNYUAN.call_close),
        codec=xml_kv_codec("Hy3SuffixCallCodec", syntax),
        strip=HUNYUAN.strip + tags(HUNYUAN.strip),  # `<answer>` seen both ways: unverified
    )
