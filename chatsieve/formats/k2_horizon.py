"""IFM K2-Horizon: three reasoning envelopes chosen by `reasoning_effort` (`<ifm|think>`,
`<ifm|think_fast>`, `<ifm|think_faster>`; any of their closers ends any of them, as the 3.7B
ends every effort with `</ifm|think>`), and `<ifm|tool_calls>` sections of
`<ifm|tool_call>…</ifm|tool_call>` calls whose body is JSON, XML or typed XML per request
(`chat_template_kwargs.tool_call_format`), told apart on the wire."""

from __future__ import annotations

from ..args.k2_horizon import (
    ARG_KEY,
    ARG_KEY_END,
    ARG_TYPE,
    ARG_TYPE_END,
    ARG_VALUE,
    ARG_VALUE_END,
    CALL,
    CALL_END,
    CALLS,
    CALLS_END,
    K2HorizonCallCodec,
)
from ..spec import FormatSpec

K2_HORIZON = FormatSpec(
    name="k2_horizon",
    description="IFM K2-Horizon (three reasoning envelopes; JSON, XML or typed-XML calls)",
    aliases=("k2-horizon", "k2horizon", "ifm_k2_horizon", "k2_v3", "k2v3"),
    reasoning_open=("<ifm|think>", "<ifm|think_fast>", "<ifm|think_faster>"),
    reasoning_close=("</ifm|think>", "</ifm|think_fast>", "</ifm|think_faster>"),
    default_thinking=True,
    thinking_starts_in_reasoning=True,  # the template opens the envelope in the prompt
    # each call is a region of its own; the section's tags around them are removed, so a call
    # without its section (SGLang accepts it) or a section never closed still reads
    call_open=(CALL,),
    call_close=(CALL_END,),
    codec=K2HorizonCallCodec,
    inner=(ARG_KEY, ARG_KEY_END, ARG_VALUE, ARG_VALUE_END, ARG_TYPE, ARG_TYPE_END),
    end=("<|ifm|im_end|>", "<|ifm|endoftext|>", "<|ifm|im_start|>"),
    strip=(CALLS, CALLS_END),
    reasoning_doc="`<ifm|think>…</ifm|think>` (high), `<ifm|think_fast>` (medium), `<ifm|think_faster>` (low); "
    "opened by the prompt; any closer ends any envelope",
    calls_doc="`<ifm|tool_calls><ifm|tool_call>NAME<ifm|arg_key>K</ifm|arg_key><ifm|arg_value>V</ifm|arg_value>"
    '</ifm|tool_call></ifm|tool_calls>`, `<ifm|arg_type>T</ifm|arg_type>` after a key (typed), or `{"name", '
    '"arguments"}` (json)',
)

SPECS = (K2_HORIZON,)
