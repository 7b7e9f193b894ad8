"""GLM-4.5/4.6 and GLM-4.7/5: `<think>` reasoning (on by default) and
`<tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value></tool_call>` calls."""

from __future__ import annotations

import dataclasses

from ..args.xml_kv import XmlKvSyntax, xml_kv_codec
from ..spec import FormatSpec

_END = ("<|endoftext|>", "<|user|>", "<|observation|>", "<|system|>")

# 4.5/4.6 put a newline after the name and around each pair; 4.7/5 write none.
GLM_SYNTAX = XmlKvSyntax(
    call_open="",  # one call per `<tool_call>`, its name first
    name_close=("\n",),
    call_close="",  # `</tool_call>` ends it
    key_open="<arg_key>",
    key_close="</arg_key>",
    value_open="<arg_value>",
    value_close="</arg_value>",
    structural=("</tool_call>", *_END),
    openers=("<tool_call>",),
    closers=("</tool_call>",),
)

GLM45 = FormatSpec(
    name="glm45",
    description="GLM-4.5 / GLM-4.6 (thinking on by default; XML key/value calls)",
    aliases=("glm-4.5", "glm4.5", "glm46", "glm-4.6", "glm4.6", "glm4_moe"),
    reasoning_open=("<think>",),
    reasoning_close=("</think>",),
    default_thinking=True,  # the model writes its own `<think>` after `<|assistant|>`
    call_open=("<tool_call>",),
    call_close=("</tool_call>",),
    codec=xml_kv_codec("GlmCallCodec", GLM_SYNTAX),
    # control tokens in GLM's vocabulary: as markers they are gated by id in token mode,
    # where only `</arg_value>`'s id ends a value (a spelled one is the value's text)
    inner=("<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"),
    end=_END,
    strip=("<|assistant|>",),
    template="glm/chat_template.glm-4.6.jinja",
    reasoning_doc="`<think>…</think>`, on by default",
    calls_doc="`<tool_call>NAME\\n<arg_key>K</arg_key>\\n<arg_value>V</arg_value>\\n</tool_call>`",
    tokenizer_doc="",  # GLM-4.5/4.6's 151k vocabulary is not in shared/models
)

# GLM-4.7 / GLM-5: the prompt itself opens `<think>` (or closes it with thinking off).
GLM47 = dataclasses.replace(
    GLM45,
    name="glm47",
    description="GLM-4.7 / GLM-5 (the prompt opens the think block; calls without newlines)",
    aliases=("glm-4.7", "glm4.7", "glm5", "glm-5"),
    thinking_starts_in_reasoning=True,
    template="glm/chat_template.glm-4.7-flash.jinja",
    reasoning_doc="the prompt opens `<think>`; on by default",
    calls_doc="`<tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value></tool_call>`",
    tokenizer_doc="glm/glm-5",
)

SPECS = (GLM45, GLM47)
