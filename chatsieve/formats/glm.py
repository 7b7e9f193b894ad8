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

# inclusionAI Ling 3.0 / Bailing V3: GLM-4.7's calls (newlines optional), roles `<role>NAME</role>`,
# the prompt opens `<think>`. Its turn end `<|role_end|>` is also written as ordinary text
# tokens: as text it must end the turn too, never leak (`spelled_end`).
class SpelledEnd:
    """Content past a turn-end marker the model spelled in ordinary tokens (Ling 3 writes its
    `<|role_end|>` so): the marker and all after it are dropped as text after the end of the turn.
    As its own token id the marker is the format's `end` and never reaches content."""

    def __init__(self, marker: str) -> None:
        self.marker = marker
        self._held = ""
        self._held_at = 0
        self._done = False

    @property
    def idle(self) -> bool:
        return not self._held and not self._done

    def mark(self) -> None:
        pass

    def write(self, text: str, start: int) -> list[tuple]:
        if self._done:
            return [(text, start, "text after the end of the turn")] if text else []
        text, start = self._held + text, (self._held_at if self._held else start)
        self._held = ""
        at = text.find(self.marker)
        if at >= 0:
            self._done = True
            out: list[tuple] = [(text[:at], start)] if at else []
            return [*out, (text[at:], start + at, "text after the end of the turn")]
        keep = len(text)
        for n in range(min(len(self.marker) - 1, len(text)), 0, -1):
            if self.marker.startswith(text[-n:]):
                keep = len(text) - n
                break
        self._held, self._held_at = text[keep:], start + keep
        return [(text[:keep], start)] if keep else []

    def finish(self) -> list[tuple]:
        held, self._held = self._held, ""
        return [(held, self._held_at)] if held else []


_LING_END = ("<|role_end|>", "<role>HUMAN</role>", "<role>OBSERVATION</role>", "<role>SYSTEM</role>")

LING3 = dataclasses.replace(
    GLM47,
    name="ling3",
    description="inclusionAI Ling 3.0 / Bailing V3 (GLM-4.7 calls; the prompt opens <think>)",
    aliases=("ling-3", "ling_3", "ling3.0", "ling-3.0", "bailing_v3", "bailing-v3", "bailingv3"),
    codec=xml_kv_codec("Ling3CallCodec", dataclasses.replace(GLM_SYNTAX, structural=("</tool_call>", *_LING_END))),
    end=_LING_END,
    content_filter=lambda thinking: SpelledEnd("<|role_end|>"),
    strip=("<role>ASSISTANT</role>",),
    template="llama.cpp/models/templates/inclusionai-ling-3.0-flash.jinja",
    reasoning_doc="the prompt opens `<think>`; on by default",
    calls_doc="as `glm47` (newlines optional)",
    tokenizer_doc="",
)

# Poolside Laguna: GLM-style calls (a newline after the name optional), roles `<user>…</user>`,
# `<assistant>…</assistant>`. S 2.1's prompt opens `<think>`, the XS templates close it: the
# start state comes from the rendered prompt; without one, as S 2.1.
_LAGUNA_END = ("</assistant>", "<user>", "<system>", "<tool_response>")

LAGUNA = dataclasses.replace(
    GLM47,
    name="laguna",
    description="Poolside Laguna (GLM-style calls; <think>, opened or closed by the prompt)",
    aliases=("poolside", "poolside_v1", "poolside-v1", "laguna-s", "laguna-xs", "laguna_s", "laguna_xs"),
    codec=xml_kv_codec("LagunaCallCodec", dataclasses.replace(GLM_SYNTAX, structural=("</tool_call>", *_LAGUNA_END))),
    end=_LAGUNA_END,
    strip=("<assistant>",),
    template="llama.cpp/models/templates/poolside-Laguna-S-2.1.jinja",
    templates=("llama.cpp/models/templates/poolside-Laguna-XS.2.jinja",),
    reasoning_doc="`<think>…</think>`; the prompt opens it (S 2.1) or closes it (XS)",
    calls_doc="`<tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value></tool_call>`",
    tokenizer_doc="",
)

SPECS = (GLM45, GLM47, LING3, LAGUNA)
