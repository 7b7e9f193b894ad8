"""Tool definitions: normalising the request's `tools`, and typing raw argument text
by a tool's JSON Schema (shared by every codec whose values arrive untyped)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from .args.json import JsonScanner  # keeps its own stack: any depth, no recursion

_INT = re.compile(r"[+-]?\d+")
_FLOAT = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
# a number exactly as JSON writes one: no leading zeros, `+`, or bare `1.` / `.5`
JSON_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?")
# Python type names people write in tool schemas, as JSON Schema types
_TYPE_ALIASES = {
    "int": "integer", "float": "number", "bool": "boolean", "str": "string", "dict": "object", "list": "array",
}  # fmt: skip


class ToolsError(ValueError):
    """The `tools` given are not OpenAI tool definitions."""


def normalize_tools(tools: Iterable[Mapping[str, Any]] | None) -> dict[str, dict]:
    """Map tool name -> its parameters schema; accepts OpenAI and flat definitions."""
    if tools is None:
        return {}
    if isinstance(tools, Mapping) or isinstance(tools, str | bytes):
        raise ToolsError("tools must be a list of tool definitions")
    out: dict[str, dict] = {}
    for i, tool in enumerate(tools):
        if not isinstance(tool, Mapping):
            raise ToolsError(f"tools[{i}] is not an object")
        fn = tool.get("function", tool)
        if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
            raise ToolsError(f"tools[{i}] has no function name; expected {{'type': 'function', 'function': {{'name': ...}}}}")
        params = fn.get("parameters") or {}
        out[fn["name"]] = params if isinstance(params, Mapping) else {}
    return out


def schema_types(schema: Mapping[str, Any] | None) -> set[str]:
    """The JSON types a schema admits (from `type`, `anyOf`/`oneOf`, `enum`); the
    Python names `int`, `float`, `bool`, `str`, `dict`, `list` count as theirs."""
    if not isinstance(schema, Mapping):
        return set()
    t = schema.get("type")
    types: set[str] = set()
    if isinstance(t, str):
        types.add(_TYPE_ALIASES.get(t, t))
    elif isinstance(t, list):
        types.update(_TYPE_ALIASES.get(x, x) for x in t if isinstance(x, str))
    for key in ("anyOf", "oneOf"):
        for sub in schema.get(key) or ():
            types |= schema_types(sub)
    if not types and "enum" in schema:
        types = {type_name(v) for v in schema["enum"]}
    return types


def type_name(v: Any) -> str:
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "number"
    if isinstance(v, str):
        return "string"
    if v is None:
        return "null"
    return "array" if isinstance(v, list) else "object"


def property_schema(schema: Mapping[str, Any] | None, key: str) -> Mapping[str, Any] | None:
    if not isinstance(schema, Mapping):
        return None
    props = schema.get("properties")
    if isinstance(props, Mapping) and isinstance(props.get(key), Mapping):
        return props[key]
    return None


def items_schema(schema: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    if isinstance(schema, Mapping) and isinstance(schema.get("items"), Mapping):
        return schema["items"]
    return None


_NULLS = {"null", "none", "nil"}


def literal_value(raw: str) -> tuple[bool, Any]:
    """A bare token read as a JSON literal: numbers, true/false, null/none/nil (any case)."""
    s = raw.strip()
    low = s.lower()
    if low in ("true", "false"):
        return True, low == "true"
    if low in _NULLS:
        return True, None
    if _INT.fullmatch(s):
        return True, int(s)
    if _FLOAT.fullmatch(s):
        f = float(s)
        if f == f and f not in (float("inf"), float("-inf")):
            return True, f
    return False, None


def coerce_raw(raw: str, schema: Mapping[str, Any] | None) -> Any:
    """Type raw argument text by its schema.

    A declared string keeps the text as is; integer/number/boolean/null coerce
    matching text; object/array parse JSON. Without a schema, JSON literals,
    objects and arrays are read as such, and a number only when written exactly
    as JSON writes one (`02134`, `+1`, `1.` stay text: a zip code keeps its zero).
    Anything else stays the raw string: never lost, never raised.
    """
    types = schema_types(schema)
    if types and types <= {"string"}:
        return raw
    s = raw.strip()
    if types & {"integer", "number"}:
        ok, v = literal_value(s)
        if ok and isinstance(v, int | float) and not isinstance(v, bool):
            if isinstance(v, float) and v.is_integer() and "number" not in types:
                return int(v)
            return v
    if "boolean" in types and s.lower() in ("true", "false"):
        return s.lower() == "true"
    if "null" in types and (s == "null" if "string" in types else s.lower() in _NULLS):
        return None  # string-or-null: only JSON's null is null (`None`, `NULL`, `nil` are text)
    if "string" in types:
        return raw
    if not types or types & {"object", "array"}:
        if s[:1] in ("{", "["):
            try:
                return json.loads(s)
            except (ValueError, RecursionError):  # RecursionError: nested too deep to decode
                pass
        if not types:
            ok, v = literal_value(s)
            if ok and (not isinstance(v, int | float) or isinstance(v, bool) or JSON_NUMBER.fullmatch(s)):
                return v
    return raw


def coerce_json(raw: str, schema: Mapping[str, Any] | None) -> str:
    """`coerce_raw` as compact JSON text. Numbers keep the digits they were written
    with (`2.50`, `0.1000000000000000000001`), never a float's rounding; objects
    and arrays are copied token by token (any depth, nothing decoded)."""
    types = schema_types(schema)
    s = raw.strip()
    if s[:1] in ("{", "[") and (not types or (types & {"object", "array"} and "string" not in types)):
        text = json_text(s)  # scanned, not decoded: repeated keys stay visible to the engine
        if text is not None:
            return text
    value = coerce_raw(raw, schema)
    if JSON_NUMBER.fullmatch(s) and (
        isinstance(value, float) or (type(value) is int and s.lstrip("-").isdigit())
    ):
        return s  # as written: `-0`, `2.50` and long decimals keep their text
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except ValueError:  # NaN or Infinity read from the text: keep the text
        return json.dumps(raw, ensure_ascii=False)


def json_text(s: str) -> str | None:
    """One whole JSON object or array as compact JSON text, or None if `s` is not one."""
    sc = JsonScanner()
    used = sc.feed(s)
    if sc.error is not None or not sc.done or s[used:].strip():
        return None
    return sc.take()
