"""OpenBMB MiniCPM5: `<function name="F"><param name="K">V</param>…</function>` calls,
a value optionally wrapped in `<![CDATA[…]]>`; `<think>…</think>` reasoning when the
model writes it."""

from __future__ import annotations

from ..args.xml_kv import VALUE, XmlKvCodec, XmlKvSyntax
from ..spec import FormatSpec

CALL_OPEN, CALL_CLOSE = "<function name=", "</function>"
PARAM_OPEN, PARAM_CLOSE = "<param name=", "</param>"
CDATA_OPEN, CDATA_CLOSE = "<![CDATA[", "]]>"

MINICPM5_SYNTAX = XmlKvSyntax(
    call_open="",  # the region is one call, its quoted name first
    name_close=(">",),
    call_close="",  # `</function>` ends the region and the call
    key_open=PARAM_OPEN,
    key_close=">",
    value_open="",
    value_close=PARAM_CLOSE,
    quoted=True,
    structural=(CALL_CLOSE,),
    openers=(CALL_OPEN,),
    closers=(CALL_CLOSE,),
)

# CDATA filter states
_PASS, _TAG, _VALUE_START, _CDATA = range(4)


class MiniCPM5CallCodec(XmlKvCodec):
    """The XML key/value codec behind a small filter that unwraps CDATA values: a
    value's leading `<![CDATA[` and its `]]>` are removed, what lies between is the
    value, every tag and marker in it its text (the template wraps a value in CDATA
    exactly when it holds `<`)."""

    syntax = MINICPM5_SYNTAX

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._f = _PASS
        self._hold = ""  # text the filter cannot judge yet

    def plain(self, text: str) -> str | None:
        return None  # every character must pass through `feed`

    def feed(self, text: str) -> int:
        for piece, literal in self._filter(text):
            if literal and self._st == VALUE and not self._held:
                self._value_text(piece)  # inside CDATA: no tag counts
            else:
                super().feed(piece)
        return len(text)

    def marker(self, marker: str) -> bool:
        if self._f == _CDATA and self._st == VALUE:
            self.feed(marker)  # `</function>` inside CDATA is text (held as a region end would be)
            return True
        return super().marker(marker)

    def close(self, *, truncated: bool) -> None:
        hold, self._hold = self._hold, ""
        if hold:
            super().feed(hold)
        super().close(truncated=truncated)

    def _filter(self, text: str) -> list[tuple[str, bool]]:
        """The text without CDATA wrappers, as (piece, inside CDATA) pieces."""
        out: list[tuple[str, bool]] = []
        s = self._hold + text
        self._hold = ""
        i, n = 0, len(s)
        while i < n:
            f = self._f
            if f == _PASS:
                j = s.find(PARAM_OPEN, i)
                if j < 0:
                    keep = _tail_prefix(s, i, PARAM_OPEN)
                    out.append((s[i : n - keep], False))
                    self._hold = s[n - keep :]
                    return out
                out.append((s[i : j + len(PARAM_OPEN)], False))
                i = j + len(PARAM_OPEN)
                self._f = _TAG
            elif f == _TAG:
                j = s.find(">", i)
                if j < 0:
                    out.append((s[i:], False))
                    return out
                out.append((s[i : j + 1], False))
                i = j + 1
                self._f = _VALUE_START
            elif f == _VALUE_START:
                rest = s[i:]
                stripped = rest.lstrip(" \t\r\n")
                if len(stripped) < len(CDATA_OPEN) and CDATA_OPEN.startswith(stripped):
                    self._hold = rest  # nothing yet, or what may still become `<![CDATA[`
                    return out
                if stripped.startswith(CDATA_OPEN):
                    i = n - len(stripped) + len(CDATA_OPEN)  # the whitespace before it goes too
                    self._f = _CDATA
                else:
                    self._f = _PASS
            else:  # _CDATA
                j = s.find(CDATA_CLOSE, i)
                if j < 0:
                    keep = _tail_prefix(s, i, CDATA_CLOSE)
                    out.append((s[i : n - keep], True))
                    self._hold = s[n - keep :]
                    return out
                out.append((s[i:j], True))
                i = j + len(CDATA_CLOSE)
                self._f = _PASS
        return out


def _tail_prefix(s: str, start: int, token: str) -> int:
    """Length of the longest tail of s[start:] that is a proper prefix of token."""
    for k in range(min(len(token) - 1, len(s) - start), 0, -1):
        if token.startswith(s[len(s) - k :]):
            return k
    return 0


MINICPM5 = FormatSpec(
    name="minicpm5",
    description="OpenBMB MiniCPM5 (<function name=…><param name=…> XML calls, CDATA values)",
    aliases=("minicpm-5", "minicpm_5", "minicpm5_xml", "minicpm5xml"),
    reasoning_open=("<think>",),
    reasoning_close=("</think>",),
    default_thinking=False,
    call_open=(CALL_OPEN,),
    call_close=(CALL_CLOSE,),
    codec=MiniCPM5CallCodec,
    end=("<|im_end|>", "<|im_start|>"),
    reasoning_doc="`<think>…</think>` when the model writes it",
    calls_doc='`<function name="F"><param name="K">V</param></function>` (V may be `<![CDATA[…]]>`)',
    tokenizer_doc="",  # no tokenizer of this family in shared/models: text mode
    template="llama.cpp/models/templates/openbmb-MiniCPM5-1B.jinja",
)

SPECS = (MINICPM5,)
