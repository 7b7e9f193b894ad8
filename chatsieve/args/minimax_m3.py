"""MiniMax-M3 call bodies: every tag is led by the namespace token `]<]minimax[>[`:
`NS<tool_call>`, `NS<invoke name="F">` … `NS</invoke>`, `NS</tool_call>`, each parameter an element `NS<KEY>value NS</KEY>`
whose closing tag repeats its name, nested elements for objects, `NS<item>` children
for arrays.

The closing tag depends on the element, and elements nest, so no fixed-tag codec
reads it: this one keeps a stack of open elements. Each top-level parameter goes out
whole when it closes (typed by the tool's schema like the other XML families); a
parameter given twice fails the call rather than guess.

The region opens at a namespace token (the engine's marker) and reads the tag after
it; the block's `NS</tool_call>` ends the region from inside, so the namespace token
is the family's only delimiter (a delimiter and a longer one starting with it could
not both be matched as text while streaming).
"""

from __future__ import annotations

import json
import re
from typing import Any

from ..tools import coerce_raw, items_schema, property_schema, schema_types
from .base import CallContext, Junk, RegionCodec

NS = "]<]minimax[>["
_WS = " \t\r\n"
_INVOKE = re.compile(r'<invoke\s+name\s*=\s*"([^"<>]+)"\s*', re.S)
_TAG_NAME = re.compile(r"[^\s<>/\"'=]+")
_MAX_TAG = 512


class _Element:
    __slots__ = ("tag", "schema", "container", "text")

    def __init__(self, tag: str, schema: Any) -> None:
        self.tag = tag
        self.schema = schema
        self.container: dict | list | None = None  # set by its first child element
        self.text: list[str] = []


def _dump(v: Any) -> str:
    try:
        return json.dumps(v, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except ValueError:  # NaN or Infinity read from the text: keep the text
        return json.dumps(str(v), ensure_ascii=False)


class MiniMaxM3CallCodec(RegionCodec):
    def __init__(self, ctx: CallContext) -> None:
        super().__init__(ctx)
        self._tag: list[str] | None = []  # a tag being read after NS (the opener is one)
        self._tag_len = 0
        self._block = False  # `NS<tool_call>` seen
        self._done = False  # `NS</tool_call>` seen: the region is over
        self._flushed = False
        self._stack: list[_Element] = []  # [root (the arguments), open elements…]
        self._keys: set[str] = set()  # top-level parameters already written
        self._error: str | None = None  # the open call failed; skipping to its end
        self._junk: list[str] = []
        self._calls = 0
        self._failed = 0

    # ---- interface -------------------------------------------------------------------
    def feed(self, text: str) -> int:
        i, n = 0, len(text)
        while i < n:
            if self._done:
                return i
            if self._tag is not None:
                j = text.find(">", i)
                part = text[i : n if j < 0 else j]
                self._tag.append(part)
                self._tag_len += len(part)
                if j < 0:
                    if self._tag_len > _MAX_TAG:
                        self._abandon_tag("a tag longer than any name")
                    return n
                tag = "".join(self._tag).strip(_WS)
                self._tag = None
                i = j + 1
                self._on_tag(tag)
                continue
            self._on_text(text[i:])
            return n
        return n

    def marker(self, marker: str) -> bool:
        if marker != NS or self._done:
            return False
        if self._tag is not None:
            self._abandon_tag("a tag left unfinished")
        self._tag = []
        self._tag_len = 0
        return True

    def close(self, *, truncated: bool) -> None:
        if self._flushed:
            return
        self._flushed = True
        if self._tag is not None:
            self._abandon_tag("the output ended inside a tag" if truncated else "a tag left unfinished")
        if self._error is not None:
            self._flush_fail(truncated=False)
        elif self.in_call:
            self.fail(
                "the output ended inside the call" if truncated else "the call was not closed",
                truncated=truncated,
            )
            self._failed += 1
        junk = "".join(self._junk)
        if junk.strip(_WS):
            if self._calls == 0 and self._failed == 0:
                self.fail("no call in the tool-call block")
            else:
                self.junk(junk, "text in the tool-call block outside any call")

    @property
    def idle(self) -> bool:
        return self._done or (not self.in_call and self._error is None and self._tag is None)

    # ---- grammar ---------------------------------------------------------------------
    def _on_text(self, s: str) -> None:
        if self._error is not None:
            return  # part of the failed call: reported with its raw text
        if not self.in_call:
            self._junk.append(s)
            return
        top = self._stack[-1]
        if len(self._stack) == 1 or top.container is not None:
            if s.strip(_WS):
                self._err(f"unexpected text {s.strip(_WS)[:40]!r} between elements")
            return
        top.text.append(s)

    def _on_tag(self, tag: str) -> None:
        bare = tag.replace(" ", "")
        if bare == "</tool_call":
            self._done = True
            self.close(truncated=False)  # the call block is over: the region ends here
            return
        if bare == "<tool_call" and not self._block and not self.in_call:
            self._block = True
            return
        if self._error is not None:
            if bare == "</invoke":
                self._flush_fail(truncated=False)
            return
        m = _INVOKE.fullmatch(tag)
        if m is not None:
            if self.in_call:
                self._err("a call opens inside this one")
                return
            self._start_call(m.group(1).strip())
            return
        if not self.in_call:
            self._junk.append(NS + tag + ">")
            return
        if tag.startswith("</"):
            name = tag[2:].strip(_WS)
            if name == "invoke":
                self._end_call()
            else:
                self._close_element(name)
            return
        name = tag[1:].strip(_WS) if tag.startswith("<") else ""
        if not _TAG_NAME.fullmatch(name):
            self._err(f"no valid parameter name in {tag[:40]!r}")
            return
        self._open_element(name)

    def _start_call(self, name: str) -> None:
        if not _TAG_NAME.fullmatch(name):
            self._err(f"no valid function name in {name[:40]!r}")
            return
        self.start(name)
        self.args("{")
        self._stack = [_Element("", self.ctx.tools.get(name))]
        self._stack[0].container = {}
        self._keys = set()

    def _end_call(self) -> None:
        if len(self._stack) > 1:
            self._err(f"element <{self._stack[-1].tag}> was not closed")
            self._flush_fail(truncated=False)
            return
        self.args("}")
        self.end()
        self._calls += 1
        self._stack = []

    def _open_element(self, name: str) -> None:
        parent = self._stack[-1]
        if parent.container is None:
            if "".join(parent.text).strip(_WS):
                self._err(f"element <{parent.tag}> mixes text and elements")
                return
            parent.text = []
            is_array = "array" in schema_types(parent.schema) or (
                name == "item" and not schema_types(parent.schema)
            )
            parent.container = [] if is_array else {}
        if isinstance(parent.container, list):
            schema = items_schema(parent.schema)
        else:
            schema = property_schema(parent.schema, name)
        self._stack.append(_Element(name, schema))

    def _close_element(self, name: str) -> None:
        if len(self._stack) == 1:
            self._err(f"closing tag </{name}> with no open element")
            return
        el = self._stack[-1]
        if el.tag != name:
            self._err(f"closing tag </{name}> does not match <{el.tag}>")
            return
        self._stack.pop()
        value = self._value(el)
        parent = self._stack[-1]
        if len(self._stack) == 1:  # a parameter: it goes out now (a repeat: the engine's rule)
            self.args(("," if self._keys else "") + json.dumps(name, ensure_ascii=False) + ":" + _dump(value))
            self._keys.add(name)
        elif isinstance(parent.container, list):
            parent.container.append(value)
        else:
            if name in parent.container:  # the last value wins, as for any repeated key
                why = f"repeated argument {name!r} in <{parent.tag}>: the later value is kept"
                self.ops.append(Junk(_dump(parent.container.pop(name)), why))
            parent.container[name] = value

    @staticmethod
    def _value(el: _Element) -> Any:
        if el.container is not None:
            return el.container
        types = schema_types(el.schema)
        raw = "".join(el.text)
        if not (types and types <= {"string"}):
            raw = raw.rstrip(_WS)  # a declared string keeps its trailing whitespace
        if not raw.strip(_WS) and types and types <= {"object", "array", "null"}:
            return [] if "array" in types else {} if "object" in types else None
        return coerce_raw(raw, el.schema)

    def _abandon_tag(self, why: str) -> None:
        raw, self._tag = NS + "".join(self._tag or ()), None
        if self.in_call:
            self._err(why)
        else:
            self._junk.append(raw)

    def _err(self, why: str) -> None:
        """The open call fails (reported at its end); outside a call the raw text is
        already kept as junk."""
        if self._error is None and self.in_call:
            self._error = why

    def _flush_fail(self, *, truncated: bool) -> None:
        if self._error is not None:
            self.fail(self._error, truncated=truncated)
            self._error = None
            self._failed += 1
        self._stack = []
