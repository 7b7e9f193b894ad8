"""Cohere Command R7B / Command A: `<|START_THINKING|>…<|END_THINKING|>` reasoning,
`<|START_RESPONSE|>…<|END_RESPONSE|>` around the answer (removed), and
`<|START_ACTION|>[{"tool_call_id", "tool_name", "parameters"}, …]<|END_ACTION|>` calls;
grounded spans `<co>text</co: 0:[1,2]>` lose their markup (each reported as a Citation)."""

from __future__ import annotations

import re

from ..args.llama3 import _CallObject
from ..args.mistral import MistralCallList
from ..events import Citation, CitationSource, Dropped
from ..spec import FormatSpec

CITE_OPEN = "<co>"
_CITE_CLOSE_HEAD = "</co"
# `</co: 0:[1,2],1:[0]>`: tool call 0's results 1 and 2, tool call 1's result 0
_GROUP = r"\s*\d+\s*:\s*\[\s*(?:\d+(?:\s*,\s*\d+)*)?\s*\]\s*"
_CITE_CLOSE = re.compile(rf"</co(?::({_GROUP}(?:,{_GROUP})*))?>")
_SOURCE = re.compile(r"(\d+)\s*:\s*\[([^\]]*)\]")
_CLOSE_CHARS = frozenset("0123456789:[], \t")
_MAX_CLOSE = 256  # a longer `</co:…` is text


def _tag_prefix(s: str) -> bool:
    """Whether `s` (starting with `<`) may still grow into a citation tag."""
    if len(s) <= len(CITE_OPEN) and CITE_OPEN.startswith(s):
        return True
    if len(s) <= len(_CITE_CLOSE_HEAD):
        return _CITE_CLOSE_HEAD.startswith(s)
    return s.startswith(_CITE_CLOSE_HEAD + ":") and len(s) < _MAX_CLOSE and all(c in _CLOSE_CHARS for c in s[5:])


def _sources(spec: str | None) -> tuple[CitationSource, ...]:
    return tuple(
        CitationSource(int(call), tuple(int(r) for r in results.split(",") if r.strip()))
        for call, results in _SOURCE.findall(spec or "")
    )


class CitationMarkup:
    """Field filter: removes `<co>` and `</co: …>` around a grounded span, keeps the span's
    text, and reports one `Citation` per span (its text and sources). A tag split across
    deltas is held until it is whole or proves text; a `<co>` never closed, or a close
    without its `<co>`, is removed and reported; nothing else is touched."""

    def __init__(self, field: str) -> None:
        self._field = field
        self._held = ("", 0)  # a tail that may still become a tag, and where it began
        self._cited: list[str] | None = None  # the open span's text so far
        self._broken = False  # a boundary passed since the held tail

    @property
    def idle(self) -> bool:
        return not self._held[0] and self._cited is None

    def mark(self) -> None:
        self._broken = bool(self._held[0])

    def write(self, text: str, start: int) -> list:
        out: list = []
        held, at = self._held
        if self._broken:  # a marker came between: the held tail is text
            self._broken = False
            self._keep(out, held, at)
            held = ""
        buf, base = held + text, at if held else start
        i = k = 0  # kept up to i; searching from k
        while True:
            j = buf.find("<", k)
            if j < 0:
                break
            if buf.startswith(CITE_OPEN, j):
                self._keep(out, buf[i:j], base + i)
                if self._cited is not None:
                    out.append(self._unclosed())
                self._cited = []
                i = k = j + len(CITE_OPEN)
                continue
            m = _CITE_CLOSE.match(buf, j)
            if m is not None:
                self._keep(out, buf[i:j], base + i)
                out.append(self._close(m.group(0), m.group(1)))
                i = k = m.end()
                continue
            if len(buf) - j < _MAX_CLOSE and _tag_prefix(buf[j:]):  # only a tail can be held
                self._keep(out, buf[i:j], base + i)
                self._held = (buf[j:], base + j)
                return out
            k = j + 1
        self._keep(out, buf[i:], base + i)
        self._held = ("", 0)
        return out

    def finish(self) -> list:
        out: list = []
        held, at = self._held
        self._held, self._broken = ("", 0), False
        self._keep(out, held, at)
        if self._cited is not None:
            out.append(self._unclosed())
        return out

    def _keep(self, out: list, text: str, start: int) -> None:
        if text:
            out.append((text, start))
            if self._cited is not None:
                self._cited.append(text)

    def _close(self, tag: str, spec: str | None) -> Dropped:
        if self._cited is None:
            return Dropped(tag, f"a citation's end without its {CITE_OPEN}; removed")
        text, self._cited = "".join(self._cited), None
        cites = spec.strip() if spec else "no sources"
        return Citation(
            f"{CITE_OPEN}{text}{tag}", f"citation of {cites} in {self._field} (markup removed, text kept)",
            self._field, text, _sources(spec),
        )  # fmt: skip

    def _unclosed(self) -> Dropped:
        self._cited = None
        return Dropped(CITE_OPEN, f"a citation in {self._field} never closed; {CITE_OPEN} removed, text kept")


class _CohereCallObject(_CallObject):
    name_keys = ("tool_name", "name")  # `tool_call_id` is Cohere's index, not an id to keep


class CohereActionCodec(MistralCallList):
    """The action list: JSON call objects named by `tool_name`."""

    call_object = _CohereCallObject


COHERE_COMMAND = FormatSpec(
    name="cohere_command",
    description="Cohere Command R7B / Command A (THINKING/RESPONSE blocks; ACTION JSON lists)",
    aliases=(
        "cohere",
        "command-r7b",
        "command_r7b",
        "command-a",
        "command_a",
        "command-a-reasoning",
        "cohere_command3",
        "cohere_command4",
        "cohere-command",
    ),  # not "command-r": Command R (08-2024) and R+ write `Action: ```json` lists, which this does not read
    reasoning_open=("<|START_THINKING|>",),
    reasoning_close=("<|END_THINKING|>",),
    default_thinking=False,  # the reasoning models open the block themselves
    call_open=("<|START_ACTION|>",),
    call_close=("<|END_ACTION|>",),
    codec=CohereActionCodec,
    end=("<|END_OF_TURN_TOKEN|>", "<|START_OF_TURN_TOKEN|>", "<|END_OF_TEXT|>"),
    strip=(
        "<|START_RESPONSE|>",
        "<|END_RESPONSE|>",
        "<|START_TEXT|>",
        "<|END_TEXT|>",
        "<|END_ACTION|>",
        "<|CHATBOT_TOKEN|>",
        "<BOS_TOKEN>",
    ),
    content_filter=lambda thinking: CitationMarkup("content"),
    reasoning_filter=lambda thinking: CitationMarkup("reasoning"),
    reasoning_doc="`<|START_THINKING|>…<|END_THINKING|>` (the model opens it)",
    calls_doc='`<|START_ACTION|>[{"tool_call_id", "tool_name", "parameters"}, …]<|END_ACTION|>`',
    tokenizer_doc="",  # no tokenizer of this family in shared/models: text mode
    template="llama.cpp/models/templates/CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja",
)

SPECS = (COHERE_COMMAND,)
