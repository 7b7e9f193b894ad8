"""Thinking Machines Lab's Inkling: typed content blocks, each opened by a kind marker and
closed by `<|end_message|>` -- `<|content_thinking|>` reasoning, `<|content_text|>` content,
`<|content_invoke_tool_json|>{"name", "args"}` a call, `<|content_tool_error|>` visible text --
with `<|message_model|>` before each next block and `<|content_model_end_sampling|>` ending the
generation.

Between `<|message_model|>` and the kind marker the model may write an author header (the tool's
name, or anything): it is not content. `InklingEngine` holds that text until the next marker says
what it was (a kind marker: a header, reported and not shown; anything else: bare content, as a
message with no kind marker is), then hands every segment to the shared engine.
"""

from __future__ import annotations

from ..args.json_call import JsonCallCodec
from ..engine import Engine
from ..events import Dropped
from ..lexer import Marker, Segment, Text
from ..spec import FormatSpec

MODEL = "<|message_model|>"
THINK, TEXT = "<|content_thinking|>", "<|content_text|>"
TOOL_JSON, TOOL_TEXT, TOOL_ERROR = "<|content_invoke_tool_json|>", "<|content_invoke_tool_text|>", "<|content_tool_error|>"
END_MESSAGE, END_SAMPLING = "<|end_message|>", "<|content_model_end_sampling|>"
KINDS = frozenset((THINK, TEXT, TOOL_JSON, TOOL_TEXT, TOOL_ERROR))
_WS = " \t\r\n"


class InklingCallCodec(JsonCallCodec):
    """`{"name": …, "args": {…}}` (Inkling names the arguments `args`)."""

    arg_keys = ("args", "arguments")


class InklingEngine(Engine):
    """The shared engine, after a pass that decides what text following `<|message_model|>` is."""

    def _start_state(self, prompt: str | None) -> None:
        super()._start_state(prompt)
        # The generation prompt ends `<|message_model|>` (a header may follow), or goes on
        # into a block (`<|content_thinking|>`, `<|content_text|>`): its body has begun.
        tail = prompt[prompt.rfind(MODEL) :] if prompt and MODEL in prompt else ""
        kind_at = max((tail.rfind(k) for k in KINDS), default=-1)
        in_block = kind_at >= 0 and END_MESSAGE not in tail[kind_at:]
        self._header: list[Segment] | None = None if in_block else []

    def segment(self, seg: Segment) -> None:
        header = self._header
        if header is None:
            if isinstance(seg, Marker) and seg.text in (END_MESSAGE, MODEL):
                self._header = []  # the block is over: what follows may be a header
            super().segment(seg)
            return
        if isinstance(seg, Text):
            header.append(seg)
            return
        self._header = None
        if seg.text in KINDS:
            raw = "".join(s.text for s in header)
            if raw.strip(_WS):
                self.out.append(Dropped(raw, "message author header; not shown"))
        else:  # no kind marker: the message's text is content
            for s in header:
                super().segment(s)
            if seg.text in (END_MESSAGE, MODEL):
                self._header = []
        super().segment(seg)

    def take_plain(self, text: str, start: int) -> str | None:
        return None if self._header is not None else super().take_plain(text, start)

    def finish(self, *, cut: bool = True) -> None:
        header, self._header = self._header, None
        for s in header or ():
            super().segment(s)
        super().finish(cut=cut)


INKLING = FormatSpec(
    name="inkling",
    description="Thinking Machines Lab Inkling (typed content blocks; JSON calls with `args`)",
    aliases=("inkling-v1", "tml_inkling", "tml-inkling", "thinking_machines_inkling"),
    reasoning_open=(THINK,),
    reasoning_close=(END_MESSAGE,),
    default_thinking=True,
    call_open=(TOOL_JSON,),
    call_close=(END_MESSAGE,),
    codec=InklingCallCodec,
    end=(END_SAMPLING, "<|message_user|>", "<|message_system|>", "<|message_tool|>"),
    # block markers that carry no text of their own: removed (`<|end_message|>` ends reasoning and
    # calls above; after a text block it is only removed). `<|content_invoke_tool_text|>`'s body is
    # visible text, as vLLM shows it (SGLang's nameless call cannot be executed).
    strip=(END_MESSAGE, MODEL, TEXT, TOOL_ERROR, TOOL_TEXT),
    engine=InklingEngine,
    reasoning_doc="`<|content_thinking|>…<|end_message|>` blocks (the prompt may open one)",
    calls_doc='`<|content_invoke_tool_json|>{"name", "args"}<|end_message|>`; `<|message_model|>` before each '
    "block, an author header before its kind marker not shown",
)

SPECS = (INKLING,)
