"""Salesforce xLAM: a reply that is a JSON list of `{"name", "arguments"}` objects;
also inside `<tool_call>…</tool_call>` or after `[TOOL_CALLS]`; `<think>` reasoning
(xLAM-2 on Qwen) when the model writes it."""

from __future__ import annotations

from ..args.base import CallContext, RegionCodec
from ..args.dispatch import JsonCallsCodec
from ..args.mistral import MistralCallList
from ..spec import FormatSpec


def _xlam_codec(ctx: CallContext) -> RegionCodec:
    # a bare reply is one list (confirmed by its first call's name); a tagged block
    # holds a list or a lone object
    return MistralCallList(ctx) if ctx.tentative else JsonCallsCodec(ctx)


XLAM = FormatSpec(
    name="xlam",
    description="Salesforce xLAM (a JSON call list as the reply, or in <tool_call> / after [TOOL_CALLS])",
    aliases=("xlam-2", "xlam2", "salesforce_xlam", "llama-xlam", "qwen-xlam"),
    reasoning_open=("<think>",),
    reasoning_close=("</think>",),
    default_thinking=False,
    call_open=("<tool_call>", "[TOOL_CALLS]"),
    call_close=("</tool_call>",),
    codec=_xlam_codec,
    # a reply that starts with `[` may be a call list: a call only when its first
    # call names a tool of the request, else it stays content
    content_call_start=("[",),
    end=("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|im_start|>", "<|start_header_id|>"),
    strip=("</tool_call>",),
    reasoning_doc="`<think>…</think>` when the model writes it",
    calls_doc='`[{"name", "arguments"}, …]` as the reply, or in `<tool_call>…</tool_call>` / after `[TOOL_CALLS]`',
    tokenizer_doc="",  # no tokenizer of this family in shared/models: text mode
    template=None,
)

SPECS = (XLAM,)
