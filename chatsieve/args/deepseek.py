"""Marker-delimited call sections (DeepSeek R1/V3/V3.1, and the base of Kimi K2's codec):
`[CALL_BEGIN] HEAD HEAD_END BODY CALL_END`, repeated, with JSON arguments streamed.

One region is one section; a call's pieces are told apart by inner markers. The
section's own begin marker may be missing (the region then opens at the first
call's begin marker), and so may its end marker: text after a finished call ends
the region and is content again. A call whose JSON object is complete stands even
when its end marker never comes; anything short of that is reported, not executed.
"""

from __future__ import annotations

import re

from .base import CallContext, Junk, RegionCodec, valid_function_name
from .json import JsonScanner

_WS = " \t\r\n"
# a function name: no whitespace, quotes, brackets or fence backticks (dots, dashes,
# colons and slashes are allowed: MCP-style names carry them)
NAME = re.compile(r"[^\s`{}\[\]\"'<>,]{1,256}")
_MAX_HEAD = 512  # a head longer than this is not a call head
_FENCE_OPEN = re.compile(r"\s*(?:```[\w-]*\s*)?")  # between the R1 name and its JSON
_FENCE_EMPTY = re.compile(r"\s*(?:```[\w-]*\s*(?:```\s*)?)?")  # an R1 body with no JSON
_FENCE_PREFIX = re.compile(r"\s*(?:`{0,3}|```[\w-]*\s*`{0,3}\s*)")  # either, still arriving
_TRAIL = re.compile(r"\s*(?:```\s*)?")  # between the JSON and the call end

# states
BETWEEN, HEAD, PRELUDE, JSON, TRAIL, SKIP = "between", "head", "prelude", "json", "trail", "skip"

CALLS_BEGIN = "<｜tool▁calls▁begin｜>"
CALLS_END = "<｜tool▁calls▁end｜>"
CALL_BEGIN = "<｜tool▁call▁begin｜>"
CALL_END = "<｜tool▁call▁end｜>"
SEP = "<｜tool▁sep｜>"


class SectionCodec(RegionCodec):
    """The section machinery; subclasses say what a head is (`_head_done`) and what
    may stand between the head's end marker and the JSON object (`_prelude`)."""

    section_begin = CALLS_BEGIN
    section_end = CALLS_END
    call_begin = CALL_BEGIN
    head_end = SEP
    call_end = CALL_END

    def __init__(self, ctx: CallContext) -> None:
        super().__init__(ctx)
        self._st = BETWEEN
        self._seen = False  # a call (or its head) has appeared in this region
        self._head: list[str] = []
        self._head_len = 0
        self._pre = ""  # text after the head's end marker, before the JSON
        self._sc: JsonScanner | None = None
        self._trail: list[str] = []
        self._error: str | None = None
        if ctx.opener == self.call_begin:  # the region opens at the first call's begin marker
            self._repaired(f"no {self.section_begin} before the call")
            self._seen = True
            self._begin_head()

    # ---- interface ---------------------------------------------------------------------
    def feed(self, text: str) -> int:
        i, n = 0, len(text)
        while i < n:
            st = self._st
            if st == BETWEEN:
                while i < n and text[i] in _WS:
                    i += 1
                if i == n:
                    return n
                if self._seen:  # text after a finished call: the section ended unmarked
                    self._repaired(f"no {self.section_end} after the calls: the text after them is not a call")
                    return i
                self._seen = True  # the section's first text: a call whose begin marker is missing
                self._repaired(f"no {self.call_begin} before the call")
                self._begin_head()
                continue
            if st == HEAD:
                self._head.append(text[i:])
                self._head_len += n - i
                if self._head_len > _MAX_HEAD:
                    self._err("no end of the call's head")
                return n
            if st == PRELUDE:
                i = self._prelude(text, i)
                continue
            if st == JSON:
                sc = self._sc
                i += sc.feed(text[i:])
                self.args(sc.take())
                if sc.error is not None:
                    self._err(f"invalid JSON arguments: {sc.error}")
                elif sc.done:
                    self._st = TRAIL
                continue
            # TRAIL and SKIP: kept for the end of the call
            self._trail.append(text[i:])
            return n
        return n

    def plain(self, text: str) -> str | None:
        # inside a JSON string `feed` scans and passes the text on, changing nothing else
        return self._sc.plain(text) if self._st == JSON else None

    def marker(self, marker: str) -> bool:
        st = self._st
        if st == JSON and self._sc.in_string:
            self.feed(marker)  # a delimiter inside a JSON string is just text
            return True
        if marker == self.call_begin:
            self._end_call(cut=True, truncated=False)
            self._seen = True
            self._begin_head()
            return True
        if marker == self.head_end:
            if st == HEAD:
                self._head_done("".join(self._head).strip(_WS))
            elif st == BETWEEN:
                self._seen = True
                self._repaired(f"no {self.call_begin} before the call")
                self._begin_head()
                self._head_done("")
            else:
                self._err(f"{marker} out of place in a call")
            return True
        if marker == self.call_end:
            if st == BETWEEN:
                return False  # an end with no call: the engine reports it
            self._end_call(cut=False, truncated=False)
            return True
        if marker == self.section_begin:
            if st != BETWEEN:
                self._end_call(cut=True, truncated=False)
            return True  # a repeated section begin changes nothing
        return False

    def close(self, *, truncated: bool) -> None:
        self._end_call(cut=True, truncated=truncated)

    @property
    def idle(self) -> bool:
        return self._st == BETWEEN

    # ---- calls ------------------------------------------------------------------------------
    def _begin_head(self) -> None:
        self._st = HEAD
        self._head = []
        self._head_len = 0
        self._pre = ""
        self._trail = []
        self._sc = None
        self._error = None

    def _head_done(self, head: str) -> None:
        raise NotImplementedError

    def _prelude(self, text: str, i: int) -> int:
        raise NotImplementedError

    def _prelude_end(self) -> None:
        """The call's end marker came before any JSON: start the call and give it `{}`
        (state TRAIL) when what came is a whole head, else fail it (`_err`)."""
        raise NotImplementedError

    def _no_arguments(self) -> None:
        self.args("{}")
        self._st = TRAIL

    def _begin_json(self) -> None:
        self._sc = JsonScanner()
        self._st = JSON

    def _start(self, name: str, native_id: str | None = None) -> bool:
        if not (NAME.fullmatch(name) and valid_function_name(name, self.ctx.tools)):
            self._err(f"invalid function name {name!r}" if name else "no function name")
            return False
        self.start(name, native_id)
        return True

    def _repaired(self, what: str) -> None:
        """A repair: reported, with nothing shown or lost."""
        self.ops.append(Junk("", f"{what} (repaired)"))

    def _err(self, why: str) -> None:
        if self._error is None:
            self._error = why
        self._st = SKIP

    def _end_call(self, *, cut: bool, truncated: bool) -> None:
        """The call's end marker arrived (cut=False), or something else ended it."""
        st = self._st
        if st == BETWEEN:
            return
        if st == PRELUDE and not cut:
            self._prelude_end()
            st = self._st
        if st == TRAIL:
            if cut:
                self._repaired(f"no {self.call_end} after the call's arguments")
            self.end()
            trail = "".join(self._trail)
            if not _TRAIL.fullmatch(trail):
                self.junk(trail, "text after the call's arguments")
        else:
            why = self._error
            if why is None:
                if truncated:
                    why = "the output ended inside the call"
                elif st == HEAD:
                    why = f"the call has no {self.head_end}"
                else:
                    why = "the call ended before its JSON arguments were complete"
            self.fail(why, truncated=truncated and self._error is None)
        self._st = BETWEEN
        self._trail = []
        self._sc = None
        self._error = None


class DeepSeekCallCodec(SectionCodec):
    """DeepSeek calls, both bodies: R1/V3 `TYPE<sep>NAME\\n```json\\n{…}\\n```` and V3.1
    `NAME<sep>{…}`. After the separator, a `{` means the head was the name (V3.1);
    anything else is the R1/V3 name, then an optional fence, then the JSON."""

    def __init__(self, ctx: CallContext) -> None:
        super().__init__(ctx)
        self._head_text = ""
        self._name: list[str] | None = None  # R1 name being read; None: style undecided

    def _head_done(self, head: str) -> None:
        self._head_text = head
        self._name = None
        self._st = PRELUDE

    def _prelude(self, text: str, i: int) -> int:
        n = len(text)
        if self._name is None and not self.in_call:
            while i < n and text[i] in _WS:
                i += 1
            if i == n:
                return n
            if text[i] == "{":  # V3.1: NAME<sep>{json}
                if self._start(self._head_text):
                    self._begin_json()
                return i
            self._name = []  # R1/V3: TYPE<sep>NAME ...
        if not self.in_call:
            j = i
            while j < n and text[j] not in _WS and text[j] not in "`{":
                j += 1
            self._name.append(text[i:j])
            if sum(map(len, self._name)) > 256:
                self._err("function name too long")
                return j
            if j == n:
                return n
            if not self._start("".join(self._name)):
                return j
            i = j
        # between the name and the JSON: whitespace and an optional ```json fence
        j = text.find("{", i)
        end = n if j < 0 else j
        self._pre += text[i:end]
        if not (_FENCE_OPEN if j >= 0 else _FENCE_PREFIX).fullmatch(self._pre) or len(self._pre) > 64:
            self._err(f"unexpected text before the JSON arguments: {self._pre[:64]!r}")
            return end
        if j >= 0:
            self._begin_json()
        return end

    def _prelude_end(self) -> None:
        if not self.in_call:
            # V3.1 with nothing after <sep>, or an R1 name ended by the call end
            name = self._head_text if self._name is None else "".join(self._name)
            if not self._start(name):
                return
        if _FENCE_EMPTY.fullmatch(self._pre):
            self._no_arguments()
        else:
            self._err(f"unexpected text before the call end: {self._pre[:64]!r}")
