"""Tool definitions: normalising the request's `tools`, and typing raw argument text
by a tool's JSON Schema (shared by every codec whose values arrive untyped)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

_INT = re.compile(r"[+-]?\d+")
_FLOAT = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")


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
    """The JSON types a schema admits (from `type`, `anyOf`/`oneOf`, `enum`)."""
    if not isinstance(schema, Mapping):
        return set()
    t = schema.get("type")
    types: set[str] = set()
    if isinstance(t, str):
        types.add(t)
    elif isinstance(t, list):
        types.update(x for x in t if isinstance(x, str))
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
    objects and arrays are read as such. Anything else stays the raw string:
    never lost, never raised.
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
    if "null" in types and s.lower() in _NULLS:
        return None
    if "string" in types:
        return raw
    if not types or types & {"object", "array"}:
        if s[:1] in ("{", "["):
            try:
                return json.loads(s)
            except ValueError:
                pass
        if not types:
            ok, v = literal_value(s)
            if ok:
                return v
    return raw
