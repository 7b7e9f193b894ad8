"""Kimi K2 calls: `<|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>{json}
<|tool_call_end|>` inside a `<|tool_calls_section_begin|>…<|tool_calls_section_end|>` section.

The head is the call's native id; the name is the id without its `functions.` prefix
and `:IDX` suffix (dots inside the name stay). Ids in other spellings models produce
(`functionsexec5`, `functions_get_weather_1`) resolve to a declared tool's name.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from .base import openai_call_id
from .deepseek import PRELUDE, SectionCodec

SECTION_BEGIN = "<|tool_calls_section_begin|>"
SECTION_END = "<|tool_calls_section_end|>"
CALL_BEGIN = "<|tool_call_begin|>"
ARGUMENT_BEGIN = "<|tool_call_argument_begin|>"
CALL_END = "<|tool_call_end|>"

_ID = re.compile(r"(?:functions\.)?(?P<name>\S+?)(?P<index>:\d+)?")
_LOOSE_ID = re.compile(r"functions[._]?(?P<name>\S+?)[:_]?\d+")
_WS = " \t\r\n"


def name_from_id(call_id: str, tools: Mapping[str, object]) -> tuple[str, bool]:
    """The function name in a Kimi call id, and whether the id carries an index (then
    it is kept as the call's id). "" when the id names no function: an id that is
    neither `functions.NAME`, nor `NAME:IDX`, nor a declared tool (`call_3`, `0`)."""
    m = _ID.fullmatch(call_id)
    if m is None:
        return "", False
    name = m.group("name")
    indexed = m.group("index") is not None
    if tools and name not in tools:
        loose = _LOOSE_ID.fullmatch(call_id)
        if loose and loose.group("name") in tools:
            return loose.group("name"), True
    if not (indexed or call_id.startswith("functions.") or (tools and name in tools)):
        return "", False
    return name, indexed


def kimi_call_id(native: str | None) -> str:
    """Kimi's own id (`functions.NAME:IDX`) when the model gave one: its chat template
    renders the id back into the conversation, and the model pairs results by it."""
    return native if native else openai_call_id()


class KimiCallCodec(SectionCodec):
    section_begin = SECTION_BEGIN
    section_end = SECTION_END
    call_begin = CALL_BEGIN
    head_end = ARGUMENT_BEGIN
    call_end = CALL_END

    def _head_done(self, head: str) -> None:
        name, indexed = name_from_id(head, self.ctx.tools)
        self._st = PRELUDE
        if not name and head:
            self._err(f"the call id {head[:64]!r} names no function (Kimi writes functions.NAME:IDX)")
            return
        self._start(name, head if indexed else None)

    def _prelude(self, text: str, i: int) -> int:
        n = len(text)
        while i < n and text[i] in _WS:
            i += 1
        if i == n:
            return n
        if text[i] == "{":
            self._begin_json()
        else:
            self._err(f"expected a JSON object after {ARGUMENT_BEGIN}, found {text[i]!r}")
        return i

    def _prelude_end(self) -> None:
        self._no_arguments()  # `<|tool_call_argument_begin|><|tool_call_end|>`: no arguments
