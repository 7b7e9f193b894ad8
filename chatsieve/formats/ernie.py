"""Baidu ERNIE 4.5: the thinking model reasons from the start until `</think>` (the
prompt opens the block) and wraps its answer in `<response>…</response>` (removed);
calls are `<tool_call>{"name", "arguments"}</tool_call>`."""

from __future__ import annotations

from ..args.json_call import JsonCallCodec
from ..spec import FormatSpec

ERNIE45 = FormatSpec(
    name="ernie45",
    description="Baidu ERNIE 4.5 (reasoning until </think>, <response> answer; <tool_call> JSON)",
    aliases=("ernie-4.5", "ernie4.5", "ernie_4_5", "ernie45_thinking", "ernie-4.5-thinking"),
    reasoning_open=("<think>",),
    reasoning_close=("</think>",),
    default_thinking=False,  # the -Thinking models: pass thinking=True (or the prompt)
    thinking_starts_in_reasoning=True,
    call_open=("<tool_call>",),
    call_close=("</tool_call>",),
    codec=JsonCallCodec,
    end=("</s>", "<|end_of_sentence|>"),
    strip=("<response>", "</response>"),
    reasoning_doc="`<think>…</think>`, opened by the prompt of the Thinking models; `<response>` tags removed",
    calls_doc='`<tool_call>{"name", "arguments"}</tool_call>`',
    tokenizer_doc="",  # no tokenizer of this family in shared/models: text mode
    template=None,
)

SPECS = (ERNIE45,)
