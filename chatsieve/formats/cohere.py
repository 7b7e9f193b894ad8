"""Cohere Command R7B / Command A: `<|START_THINKING|>…<|END_THINKING|>` reasoning,
`<|START_RESPONSE|>…<|END_RESPONSE|>` around the answer (removed), and
`<|START_ACTION|>[{"tool_call_id", "tool_name", "parameters"}, …]<|END_ACTION|>` calls."""

from __future__ import annotations

from ..args.llama3 import _CallObject
from ..args.mistral import MistralCallList
from ..spec import FormatSpec


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
        "command-r",
    ),
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
    reasoning_doc="`<|START_THINKING|>…<|END_THINKING|>` (the model opens it)",
    calls_doc='`<|START_ACTION|>[{"tool_call_id", "tool_name", "parameters"}, …]<|END_ACTION|>`',
    tokenizer_doc="",  # no tokenizer of this family in shared/models: text mode
    template="llama.cpp/models/templates/CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja",
)

SPECS = (COHERE_COMMAND,)
