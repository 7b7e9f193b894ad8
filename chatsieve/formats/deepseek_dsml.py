"""DeepSeek V3.2 and V4 (DSML): `<think>` reasoning, and `<｜DSML｜function_calls>` (V4:
`<｜DSML｜tool_calls>`) blocks of `<｜DSML｜invoke name="F">` with
`<｜DSML｜parameter name="K" string="true|false">V</｜DSML｜parameter>` (false: V is JSON)."""

from __future__ import annotations

import dataclasses

from ..args.xml_kv import XmlKvSyntax, xml_kv_codec
from ..spec import FormatSpec

DSML = "｜DSML｜"

DSML_SYNTAX = XmlKvSyntax(
    call_open=f"<{DSML}invoke name=",
    name_close=(">",),
    call_close=f"</{DSML}invoke>",
    key_open=f"<{DSML}parameter name=",
    key_close=">",
    value_open="",
    value_close=f"</{DSML}parameter>",
    quoted=True,
    string_attr=True,
    # the end of either block (V3.2, V4) and of the turn
    structural=(f"</{DSML}function_calls>", f"</{DSML}tool_calls>", "<｜end▁of▁sentence｜>"),
    openers=(f"<{DSML}function_calls>", f"<{DSML}tool_calls>"),
    closers=(f"</{DSML}function_calls>", f"</{DSML}tool_calls>"),
)

DEEPSEEK_V32 = FormatSpec(
    name="deepseek_v32",
    description="DeepSeek V3.2 (DSML function_calls; thinking off unless asked)",
    aliases=("deepseek-v3.2", "deepseek_v3.2", "deepseek_v3_2"),
    reasoning_open=("<think>",),
    reasoning_close=("</think>",),
    default_thinking=False,
    thinking_starts_in_reasoning=True,  # with thinking on the prompt ends with `<think>`
    call_open=(f"<{DSML}function_calls>",),
    call_close=(f"</{DSML}function_calls>",),
    codec=xml_kv_codec("DsmlCallCodec", DSML_SYNTAX),
    end=("<｜end▁of▁sentence｜>",),
    template="deepseek/chat_template.v3.2.jinja",
    reasoning_doc="`<think>…</think>`, off unless asked",
    calls_doc='`<｜DSML｜function_calls>` of `<｜DSML｜invoke name="F">` with '
    '`<｜DSML｜parameter name="K" string="true|false">V</｜DSML｜parameter>`',
    tokenizer_doc="deepseek",  # the R1-era vocabulary: no `｜DSML｜` token there
)

DEEPSEEK_V4 = dataclasses.replace(
    DEEPSEEK_V32,
    name="deepseek_v4",
    description="DeepSeek V4 (DSML tool_calls; thinking off unless asked)",
    aliases=("deepseek-v4",),
    call_open=(f"<{DSML}tool_calls>",),
    call_close=(f"</{DSML}tool_calls>",),
    # V4's vocabulary has `｜DSML｜` as a control token: the call's tags spelled around it are
    # gated by its id (token mode), so one spelled inside a value (a file's text) is text
    inner=(DSML_SYNTAX.value_close, DSML_SYNTAX.key_open, DSML_SYNTAX.call_close),
    # outside a block they are text the model wrote (an answer explaining the syntax), as in V3.2
    literal_outside=(DSML_SYNTAX.value_close, DSML_SYNTAX.key_open, DSML_SYNTAX.call_close),
    template="llama.cpp/models/templates/deepseek-ai-DeepSeek-V4.jinja",
    calls_doc="as `deepseek_v32`, in `<｜DSML｜tool_calls>` blocks",
    tokenizer_doc="deepseek/v4",
)

# V4.1: the same DSML with a space before each tag name (`<｜DSML｜ calls>`, `<｜DSML｜ invoke name=…>`,
# `<｜DSML｜ parameter name=… string=…>`), as its reference encoder writes them; V4's parser finds no
# call in it. Thinking is the default (the prompt ends `<think>`; the chat prompt ends `</think>`).
DSML_V41_SYNTAX = dataclasses.replace(
    DSML_SYNTAX,
    call_open=f"<{DSML} invoke name=",
    call_close=f"</{DSML} invoke>",
    key_open=f"<{DSML} parameter name=",
    value_close=f"</{DSML} parameter>",
    structural=(f"</{DSML} calls>", "<｜end▁of▁sentence｜>"),
    # its own block (V4's unspaced blocks are no V4.1 markup): inside a value, an example's
    openers=(f"<{DSML} calls>",),
    closers=(f"</{DSML} calls>",),
)

DEEPSEEK_V41 = dataclasses.replace(
    DEEPSEEK_V4,
    name="deepseek_v41",
    description="DeepSeek V4.1 (spaced DSML `calls` blocks; thinking on by default)",
    aliases=("deepseek-v4.1", "deepseek_v4.1", "deepseek_v4_1", "dsv41"),
    default_thinking=True,
    call_open=(f"<{DSML} calls>",),
    call_close=(f"</{DSML} calls>",),
    codec=xml_kv_codec("DsmlV41CallCodec", DSML_V41_SYNTAX),
    inner=(DSML_V41_SYNTAX.value_close, DSML_V41_SYNTAX.key_open, DSML_V41_SYNTAX.call_close),
    # outside a block its spaced tags are text the model wrote, as V4's are
    literal_outside=(DSML_V41_SYNTAX.value_close, DSML_V41_SYNTAX.key_open, DSML_V41_SYNTAX.call_close),
    end=("<｜end▁of▁sentence｜>", "<｜User｜>"),
    template=None,  # V4.1 ships a Python encoder, no Jinja template
    reasoning_doc="`<think>…</think>`, on by default (the prompt opens it; its chat prompt closes it)",
    calls_doc='`<｜DSML｜ calls>` of `<｜DSML｜ invoke name="F">` with '
    '`<｜DSML｜ parameter name="K" string="true|false">V</｜DSML｜ parameter>` (a space before each tag name)',
)

SPECS = (DEEPSEEK_V32, DEEPSEEK_V4, DEEPSEEK_V41)
