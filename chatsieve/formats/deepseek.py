"""DeepSeek R1, V3 and V3.1: `<think>…</think>` reasoning and `<｜tool▁calls▁begin｜>`
sections of `<｜tool▁call▁begin｜>…<｜tool▁call▁end｜>` calls (V3.2/V4 DSML are elsewhere).

R1 and V3 write `function<｜tool▁sep｜>NAME` and a ```json fenced object; V3.1 writes
`NAME<｜tool▁sep｜>{…}`. One codec reads both bodies, so a V3.1 model served as V3 (or
the reverse) still has its calls parsed. The three differ in their reasoning defaults:

- R1 thinks always: its prompt opens the block (newer templates end the generation
  prompt with `<think>\\n`; older ones leave `<think>` to the model), so output is
  reasoning until `</think>`, and no `</think>` means all of it was reasoning.
- V3 and V3.1 think only when asked (V3.1's template then ends the prompt with
  `<think>`, else with `</think>`): thinking off, output is content; on, it starts
  inside the block. A `prompt=` given to the parser decides from its last marker.
"""

from __future__ import annotations

import dataclasses

from ..args.deepseek import CALL_BEGIN, CALL_END, CALLS_BEGIN, CALLS_END, SEP, DeepSeekCallCodec
from ..spec import FormatSpec, ToolPrompt

DEEPSEEK_R1 = FormatSpec(
    name="deepseek_r1",
    description="DeepSeek R1 (reasoning until </think>; function<sep>NAME + ```json calls)",
    aliases=("deepseek-r1", "deepseek_r1_0528", "deepseek-r1-0528"),
    reasoning_open=("<think>",),
    reasoning_close=("</think>",),
    default_thinking=True,
    thinking_starts_in_reasoning=True,
    # a missing section begin: the first call's begin marker opens the section
    call_open=(CALLS_BEGIN, CALL_BEGIN),
    call_close=(CALLS_END,),
    codec=DeepSeekCallCodec,
    inner=(SEP, CALL_END),
    end=(
        "<｜end▁of▁sentence｜>",
        "<｜User｜>",
        "<｜Assistant｜>",
        "<｜tool▁outputs▁begin｜>",
        "<｜tool▁output▁begin｜>",
    ),
    strip=("<｜tool▁output▁end｜>", "<｜tool▁outputs▁end｜>", "<｜begin▁of▁sentence｜>"),
    template="deepseek/chat_template.r1.jinja",
    reasoning_doc="always on: `</think>` ends the block the prompt opened",
    calls_doc="`<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME` + fenced JSON "
    "`<｜tool▁call▁end｜>…<｜tool▁calls▁end｜>`",
    tokenizer_doc="deepseek",
)

DEEPSEEK_V3 = dataclasses.replace(
    DEEPSEEK_R1,
    name="deepseek_v3",
    description="DeepSeek V3 / V3-0324 (thinking off unless asked; calls as R1)",
    aliases=("deepseek-v3", "deepseek_v3_0324", "deepseek-v3-0324"),
    default_thinking=False,
    template="deepseek/chat_template.v3.jinja",
    reasoning_doc="`<think>…</think>`, off unless asked",
    calls_doc="as `deepseek_r1`",
    # its template renders a message's calls only when the content is null, so those of a message
    # with text would vanish: they are written after the text, in the family's call syntax
    tool_prompt=ToolPrompt(
        system=None,  # no documented tool prompt: a request with tools is refused
        calls="deepseek",
        source="DeepSeek's own templates: V3's writes each call as `<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME"
        "\\n```json\\nARGS\\n```<｜tool▁call▁end｜>`; R1's (the same vocabulary and call syntax) writes a "
        "message's text and then its `<｜tool▁calls▁begin｜>…<｜tool▁calls▁end｜>` section",
    ),
)

# The DeepSeek-V3.1 model card, section "ToolCall" (huggingface.co/deepseek-ai/DeepSeek-V3.1,
# README.md): its template renders no tool definitions; the prompt is
# `{system prompt}\n\n{tool_description}<｜User｜>...` with the tool description below, word for word
# (one `### name` block per tool; `{additional_tool_calls}` is literal text of the card).
DEEPSEEK_V31_TOOL_PROMPT = ToolPrompt(
    system=(
        "## Tools\nYou have access to the following tools:\n"
        "{% for tool in tools %}{% set f = tool.function %}{{ '\\n' }}### {{ f.name }}\nDescription: "
        "{{ f.description | default('') }}\n\nParameters: {{ (f.parameters | default({})) | tojson }}\n"
        "{% endfor %}{{ '\\n' }}IMPORTANT: ALWAYS adhere to this exact format for tool use:\n"
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>tool_call_name<｜tool▁sep｜>tool_call_arguments"
        "<｜tool▁call▁end｜>{additional_tool_calls}<｜tool▁calls▁end｜>\n\nWhere:\n"
        "- `tool_call_name` must be an exact match to one of the available tools\n"
        "- `tool_call_arguments` must be valid JSON that strictly follows the tool's Parameters Schema\n"
        "- For multiple tool calls, chain them directly without separators or spaces"
    ),
    source="https://huggingface.co/deepseek-ai/DeepSeek-V3.1 (model card README.md, section \"ToolCall\": "
    "`<｜begin▁of▁sentence｜>{system prompt}\\n\\n{tool_description}<｜User｜>{query}<｜Assistant｜></think>` and the "
    "tool_description text)",
)

DEEPSEEK_V31 = dataclasses.replace(
    DEEPSEEK_R1,
    name="deepseek_v31",
    description="DeepSeek V3.1 / V3.1-Terminus (thinking off unless asked; NAME<sep>{json} calls)",
    aliases=("deepseek-v3.1", "deepseek_v3.1", "deepseek_v3_1", "deepseek-v3.1-terminus"),
    default_thinking=False,
    template="deepseek/chat_template.v3.1.jinja",
    reasoning_doc="`<think>…</think>`, off unless asked",
    calls_doc="`<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{json}<｜tool▁call▁end｜>` in a `<｜tool▁calls▁begin｜>` section",
    tool_prompt=DEEPSEEK_V31_TOOL_PROMPT,
)

# Deep Cogito v2: DeepSeek's call tokens; `<think>` only when thinking is enabled, and then the
# output starts inside it.
COGITO = dataclasses.replace(
    DEEPSEEK_V3,
    name="cogito",
    description="Deep Cogito v2 (DeepSeek calls; the output starts in <think> when thinking is on)",
    aliases=("cogito-v2", "cogito_v2", "deep-cogito", "deepcogito"),
    thinking_starts_in_reasoning=True,
    template=None,
    tool_prompt=None,
    reasoning_doc="`<think>…</think>` when thinking is on (the output starts inside it), off by default",
)

SPECS = (DEEPSEEK_R1, DEEPSEEK_V3, DEEPSEEK_V31, COGITO)
