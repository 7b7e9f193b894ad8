"""The interface between the engine and a family's call syntax (a "region codec").

The engine hands a codec everything between a call region's opening and closing
markers; the codec reports calls as ops: start (name), argument JSON fragments,
end, or failure. One codec instance serves one region, which may hold one call
(Gemma 4, Qwen3) or several (DeepSeek, Kimi, Mistral).
"""

from __future__ import annotations

import json
import re
import secrets
import string
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

_ALNUM = string.ascii_letters + string.digits
# letters, digits and `_`, with `-`, `.` and `:` allowed inside (`files.read`, `mcp:fs-read`)
_FUNCTION_NAME = re.compile(r"\w(?:[\w.:\-]*\w)?")
MAX_NAME = 256


def valid_function_name(name: str, tools: Mapping[str, Any] | None = None) -> bool:
    """Whether `name` can be a called function's name: a tool the request declared,
    or a word of letters, digits and `_` (`-` `.` `:` inside), not only digits.
    A call whose "name" is anything else (`0`, `::`, `get weather`) is not a call."""
    if tools and name in tools:
        return True
    return len(name) <= MAX_NAME and bool(_FUNCTION_NAME.fullmatch(name)) and not name.isdigit()


# what json.dumps(ensure_ascii=False) escapes inside a string
_JSON_ESCAPE = re.compile(r'["\\\x00-\x1f]')


def json_string_body(text: str) -> str:
    """`text` as the inside of a JSON string (json.dumps(text, ensure_ascii=False) without its
    quotes), returned as it is when nothing in it needs escaping."""
    if _JSON_ESCAPE.search(text) is None:
        return text
    return json.dumps(text, ensure_ascii=False)[1:-1]


def random_alnum(k: int) -> str:
    """`k` random alphanumerics, each of the 62 equally likely: the base-62 digits of one number
    drawn below 62**k (a draw per character cost seven times as much)."""
    n = secrets.randbelow(62**k)
    out = []
    for _ in range(k):
        n, r = divmod(n, 62)
        out.append(_ALNUM[r])
    return "".join(out)


def openai_call_id(native: str | None = None) -> str:
    """`call_` + 24 random alphanumerics, as OpenAI's ids look."""
    return "call_" + random_alnum(24)


@dataclass(frozen=True, slots=True)
class Start:
    name: str
    native_id: str | None = None


@dataclass(frozen=True, slots=True)
class Args:
    json_text: str


@dataclass(frozen=True, slots=True)
class End:
    pass


@dataclass(frozen=True, slots=True)
class Fail:
    why: str
    truncated: bool = False  # the output ended inside the call (max tokens)


@dataclass(frozen=True, slots=True)
class Junk:
    """Text inside a region that belongs to no call; reported, never shown."""

    raw: str
    why: str


Op = Start | Args | End | Fail | Junk


@dataclass
class CallContext:
    tools: Mapping[str, Any] = field(default_factory=dict)  # name -> parameters schema
    # True when the region was opened by plain text (FormatSpec.text_call_open or
    # content_call_start), not by a control marker: the codec must then decide,
    # through `verdict`, whether this really is a call.
    tentative: bool = False
    opener: str | None = None  # the marker (or trigger text) that opened the region
    # markers recognised only by their token id (token mode): never text inside a string
    gated: frozenset[str] = frozenset()


class RegionCodec:
    """Base class: subclasses override `feed`, and `marker`/`close` where needed."""

    # Set by `feed` to end the region: the last characters of what it has used that
    # belong to the engine after all (say, whitespace held while deciding whether another
    # call follows). The engine reads them, then the rest of the text, outside the region.
    give_back: str = ""

    def __init__(self, ctx: CallContext) -> None:
        self.ctx = ctx
        self.ops: list[Op] = []
        self.in_call = False  # a call has started and not yet ended
        # Tentative regions only: None while undecided, True once surely a call,
        # False if not (the engine then puts all the region's text back into content).
        self.verdict: bool | None = None if ctx.tentative else True

    def feed(self, text: str) -> int:
        """Consume region text; return how much was used. Less than all means the
        region ended itself there (its calls already ended or failed) and the rest
        belongs to the engine again."""
        raise NotImplementedError

    def plain(self, text: str) -> str | None:
        """Fast lane: when feeding `text` would do nothing but add argument JSON to the
        open call (one `Args` op; no other op, state the engine reads, or text given
        back), take it and return that JSON; else None and nothing taken (the engine
        then feeds it). Codecs offer this inside argument strings; the default never. A
        subclass whose `feed` filters text first must turn it off again."""
        return None

    def marker(self, marker: str) -> bool:
        """A control marker inside the region. True: consumed (as structure, or as
        literal text inside a string). False: the engine decides what it means."""
        return False

    def close(self, *, truncated: bool) -> None:
        """The region's end marker arrived (truncated=False), or the output ended or
        was cut by another marker (truncated=True). Must end or fail an open call."""
        raise NotImplementedError

    @property
    def idle(self) -> bool:
        """True when the region could end here without losing anything."""
        return not self.in_call

    # helpers for subclasses
    def start(self, name: str, native_id: str | None = None) -> None:
        self.in_call = True
        self.ops.append(Start(name, native_id))

    def args(self, text: str) -> None:
        if text:
            self.ops.append(Args(text))

    def end(self) -> None:
        self.in_call = False
        self.ops.append(End())

    def fail(self, why: str, *, truncated: bool = False) -> None:
        self.in_call = False
        self.ops.append(Fail(why, truncated))

    def junk(self, raw: str, why: str) -> None:
        if raw.strip():
            self.ops.append(Junk(raw, why))
