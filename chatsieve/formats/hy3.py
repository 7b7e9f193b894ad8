"""Hunyuan HY3 with a `token_suffix`: some HY3 tokenizers declare a `token_suffix` in
their tokenizer config, and every HY3 control tag then carries it (`<tool_calls{S}>`,
`<tool_call{S}>`, `<tool_sep{S}>`, `<arg_key{S}>`, `<arg_value{S}>` and their closing
forms; `<think{S}>`/`</think{S}>`). `hy3_format(suffix)` builds that family's spec;
with an empty suffix it is `hunyuan`. Register it to parse by name:

    from chatsieve.formats.registry import register
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

    # the turn markers of the suffixed template (tencent-Hy3.jinja): `<｜hy_eos:S｜>` ends a turn
    end = (f"<｜hy_eos{suffix}｜>", f"<｜hy_User{suffix}｜>", f"<tool_responses{suffix}>")
    return dataclasses.replace(
        HUNYUAN,
        name=name or f"hy3{suffix}",
        description=f"Tencent Hunyuan HY3 with token suffix {suffix!r}",
        aliases=(),
        reasoning_open=tags(HUNYUAN.reasoning_open),
        reasoning_close=tags(HUNYUAN.reasoning_close),
        call_open=tags(HUNYUAN.call_open),
        call_close=tags(HUNYUAN.call_close),
        codec=xml_kv_codec("Hy3SuffixCallCodec", dataclasses.replace(syntax, structural=(*syntax.structural, *end))),
        end=HUNYUAN.end + end,
        strip=HUNYUAN.strip + tags(HUNYUAN.strip) + (f"<｜hy_Assistant{suffix}｜>",),  # `<answer>` both ways: unverified
    )


def hy_v4_format(suffix: str, *, name: str | None = None) -> FormatSpec:
    """Tencent HY V4: HY3's suffixed tags without `<tool_sep>` (the name runs to the first
    `<arg_key{S}>`), thinking on by default and opened by the prompt (`<think{S}>`)."""
    base = hy3_format(suffix or "", name=name) if suffix else HUNYUAN
    syntax = dataclasses.replace(base.codec.syntax, name_close=())
    return dataclasses.replace(
        base,
        name=name or f"hy_v4{suffix}",
        description=f"Tencent HY V4 (token suffix {suffix!r}; no <tool_sep>; thinking on)",
        aliases=(),
        codec=xml_kv_codec("HyV4CallCodec", syntax),
        default_thinking=True,
        thinking_starts_in_reasoning=True,
        template=None,
        reasoning_doc=f"`<think{suffix}>…</think{suffix}>`, on by default (the prompt opens it)",
        calls_doc=f"`<tool_calls{suffix}><tool_call{suffix}>NAME<arg_key{suffix}>K</arg_key{suffix}>"
        f"<arg_value{suffix}>V</arg_value{suffix}></tool_call{suffix}></tool_calls{suffix}>`; "
        "`hy_v4:SUFFIX` for another suffix, `hy_v4:none` for none",
        tokenizer_doc="",
    )


OPENSOURCE = ":opensource"  # the suffix of the released checkpoints' tags (tencent-Hy3.jinja)

HY3_OPENSOURCE = dataclasses.replace(
    hy3_format(OPENSOURCE, name="hy3_opensource"),
    aliases=("hunyuan_opensource", "hy3-opensource"),
    default_thinking=False,  # the template's reasoning_effort is `no_think` unless set (high, low)
    template="llama.cpp/models/templates/tencent-Hy3.jinja",
    reasoning_doc="`<think:opensource>…</think:opensource>`, off unless `reasoning_effort` is set; `<answer>` removed",
    calls_doc="as `hunyuan`, every tag suffixed `:opensource`; `hunyuan:SUFFIX` for another suffix",
    tokenizer_doc="",
)

HY_V4 = dataclasses.replace(
    hy_v4_format(OPENSOURCE, name="hy_v4"),
    aliases=("hy-v4", "hy4", "hunyuan_v4", "hunyuan-v4", "tencent-hy-v4"),
)

SPECS = (HY3_OPENSOURCE, HY_V4)


def _suffixed(builder, default: FormatSpec):
    def build(suffix: str, name: str) -> FormatSpec:
        suffix = "" if suffix in (":none", ":") else suffix
        return default if suffix == OPENSOURCE else builder(suffix, name=name)

    return build


# `family:SUFFIX` names built on demand (chatsieve.formats.get): another checkpoint's suffix
SUFFIXED = {"hunyuan": _suffixed(hy3_format, HY3_OPENSOURCE), "hy_v4": _suffixed(hy_v4_format, HY_V4)}
