"""IFM K2-Horizon call bodies: one `<ifm|tool_call>` region holds a JSON object
(`{"name", "arguments"}`, tool_call_format=json) or XML key/value pairs
(`NAME<ifm|arg_key>K</ifm|arg_key><ifm|arg_value>V</ifm|arg_value>`, xml), the typed variant
adding `<ifm|arg_type>T</ifm|arg_type>` after each key (xml_typed). The body's first character
says which; a type tag is dropped (values are typed by the tool's schema)."""

from __future__ import annotations

from .dispatch import DispatchCodec
from .json_call import JsonCallCodec
from .xml_kv import XmlKvCodec, XmlKvSyntax

ARG_KEY, ARG_KEY_END = "<ifm|arg_key>", "</ifm|arg_key>"
ARG_VALUE, ARG_VALUE_END = "<ifm|arg_value>", "</ifm|arg_value>"
ARG_TYPE, ARG_TYPE_END = "<ifm|arg_type>", "</ifm|arg_type>"
CALL, CALL_END = "<ifm|tool_call>", "</ifm|tool_call>"
CALLS, CALLS_END = "<ifm|tool_calls>", "</ifm|tool_calls>"

K2_HORIZON_SYNTAX = XmlKvSyntax(
    call_open="",  # one call per `<ifm|tool_call>` region, its name first
    name_close=(),
    call_close="",
    key_open=ARG_KEY,
    key_close=ARG_KEY_END,
    value_open=ARG_VALUE,
    value_close=ARG_VALUE_END,
    type_open=ARG_TYPE,  # xml_typed: dropped, the schema types the value
    type_close=ARG_TYPE_END,
    structural=(CALL_END, CALLS_END, "<|ifm|im_end|>", "<|ifm|endoftext|>"),
    # the section and call tags the template writes around a call: inside a value, an example's
    openers=(CALLS, CALL),
    closers=(CALL_END, CALLS_END),
)


class K2HorizonXmlCodec(XmlKvCodec):
    """xml and xml_typed bodies: a `<ifm|arg_type>…</ifm|arg_type>` between a key and its value
    is dropped whole; inside a value (an example's) it is the value's text."""

    syntax = K2_HORIZON_SYNTAX


def _choose(head: str):
    body = head.lstrip(" \t\r\n")
    if not body:
        return None
    return JsonCallCodec if body[0] == "{" else K2HorizonXmlCodec


class K2HorizonCallCodec(DispatchCodec):
    """A `<ifm|tool_call>` region: JSON or XML, by its first character."""

    choose = staticmethod(_choose)
