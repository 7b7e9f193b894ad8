"""XML-ish key/value call bodies (Qwen3-Coder, GLM, MiniMax-M2, Hunyuan, DeepSeek DSML),
streamed to JSON by one codec parameterised by a family's tag strings (`XmlKvSyntax`).

A call is `CALL_OPEN name NAME_CLOSE (KEY_OPEN key KEY_CLOSE VALUE_OPEN value
VALUE_CLOSE)* CALL_CLOSE`. Values are raw text typed by the tool's JSON Schema
(`coerce_json`): a value declared a string streams as JSON string fragments as it
arrives; any other value is emitted once whole. Markers inside a value are literal
text, except `structural` ones (the region's end, the turn's end).

Values are raw text, so they can hold the tags themselves (a file that contains
`</parameter>`, a test that holds a whole example call). A tag inside a value counts
only in the shape the family's template writes it, and the value's tail is held back
until that is clear (docs/policies.md, "Tags inside XML-style values"):
- VALUE_CLOSE, when what follows continues the call: KEY_OPEN with any parameter name
  (declared or not: the server's schema handling decides), CALL_CLOSE, or the region's
  end, with nothing between but a line break (any whitespace when the close begins its
  own line). A parameter the call already has, opened that way, is a repeat (the last
  value wins) only when its own value's close is followed by the call's next parameter
  or end; otherwise it was an example, and the whole of it is the value's text;
- a mistyped VALUE_CLOSE (`</parameter1>`) in that shape ends the value too (repaired);
- KEY_OPEN with a declared parameter the call does not have yet (without a schema: at
  the start of a line), not after a space on its line, and CALL_CLOSE followed (in the
  same shape) by the region's end or the next call: the model left VALUE_CLOSE out, and
  the value ends there (repaired, reported).
An example inside a value opens with the call's own tags (a region opener, CALL_OPEN,
KEY_OPEN at the start of a line or right after a tag): every tag up to its matching
close is the example's, the value's text, the region's end included.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from ..tools import JSON_NUMBER, coerce_json, json_text, property_names, property_schema, schema_types
from .base import CallContext, Junk, RegionCodec, json_string_body, valid_function_name
from .pythonic import python_literal_json

_WS = " \t\r\n"
_NAME = re.compile(r"[^\s<>\"'{}\[\],]+")
_ATTR_HEAD = re.compile(r"""\s*(?:"([^"]*)"|'([^']*)'|([^\s"'=]+))(.*)""", re.S)
_STRING_ATTR = re.compile(r"""\s*string\s*=\s*["']?(true|false)["']?\s*""", re.S)
_MAX_HEAD = 256  # a name or key longer than this is not one
_MAX_GAP = 256  # whitespace between a tag inside a value and what decides it
_MAX_LOOK = 4096  # how far a repeated parameter's value is read ahead to tell a repeat from an example
_DRIFT = re.compile(r"[\w.:-]{1,8}>")  # what a mistyped VALUE_CLOSE has after its stem (`</parameter1>`)

# states
OUTSIDE, NAME, ARGS, KEY, PRE_VALUE, VALUE = "outside", "name", "args", "key", "pre-value", "value"
RECOVER, ENDED = "recover", "ended"  # after a malformed call; after a tentative region's call
PEEK = "peek"  # a tag inside a value, held until what follows says whether it counts
TYPE = "type"  # between `type_open` and `type_close` (before VALUE_OPEN): dropped
_OPEN, _IN, _AFTER = range(3)  # a repeated value's read-ahead: before the value, in it, after its close


@dataclass(frozen=True)
class XmlKvSyntax:
    """One family's tag strings. An empty `call_open` means the region holds one call
    whose name comes first; an empty `call_close` means the region's end closes it."""

    call_open: str
    name_close: tuple[str, ...]  # each ends the name (a KEY_OPEN or CALL_CLOSE also does)
    call_close: str
    key_open: str
    key_close: str
    value_open: str  # "" when the value follows the key's close directly
    value_close: str
    trim_newline: bool = False  # drop one leading and one trailing newline of a value
    quoted: bool = False  # names and keys are `"X"` attributes: the quotes are removed
    string_attr: bool = False  # a `string="true|false"` attribute: raw text, or JSON
    structural: tuple[str, ...] = ()  # markers never literal inside a value (the region's end)
    # the region's own open and close markers: inside a value they open and close an example
    openers: tuple[str, ...] = ()
    closers: tuple[str, ...] = ()
    # a tag pair the template may write between a key's close and VALUE_OPEN, dropped with its text
    # (K2-Horizon's `<ifm|arg_type>T</ifm|arg_type>`: the tool's schema types the value)
    type_open: str = ""
    type_close: str = ""

    @cached_property
    def drift(self) -> str:
        """The stem of a mistyped VALUE_CLOSE (`</parameter` of `</parameter1>`), or ""."""
        v = self.value_close
        return v[:-1] if len(v) > 3 and v.startswith("</") and v.endswith(">") else ""

    @cached_property
    def tags(self) -> frozenset[str]:
        """Every tag of the call syntax."""
        return frozenset(
            t for t in (self.call_open, *self.name_close, self.call_close, self.key_open, self.key_close,
                        self.value_open, self.value_close, self.type_open, self.type_close) if t
        )

    @cached_property
    def stops(self) -> dict[str, tuple[str, ...]]:
        """The strings that end each state's text, by state."""
        # a CALL_OPEN inside a name or key starts the next call (this one is malformed)
        name_stops = (*self.name_close, self.key_open, self.call_close, self.call_open)
        out = {
            OUTSIDE: (self.call_open,),
            NAME: name_stops,
            ARGS: (self.key_open, self.call_close),
            KEY: (self.key_close, self.call_open),
            PRE_VALUE: (self.value_open, self.type_open) if self.value_open else (),
            TYPE: (self.type_close,),
            VALUE: (self.value_close, self.key_open, self.call_close, self.call_open, self.drift, *self.openers,
                    *self.closers),
            RECOVER: (self.call_open, self.call_close),
            ENDED: (),
            PEEK: (),
        }
        return {k: tuple(dict.fromkeys(s for s in v if s)) for k, v in out.items()}

    @cached_property
    def patterns(self) -> dict[str, re.Pattern | None]:
        return {
            k: re.compile("|".join(re.escape(s) for s in sorted(v, key=len, reverse=True))) if v else None
            for k, v in self.stops.items()
        }

    @cached_property
    def example_open(self) -> frozenset[str]:
        """Tags that open an example call inside a value."""
        return frozenset(t for t in (self.call_open, *self.openers) if t)

    @cached_property
    def value_plain(self) -> re.Pattern:
        """The characters that can begin a stop inside a value: text without them is plain."""
        return re.compile("[" + "".join(sorted({re.escape(s[0]) for s in self.stops[VALUE]})) + "]")

    @cached_property
    def extendable(self) -> frozenset[str]:
        """Stops inside a value that are the start of a longer one (`</parameter` of
        `</parameter>`): one that ends the text so far is held until the next character."""
        v = self.stops[VALUE]
        return frozenset(a for a in v if any(b != a and b.startswith(a) for b in v))

    @cached_property
    def prefixes(self) -> dict[str, tuple[frozenset[str], int]]:
        """Proper prefixes of each state's stops (a tail to hold back), and the longest."""
        out = {}
        for k, v in self.stops.items():
            pre = frozenset(s[:i] for s in v for i in range(1, len(s)))
            out[k] = (pre, max((len(p) for p in pre), default=0))
        return out


def _line(line: bool, s: str) -> bool:
    """Whether text so far still stands alone on its line (only spaces and tabs since its last
    line break; `line` for the text before `s`)."""
    nl = s.rfind("\n")
    return (line if nl < 0 else True) and not s[nl + 1 :].strip(" \t")


def _skip_ws(buf: str, q: int) -> int:
    """Past the whitespace at `q` (at most _MAX_GAP characters of it)."""
    p = q
    while q < len(buf) and buf[q] in _WS and q - p <= _MAX_GAP:
        q += 1
    return q


def _dump(v: Any) -> str:
    return json.dumps(v, ensure_ascii=False, separators=(",", ":"))


def _raw_json(raw: str) -> str | None:
    """Raw text that is one JSON value, as compact JSON keeping its numbers as written;
    None if it is not JSON."""
    s = raw.strip(_WS)
    if s[:1] in ("{", "["):
        return json_text(s)
    if JSON_NUMBER.fullmatch(s):
        return s
    try:
        return json.dumps(json.loads(s), ensure_ascii=False, allow_nan=False)  # a string or literal
    except ValueError:  # not JSON, or NaN/Infinity
        return None



class XmlKvCodec(RegionCodec):
    """Subclass with `syntax = XmlKvSyntax(...)` (see `xml_kv_codec`).

    Policy: a malformed call is skipped to its end (or the next call) and fails
    there; the region's text outside calls is reported once, at its end. A
    tentative region (opened by plain text) is a call once its name is followed by
    a parameter or the call's end, and ends itself right after that call.
    """

    syntax: XmlKvSyntax

    def __init__(self, ctx: CallContext) -> None:
        super().__init__(ctx)
        self._st = OUTSIDE if self.syntax.call_open else NAME
        self._held = ""  # a tail that may still become one of the state's stops
        self._buf: list[str] = []  # name, key, or a value emitted whole
        self._junk: list[str] = []  # text outside any call
        self._name = ""
        self._nargs = 0
        self._calls = 0
        self._failed = 0
        self._error: str | None = None  # why the current call failed (reported at its end)
        self._key_schema: Any = None
        self._key_kind: str | None = None  # DSML: "true" (raw text) / "false" (JSON)
        self._streaming = False  # the current value streams as a JSON string
        self._v_started = False
        self._v_hold = ""  # a trailing newline that may be trimmed
        self._v_nl = True  # the value so far is empty or ends a line
        self._v_line = True  # ... or its last line holds only spaces and tabs so far
        self._v_tag = False  # the value so far ends with one of the syntax's tags (its text)
        self._v_space = False  # ... or with a space or a tab
        # an example call inside the value: its parameters, calls and regions open so far
        self._pdepth = self._cdepth = self._rdepth = 0
        self._peek_line = False  # PEEK: the tag begins its own line
        self._cur_key = ""  # the parameter whose value is being read
        self._given: set[str] = set()  # the parameters the current call has so far
        self._peek_tag = ""  # PEEK: the tag inside the value being decided
        self._peeks = 0  # PEEKs so far: the read-ahead below belongs to one
        self._peek_at = 0  # where the held tag starts in the text `_peek` reads
        self._look: list | None = None  # a repeat's read-ahead, where it stopped (`_repeat`)
        # token mode, VALUE_CLOSE a control token: a tag spelled inside a value is its text
        self._value_gated = self.syntax.value_close in ctx.gated

    # ---- interface -------------------------------------------------------------------
    def feed(self, text: str) -> int:
        old = len(self._held)
        buf = self._held + text
        self._held = ""
        end = self._scan(buf, final=False)
        return len(text) if end is None else max(end - old, 0)

    def plain(self, text: str) -> str | None:
        if (
            self._st != VALUE
            or self._held
            or not self._streaming
            or not self._v_started
            or self._v_hold
            or text[-1] == "\n"
            or self.syntax.value_plain.search(text) is not None
        ):
            return None
        self._v_track(text)
        return json_string_body(text)

    def marker(self, marker: str) -> bool:
        syn = self.syntax
        if self._st in (VALUE, PEEK) and self._rdepth and marker in syn.closers:
            self.feed(marker)  # the end of an example call's region, inside the value: its text
            return True
        if self._st == VALUE and self._value_gated and marker in syn.structural and self._held_drift():
            self._drift_close()  # a mistyped close, then the region's end: the value ended there
            return False
        if self._st == PEEK and marker in syn.structural:
            held, self._held = self._held, ""
            self._scan(held, final=True)  # the region ends here: the held tag is decided
            return False
        if marker == syn.value_close and marker in self.ctx.gated and self._st in (VALUE, PEEK):
            # VALUE_CLOSE by its token id: the value ends here, whatever follows; what the
            # value held back (a tag spelled in it) is its text
            held, self._held = self._held, ""
            self._st = VALUE
            self._value_text(held)
            self._value_done()
            self._st = ARGS
            return True
        if self._st in (VALUE, PEEK) and marker in self.ctx.gated and marker in (syn.key_open, syn.call_close):
            # the next parameter or the call's end by its token id inside a value: the
            # model left out VALUE_CLOSE (an id is never a value's text); the tag counts
            if self._st == VALUE and self._held_drift():
                self._drift_close()  # ... or wrote it mistyped
            else:
                held, self._held = self._held, ""
                self._st = VALUE
                self._value_text(held)
                why = f"no {syn.value_close} before {marker}: the value of {self._cur_key!r} ends there (repaired)"
                self.ops.append(Junk("", why))
                self._value_done()
                self._st = ARGS
            self.feed(marker)
            return True
        if self._st in (VALUE, PEEK) and marker not in syn.structural:
            self.feed(marker)  # a delimiter inside a value is just text
            return True
        if marker in syn.tags:
            self.feed(marker)  # one of the call's own tags (a marker only to gate it by id)
            return True
        return False

    def close(self, *, truncated: bool) -> None:
        held, self._held = self._held, ""
        if held:
            self._scan(held, final=True)
        st = self._st
        if self.verdict is None or self.verdict is False:
            self.verdict = False  # undecided plain text: not a call
            return
        if st == NAME and not truncated and not self.syntax.call_open:
            self._name_done()  # the region's end closes a name-only call (GLM)
            if self._st == ARGS:
                self._call_done()
        elif st == ARGS and not truncated:
            if self.syntax.call_close:  # a missing CALL_CLOSE is tolerated at the region's end
                self.ops.append(Junk("", f"no {self.syntax.call_close}: the call ends with its region (repaired)"))
            self._call_done()
        elif st in (NAME, ARGS, KEY, PRE_VALUE, TYPE, VALUE):
            if truncated:
                self.fail("the output ended inside the call", truncated=True)
            else:
                self.fail(f"unterminated {'function name' if st == NAME else 'parameter'}")
            self._failed += 1
        if self._st == RECOVER:
            self._flush_fail()
        junk = "".join(self._junk)
        self._junk = []
        if junk.strip(_WS):
            if self._calls == 0 and self._failed == 0:
                self.fail("no call in the tool-call block")
            else:
                self.junk(junk, "text in the tool-call block outside any call")

    # ---- text and tags -----------------------------------------------------------------
    def _scan(self, buf: str, *, final: bool) -> int | None:
        """Run the state machine over `buf`. Returns where the region ended itself (a
        tentative region's call is done), else None. Not `final`: a tail that may still
        become a stop, or a tag inside a value not yet decided, is held for the next feed."""
        syn = self.syntax
        i, n = 0, len(buf)
        while i < n:
            st = self._st
            if st == ENDED:
                return i
            if self.verdict is False:
                return None
            if st == PEEK:
                verdict = self._peek(buf, i, final)
                if verdict is None:
                    self._held = buf[i:]
                    return None
                tag, self._st = self._peek_tag, VALUE
                if not verdict:
                    if tag == syn.key_open and self._shaped():
                        self._pdepth += 1  # an example's parameter opens: its close is the example's
                    elif tag == syn.value_close and self._pdepth:
                        self._pdepth -= 1  # the example's parameter closes
                    self._tag_text(tag)  # the value's own text
                    i += len(tag)
                    continue
                if tag == syn.value_close:
                    i += len(tag)
                elif syn.drift and tag.startswith(syn.drift) and tag != syn.key_open:
                    why = f"{tag} for {syn.value_close}: the value of {self._cur_key!r} ends there (repaired)"
                    self.ops.append(Junk(tag, why))
                    i += len(tag)
                else:  # the value ends before the tag, which is read again as itself
                    why = f"no {syn.value_close} before {tag}: the value of {self._cur_key!r} ends there (repaired)"
                    self.ops.append(Junk("", why))
                self._value_done()
                self._st = ARGS
                continue
            pat = syn.patterns[st]
            m = pat.search(buf, i) if pat is not None else None
            if m is None:
                keep = 0
                if not final:
                    pre, longest = syn.prefixes[st]
                    for k in range(min(longest, n - i), 0, -1):
                        if buf[n - k :] in pre:
                            keep = k
                            break
                self._text(buf[i : n - keep])
                if self._st != st or self.verdict is False:
                    continue  # the text failed the call: look again from its start
                self._held = buf[n - keep :]
                return None
            if st == VALUE and not final and m.end() == n and m.group() in syn.extendable:
                self._text(buf[i : m.start()])  # `</parameter` may still become `</parameter>`
                self._held = buf[m.start() :]
                return None
            self._text(buf[i : m.start()])
            if self._st != st or self.verdict is False:
                continue
            if st == VALUE:
                j = self._value_tag(buf, m, final)
                if j is None:
                    self._held = buf[m.start() :]
                    return None
                i = j
                continue
            i = m.end()
            self._tag(m.group())
        return n if self._st == ENDED else None

    def _value_tag(self, buf: str, m: re.Match, final: bool) -> int | None:
        """A stop found inside a value: where to read on, its fate decided by the tag
        alone, or at the tag with PEEK set to decide it by what follows. None: held."""
        syn = self.syntax
        tag = m.group()
        if self._value_gated:
            # spelled: only VALUE_CLOSE's token id ends the value; a mistyped close at the
            # end is held until what comes next says (the next tag's id: it was the close)
            if syn.drift and tag == syn.drift:
                d = _DRIFT.match(buf, m.end())
                rest = buf[d.end() :] if d else buf[m.end() :]
                if d is None and not final and len(rest) < 9 and _DRIFT.match(rest + ">") and ">" not in rest:
                    return None
                if d is not None and not rest.strip(_WS):
                    if not final:
                        return None
                    self._held = buf[m.start() :]
                    self._drift_close()
                    return len(buf)
            self._value_text(tag)
            return m.end()
        if tag in syn.example_open:  # an example call opens where the template would write it
            if self._shaped():
                if tag == syn.call_open:
                    self._cdepth += 1
                else:
                    self._rdepth += 1
        elif tag in syn.closers:
            self._rdepth = max(self._rdepth - 1, 0)
        elif tag == syn.call_close and (self._cdepth or self._rdepth):
            self._cdepth = max(self._cdepth - 1, 0)  # an example call's end
        elif tag == syn.drift and self._pdepth:
            pass  # a mistyped close inside an example: its text
        else:
            self._peek_tag = tag
            self._peek_line = self._v_line
            self._peeks += 1
            self._st = PEEK
            return m.start()
        self._tag_text(tag)
        return m.end()

    def _peek(self, buf: str, i: int, final: bool) -> bool | None:
        """Whether the tag at `i`, inside a value, counts (None: not clear yet)."""
        syn = self.syntax
        tag = self._peek_tag
        self._peek_at = i
        j = i + len(tag)
        if tag == syn.key_open and tag != syn.value_close:
            return self._next_key(buf, j, final, missing_close=True)
        if syn.drift and tag.startswith(syn.drift) and tag != syn.value_close and tag != syn.call_close:
            if tag == syn.drift:  # its tail: `1>` of `</parameter1>`
                d = _DRIFT.match(buf, j)
                if d is None:
                    rest = buf[j : j + 9]
                    return None if not final and ">" not in rest and _DRIFT.match(rest + ">") else False
                tag = self._peek_tag = buf[i : d.end()]
                j = d.end()
        k = j
        n = len(buf)
        while k < n and buf[k] in _WS:
            k += 1
        if k - j > _MAX_GAP:
            return False
        if k == n:
            return True if final else None  # only whitespace, then the region's end
        gap = buf[j:k]
        if gap and "\n" not in gap and not self._peek_line:
            return False  # the template writes a line break, or nothing, after a close
        if tag == syn.call_close and tag != syn.value_close:  # `</function>`, no `</parameter>`
            nxt = syn.call_open  # ... counts before the region's end or the next call
            if buf.startswith(nxt, k):
                return True
            return None if not final and nxt.startswith(buf[k : k + len(nxt)]) else False
        # a close as the template writes it: then a line break, or directly the next tag
        # (any whitespace when the close begins its own line)
        if syn.call_close and buf.startswith(syn.call_close, k):
            # the call's own end; inside an example call, the example's
            return not (self._cdepth or self._rdepth)
        if buf.startswith(syn.key_open, k):
            if self._pdepth:
                return False  # an example's parameter closes, and its next one opens
            return self._next_key(buf, k + len(syn.key_open), final, missing_close=False)
        if any(buf.startswith(t, k) for t in syn.closers):
            return False  # an example's region end (or one spelled, token mode): not the call's
        if any(t and n - k < len(t) and t.startswith(buf[k:]) for t in (syn.call_close, syn.key_open, *syn.closers)):
            return True if final else None
        return False

    def _next_key(self, buf: str, p: int, final: bool, *, missing_close: bool) -> bool | None:
        """Whether a KEY_OPEN at `p` (its key starts there) continues this call."""
        syn = self.syntax
        if missing_close and (self._cdepth or self._rdepth):
            return False  # inside an example call: the example's parameter
        e = buf.find(syn.key_close, p, p + _MAX_HEAD + len(syn.key_close))
        if e < 0:
            if len(buf) - p >= _MAX_HEAD + len(syn.key_close):
                return False
            return (not missing_close) if final else None
        raw = buf[p:e].strip(_WS)
        key = self._unquote(raw)[0] if syn.quoted else raw
        if not key or any(c in key for c in "<>\n"):
            return False
        if not missing_close:
            # VALUE_CLOSE, then the next parameter: the call goes on whether or not the
            # schema declares that parameter (the server's schema handling decides); one the
            # call already has is a repeat, or an example the value holds: what follows says
            if key in self._given:
                return self._repeat(buf, e + len(syn.key_close), final)
            return True
        if key in self._given:
            return False  # a repair never replaces a value the call already has: text
        if self._v_space and not self._v_line:
            return False  # after a space on the line: a tag named in prose
        declared = property_names(self.ctx.tools.get(self._name))
        if declared:
            return key in declared
        return self._v_nl

    def _repeat(self, buf: str, p: int, final: bool) -> bool | None:
        """After VALUE_CLOSE, a parameter the call already has opens (its key ends at `p`).
        A repeat (True: the close counts, the last value wins) when that value's own close
        is followed by the call's next parameter or end; an example the value holds (False:
        all of it is the value's text) when anything else follows. Further repeats are read
        through. At most _MAX_LOOK characters are read ahead: past them it stays ambiguous
        (reported), and the value is kept whole.

        Undecided (None), the read-ahead keeps where it stopped (`_look`, places counted from
        the held tag's start, which stays the held text's start): the next delta goes on from
        there, so a value streamed in small deltas is read once, not once per delta."""
        syn = self.syntax
        n = len(buf)
        base = self._peek_at
        look = self._look
        if look is None or look[0] != self._peeks or look[1] != p - base:
            look = self._look = [self._peeks, p - base, p - base, _OPEN, True]  # PEEK, key end, place, phase, line
        limit = p + _MAX_LOOK
        pat = syn.patterns[VALUE]
        q, phase, line = base + look[2], look[3], look[4]

        def held() -> None:  # not clear yet: go on from q next time
            look[2:] = [q - base, phase, line]

        while True:
            if phase == _OPEN:
                if syn.value_open:  # GLM, Hunyuan: `<arg_value>` before the value
                    v = _skip_ws(buf, q)
                    if syn.type_open and buf.startswith(syn.type_open, v):  # K2-Horizon's type tag
                        e = buf.find(syn.type_close, v, v + _MAX_HEAD)
                        if e < 0:
                            return held() if not final and n - v < _MAX_HEAD else False
                        v = _skip_ws(buf, e + len(syn.type_close))
                    if not buf.startswith(syn.value_open, v):
                        opens = (syn.value_open, syn.type_open)
                        return held() if not final and any(t and t.startswith(buf[v:]) for t in opens) else False
                    q = v + len(syn.value_open)
                phase, line = _IN, True  # where the repeated value starts
            if phase == _IN:
                while True:
                    m = pat.search(buf, q, limit)
                    if m is None:
                        if n >= limit:
                            why = (f"{self._cur_key!r}: a parameter the call has opens again inside the value, and "
                                   f"nothing within {_MAX_LOOK} characters tells a repeat from an example: kept as "
                                   "the value's text")
                            self.ops.append(Junk("", why))
                            return False
                        if final:
                            return True
                        cut = max(q, n - syn.prefixes[VALUE][1])  # a stop may still begin in the tail
                        line = _line(line, buf[q:cut])
                        q = cut
                        return held()
                    if m.end() == n and not final and m.group() in syn.extendable:
                        line = _line(line, buf[q : m.start()])  # `</parameter` may become `</parameter>`
                        q = m.start()
                        return held()
                    line = _line(line, buf[q : m.start()])
                    q = m.end()
                    if m.group() == syn.value_close:
                        break
                    line = False
                phase = _AFTER
            k = _skip_ws(buf, q)
            if k == n:
                return True if final else held()
            gap = buf[q:k]
            if gap and "\n" not in gap and not line:
                return False
            if syn.call_close and buf.startswith(syn.call_close, k):
                return True
            if not buf.startswith(syn.key_open, k):
                nxt = (syn.call_close, syn.key_open)
                return held() if not final and any(t and t.startswith(buf[k : k + len(t)]) for t in nxt) else False
            e = buf.find(syn.key_close, k, k + _MAX_HEAD)
            if e < 0:
                return held() if not final and n - k < _MAX_HEAD else False
            raw = buf[k + len(syn.key_open) : e].strip(_WS)
            if (self._unquote(raw)[0] if syn.quoted else raw) not in self._given:
                return True  # the call's next parameter
            q, phase = e + len(syn.key_close), _OPEN  # another repeat: read its value too

    def _text(self, s: str) -> None:
        if not s:
            return
        st = self._st
        if st == VALUE:
            self._value_text(s)
        elif st in (NAME, KEY):
            self._buf.append(s)
            if sum(map(len, self._buf)) > _MAX_HEAD:
                self._err(f"no valid {'function' if st == NAME else 'parameter'} name")
            elif st == NAME and self.verdict is None and not _NAME.fullmatch("".join(self._buf)):
                self._err("no valid function name")
        elif st in (OUTSIDE, ENDED):
            self._junk.append(s)
        elif st in (RECOVER, TYPE):
            pass  # part of the failed call (the engine reports its raw text); a value's type tag
        elif s.strip(_WS):
            self._err(f"unexpected text {s.strip(_WS)[:40]!r} in the call")

    def _tag(self, t: str) -> None:
        syn = self.syntax
        st = self._st
        if st in (OUTSIDE, RECOVER):
            self._flush_fail()
            if t == syn.call_open:
                self._st = NAME
            else:  # the end of the failed call
                self._st = ENDED if self.ctx.tentative else OUTSIDE
        elif st in (NAME, KEY) and t == syn.call_open:
            self._err("a call opens inside this one")
            if self._st == RECOVER:
                self._tag(t)
        elif st == NAME:
            self._name_done()
            if self._st != ARGS:
                return
            # `<function=NAME<parameter=`; a separator (Hunyuan's `<tool_sep>`) may be left
            # out when no parameter follows
            if syn.call_open and syn.name_close and t not in syn.name_close and (
                t == syn.key_open or syn.name_close[0] == ">"
            ):  # no name_close at all (HY V4): the name simply runs to the first key
                self.ops.append(Junk("", f"no {syn.name_close[0]} after the function name {self._name!r} (repaired)"))
            if t == syn.key_open:
                self._confirm()
                self._st = KEY
            elif t == syn.call_close:
                self._confirm()
                self._call_done()
        elif st == ARGS:
            self._confirm()
            if t == syn.key_open:
                self._st = KEY
            else:
                self._call_done()
        elif st == KEY:
            self._key_done()
            if self._st == KEY:
                self._st = PRE_VALUE if syn.value_open else VALUE
                if not syn.value_open:
                    self._value_begin()
        elif st == PRE_VALUE and t == syn.type_open:
            self._st = TYPE
        elif st == TYPE:
            self._st = PRE_VALUE
        elif st == PRE_VALUE:
            self._st = VALUE
            self._value_begin()
        elif st == VALUE:
            self._value_done()
            self._st = ARGS

    def _confirm(self) -> None:
        if self.verdict is None:
            self.verdict = True

    # ---- calls ---------------------------------------------------------------------------
    def _name_done(self) -> None:
        raw = "".join(self._buf).strip(_WS)
        self._buf = []
        name, rest = self._unquote(raw) if self.syntax.quoted else (raw, "")
        if not valid_function_name(name, self.ctx.tools) or rest.strip(_WS):
            self._err(f"no valid function name in {raw[:40]!r}")
            return
        if self.verdict is None and self.ctx.tools and name not in self.ctx.tools:
            self._err(f"{name!r} is not a known tool")
            return
        self._name = name
        self._nargs = 0
        self._given = set()
        self.start(name)
        self.args("{")
        self._st = ARGS

    def _call_done(self) -> None:
        self.args("}")
        self.end()
        self._calls += 1
        self._st = ENDED if self.ctx.tentative else OUTSIDE

    def _key_done(self) -> None:
        raw = "".join(self._buf).strip(_WS)
        self._buf = []
        kind = None
        key = raw
        if self.syntax.quoted:
            key, rest = self._unquote(raw)
            if self.syntax.string_attr and rest.strip(_WS):
                m = _STRING_ATTR.fullmatch(rest)
                if m is None:
                    self._err(f"unknown parameter attributes {rest.strip()[:40]!r}")
                    return
                kind = m.group(1)
        if not key or "<" in key or ">" in key or "\n" in key:
            self._err(f"no valid parameter name in {raw[:40]!r}")
            return
        self._key_kind = kind
        self._cur_key = key
        self._given.add(key)
        self._key_schema = property_schema(self.ctx.tools.get(self._name), key)
        self.args(("," if self._nargs else "") + _dump(key) + ":")
        self._nargs += 1

    def _value_begin(self) -> None:
        # the schema types the value; DSML's `string="true|false"` decides only where the
        # schema says nothing
        types = schema_types(self._key_schema)
        if types:
            self._streaming = types <= {"string"}
            if self._key_kind is not None and (self._key_kind == "true") != self._streaming:
                why = f"{self._cur_key!r}: string={self._key_kind} disagrees with the schema; typed by the schema"
                self.ops.append(Junk("", why))
            self._key_kind = None
        else:
            self._streaming = self._key_kind == "true"
        self._v_started = False
        self._v_hold = ""
        self._v_nl = self._v_line = True  # the value so far is empty or ends a line
        self._v_tag = self._v_space = False
        self._pdepth = self._cdepth = self._rdepth = 0
        self._buf = []
        if self._streaming:
            self.args('"')

    def _v_track(self, s: str) -> None:
        """Where the value's text so far ends: a line's start, a tag (`_tag_text`)."""
        self._v_nl = s[-1] == "\n"
        self._v_space = s[-1] in " \t"
        nl = s.rfind("\n")
        self._v_line = (self._v_line if nl < 0 else True) and not s[nl + 1 :].strip(" \t")
        self._v_tag = False

    def _tag_text(self, tag: str) -> None:
        """One of the syntax's tags, inside a value: its text."""
        self._value_text(tag)
        self._v_tag = True

    def _shaped(self) -> bool:
        """Whether a tag here stands where the template writes one (the start of a line, right
        after another tag, inside an example call): an example's tag, not a mention in prose."""
        return self._v_line or self._v_tag or bool(self._cdepth or self._rdepth)

    def _held_drift(self) -> bool:
        """Token mode: the value holds back a mistyped VALUE_CLOSE (and whitespace) at its end."""
        held = self._held
        syn = self.syntax
        if not (syn.drift and held.startswith(syn.drift)):
            return False
        d = _DRIFT.match(held, len(syn.drift))
        return d is not None and not held[d.end() :].strip(_WS)

    def _drift_close(self) -> None:
        """The held mistyped VALUE_CLOSE was the value's close (repaired)."""
        held, self._held = self._held, ""
        tag = held[: _DRIFT.match(held, len(self.syntax.drift)).end()]
        why = f"{tag} for {self.syntax.value_close}: the value of {self._cur_key!r} ends there (repaired)"
        self.ops.append(Junk(tag, why))
        self._value_done()
        self._st = ARGS

    def _value_text(self, s: str) -> None:
        if s:
            self._v_track(s)
        trim = self.syntax.trim_newline
        if not self._v_started:
            self._v_started = True
            if trim and s[0] == "\n":
                s = s[1:]
        if not self._streaming:
            self._buf.append(s)
            return
        s = self._v_hold + s
        self._v_hold = ""
        if trim and s.endswith("\n"):
            s, self._v_hold = s[:-1], "\n"
        if s:
            self.args(json_string_body(s))

    def _value_done(self) -> None:
        if self._streaming:
            self._v_hold = ""  # the one trailing newline (held only when trimming)
            self.args('"')
            return
        raw = "".join(self._buf)
        self._buf = []
        if self.syntax.trim_newline and raw.endswith("\n"):
            raw = raw[:-1]
        if self._key_kind == "false":  # DSML `string="false"`: the value is JSON
            self.args(_raw_json(raw) or coerce_json(raw, self._key_schema))
            return
        types = schema_types(self._key_schema)
        if types & {"object", "array"} and "string" not in types and _raw_json(raw) is None:
            literal = python_literal_json(raw)  # `{'a': 1}`: read as Python, never eval'd
            want = ("{" if "object" in types else "") + ("[" if "array" in types else "")
            if literal is not None and literal[:1] in want:
                self.ops.append(Junk("", f"{self._cur_key!r}: a Python literal, read as JSON (repaired)"))
                self.args(literal)
                return
        self.args(coerce_json(raw, self._key_schema))

    # ---- helpers ---------------------------------------------------------------------------
    @staticmethod
    def _unquote(raw: str) -> tuple[str, str]:
        """`"X" rest` -> (X, rest); a bare word is accepted too."""
        m = _ATTR_HEAD.fullmatch(raw)
        if m is None:
            return "", raw
        return next(g for g in m.groups()[:3] if g is not None), m.group(4)

    def _err(self, why: str) -> None:
        """A malformed call: an undecided tentative region is not a call at all;
        otherwise the call fails here and the codec looks for the next one."""
        self._buf = []
        if self.verdict is None:
            self.verdict = False
            return
        self._error = why
        self._st = RECOVER

    def _flush_fail(self) -> None:
        """The failed call's end: one Fail, so its raw text is reported once."""
        if self._error is not None:
            self.fail(self._error)
            self._error = None
            self._failed += 1


def xml_kv_codec(name: str, syntax: XmlKvSyntax) -> type[XmlKvCodec]:
    """A codec class for one family's syntax (what a FormatSpec's `codec` takes)."""
    return type(name, (XmlKvCodec,), {"syntax": syntax, "__doc__": f"{name}: {syntax}"})
