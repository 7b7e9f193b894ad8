"""StepFun Step-3: reasoning from the start until `</think>` and `<｜tool_calls_begin｜>`
sections of `<｜tool_call_begin｜>function<｜tool_sep｜><steptml:invoke name="F">
<steptml:parameter name="K">V</steptml:parameter></steptml:invoke><｜tool_call_end｜>`
calls ("steptml"). Step-3.5 writes `<think>` reasoning and Qwen3-Coder's XML calls."""

from __future__ import annotations

import dataclasses

from ..args.xml_kv import XmlKvCodec, XmlKvSyntax
from ..spec import FormatSpec
from .qwen3_coder import QWEN3_CODER

CALLS_BEGIN, CALLS_END = "<｜tool_calls_begin｜>", "<｜tool_calls_end｜>"
CALL_BEGIN, CALL_END, SEP = "<｜tool_call_begin｜>", "<｜tool_call_end｜>", "<｜tool_sep｜>"

STEPTML_SYNTAX = XmlKvSyntax(
    call_open="<steptml:invoke name=",
    name_close=(">",),
    call_close="</steptml:invoke>",
    key_open="<steptml:parameter name=",
    key_close=">",
    value_open="",
    value_close="</steptml:parameter>",
    quoted=True,
    structural=(CALLS_END, CALL_END),
    openers=(CALLS_BEGIN, CALL_BEGIN),
    closers=(CALL_END, CALLS_END),
)


class Step3CallCodec(XmlKvCodec):
    """steptml invocations, each wrapped in `<｜tool_call_begin｜>TYPE<｜tool_sep｜>` …
    `<｜tool_call_end｜>`; only the `function` type is a tool call."""

    syntax = STEPTML_SYNTAX

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._type: list[str] | None = None  # the call type being read (after CALL_BEGIN)
        self._skip: list[str] | None = None  # a call of another type, up to its end

    def plain(self, text: str) -> str | None:
        return None  # every character must pass through `feed`

    def feed(self, text: str) -> int:
        held = self._type if self._type is not None else self._skip
        if held is not None:
            held.append(text)
            return len(text)
        return super().feed(text)

    def marker(self, marker: str) -> bool:
        if self._skip is not None:
            if marker not in (CALL_END, CALLS_END):
                self._skip.append(marker)
                return True
            raw, self._skip = "".join(self._skip) + (marker if marker == CALL_END else ""), None
            self.junk(raw, "a call of a type other than function; not executed")
            return marker == CALL_END
        if self._type is None and super().marker(marker):
            return True
        if marker == CALL_BEGIN and self.idle:
            self._type = []
        elif marker == SEP and self._type is not None:
            kind = "".join(self._type)
            self._type = None
            if kind.strip() != "function":
                self._skip = [CALL_BEGIN, kind, SEP]
        elif marker == CALL_END and self.idle:
            pass  # the wrapper's end; the invocation already ended
        elif marker == CALL_END and self.in_call:
            # the invocation's own end tag is missing: this ends it
            super().feed(self.syntax.call_close)
        else:
            return False
        return True

    def close(self, *, truncated: bool) -> None:
        if self._type is not None:
            kind, self._type = "".join(self._type), None
            self.junk(CALL_BEGIN + kind, "a call without its type separator")
        if self._skip is not None:
            raw, self._skip = "".join(self._skip), None
            self.junk(raw, "a call of a type other than function; not executed")
        super().close(truncated=truncated)


STEP3 = FormatSpec(
    name="step3",
    description="StepFun Step-3 (reasoning until </think>; steptml invoke/parameter calls)",
    aliases=("step-3", "step_3", "steptml"),
    reasoning_open=("<think>",),
    reasoning_close=("</think>",),
    default_thinking=True,  # reasoning from the start of the output until `</think>`
    thinking_starts_in_reasoning=True,
    # a missing section begin: the first call's begin marker opens the section
    call_open=(CALLS_BEGIN, CALL_BEGIN),
    call_close=(CALLS_END,),
    codec=Step3CallCodec,
    inner=(SEP, CALL_END),
    reasoning_doc="from the start until `</think>`",
    calls_doc='`<｜tool_calls_begin｜><｜tool_call_begin｜>function<｜tool_sep｜><steptml:invoke name="F"><steptml:parameter name="K">V</steptml:parameter></steptml:invoke><｜tool_call_end｜><｜tool_calls_end｜>`',
    tokenizer_doc="",  # no tokenizer of this family in shared/models: text mode
    template=None,
)

STEP3P5 = dataclasses.replace(
    QWEN3_CODER,
    name="step3p5",
    description="StepFun Step-3.5 (thinks by default; Qwen3-Coder XML calls)",
    aliases=("step-3.5", "step3.5", "step_3_5", "step3.5-flash", "step-3.5-flash"),
    default_thinking=True,  # the generation prompt opens `<think>` unless thinking is off
    thinking_starts_in_reasoning=True,
    reasoning_doc="`<think>…</think>`, opened by the prompt, on by default",
    calls_doc="`<tool_call><function=NAME><parameter=K>V</parameter></function></tool_call>`",
    tokenizer_doc="",  # no tokenizer of this family in shared/models: text mode
    template="llama.cpp/models/templates/StepFun3.5-Flash.jinja",
)

SPECS = (STEP3, STEP3P5)
