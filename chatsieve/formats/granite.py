"""IBM Granite: 3.x writes plain-text reasoning ("Here is my thought process:" …
"Here is my response:") when thinking is asked for, and `<|tool_call|>[{"name",
"arguments"}, …]` call lists; Granite 4 writes Hermes-style `<tool_call>{…}</tool_call>`."""

from __future__ import annotations

import dataclasses
import string

from ..args.dispatch import JsonCallsCodec
from ..args.llama3 import _CallObject
from ..args.pythonic import PythonicCallCodec
from ..spec import FormatSpec, ToolPrompt
from .qwen3 import HERMES

# Granite 3.3's template renders only a message's content, so an earlier call would vanish from
# the history: it is written back as the content, the way the model writes it.
GRANITE_TOOL_PROMPT = ToolPrompt(
    system=None,  # the template renders the tools itself (an `available_tools` turn)
    calls="granite",
    source="IBM's Granite 3.x chat templates: 3.3's system prompt (\"respond only with <|tool_call|> followed by a "
    "JSON list of tools used\") and 3.0's (huggingface.co/ibm-granite/granite-3.0-8b-instruct, as quoted in "
    "llama.cpp's tests/test-chat-template.cpp), which writes an earlier call as "
    "`<|start_of_role|>assistant<|end_of_role|><|tool_call|>` + the calls; results keep 3.3's own `tool` role",
)

GRANITE = FormatSpec(
    name="granite",
    description="IBM Granite 3.x (plain-text thought process / response; <|tool_call|> JSON lists)",
    aliases=("granite3", "granite-3", "granite-3.1", "granite-3.2", "granite-3.3", "granite_3"),
    # 3.0-3.2 write the plain-text headers; 3.3 writes `<think>…</think><response>…</response>`
    reasoning_open=("Here is my thought process:", "Here's my thought process:", "<think>"),
    reasoning_close=("Here is my response:", "Here's my response:", "</think>"),
    default_thinking=False,  # `thinking=True` in the template asks for it; the model writes the header
    call_open=("<|tool_call|>",),
    codec=JsonCallsCodec,
    end=("<|end_of_text|>", "<|start_of_role|>"),
    strip=("<|end_of_role|>", "<response>", "</response>"),
    reasoning_doc="plain text `Here is my thought process:` … `Here is my response:`, or (3.3) "
    "`<think>…</think><response>…</response>` (when asked)",
    calls_doc='`<|tool_call|>[{"name", "arguments"}, …]` (no closing marker)',
    tokenizer_doc="",  # no tokenizer of this family in shared/models: text mode
    template="llama.cpp/models/templates/ibm-granite-granite-3.3-2B-Instruct.jinja",
    tool_prompt=GRANITE_TOOL_PROMPT,
)

GRANITE4 = dataclasses.replace(
    HERMES,
    name="granite4",
    description="IBM Granite 4 (Hermes-style <tool_call> JSON; <think> when asked)",
    aliases=("granite-4", "granite_4", "granite-4.0", "granite4.0"),
    end=("<|end_of_text|>", "<|start_of_role|>", "<tool_response>"),
    strip=("<|end_of_role|>", "</tool_response>"),
    reasoning_doc="`<think>…</think>` when asked",
    calls_doc='`<tool_call>{"name", "arguments"}</tool_call>`',
    tokenizer_doc="",  # no tokenizer of this family in shared/models: text mode
    template="llama.cpp/models/templates/ibm-granite-granite-4.0.jinja",
)

# granite-20b-functioncalling: each call is `<function_call> {"name", "arguments"}`; the
# object ends the call (no closing marker), so several calls are several markers.
GRANITE_20B_FC = FormatSpec(
    name="granite_20b_fc",
    description="IBM granite-20b-functioncalling (<function_call> JSON objects)",
    aliases=("granite-20b-fc", "granite_20b_functioncalling", "granite-20b-functioncalling"),
    call_open=("<function_call>",),
    codec=_CallObject,
    end=("<|endoftext|>",),
    reasoning_doc="none",
    calls_doc='`<function_call> {"name", "arguments"}` per call (no closing marker)',
    tokenizer_doc="",  # no tokenizer of this family in shared/models: text mode
    template=None,
)

class BarePythonicCalls(PythonicCallCodec):
    """Granite's pythonic calls: bare `name(k=v)` lines with no marker and no brackets."""

    bare_calls_when_tentative = True


# Granite 3.3 / 4.0-H served with vLLM's pythonic template: bare Python keyword calls, one per line,
# no marker. With nothing to mark them, a reply is read as calls only from its first character, and
# only for declared tools (chatsieve's rule for unmarked calls); prose after the calls is content,
# and a call-shaped line after prose stays content (docs/policies.md).
GRANITE_PYTHONIC = FormatSpec(
    name="granite_pythonic",
    description="IBM Granite with pythonic calls (bare `f(k=v)` lines starting the reply)",
    aliases=("granite-pythonic", "granite_3_pythonic", "granite4_pythonic"),
    # a forced call (tool_choice) is written as the pythonic grammar's `[f(k=v)]` list
    content_call_start=("[", *string.ascii_letters, "_"),
    codec=BarePythonicCalls,
    end=("<|end_of_text|>", "<|start_of_role|>"),
    strip=("<|end_of_role|>",),
    reasoning_doc="none",
    calls_doc='`get_weather(location="Paris")` lines starting the reply; literals to JSON, never `eval`; only '
    "for tools of the request",
    call_syntax="pythonic",
)

SPECS = (GRANITE, GRANITE4, GRANITE_20B_FC, GRANITE_PYTHONIC)
