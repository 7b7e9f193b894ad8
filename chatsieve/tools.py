"""Tool definitions: normalising the request's `tools`, and typing raw argument text
by a tool's JSON Schema (shared by every codec whose values arrive untyped)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any
from urllib.parse import unquote

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
    if type(tools) is not list and (isinstance(tools, Mapping) or isinstance(tools, str | bytes)):
        raise ToolsError("tools must be a list of tool definitions")
    out: dict[str, dict] = {}
    for i, tool in enumerate(tools):  # (`type(x) is dict` first: JSON's objects skip the ABC's check)
        if type(tool) is not dict and not isinstance(tool, Mapping):
            raise ToolsError(f"tools[{i}] is not an object")
        fn = tool.get("function", tool)
        if (type(fn) is not dict and not isinstance(fn, Mapping)) or not isinstance(fn.get("name"), str):
            raise ToolsError(f"tools[{i}] has no function name; expected {{'type': 'function', 'function': {{'name': ...}}}}")
        params = fn.get("parameters") or {}
        out[fn["name"]] = params if type(params) is dict or isinstance(params, Mapping) else {}
    return out


def schema_types(schema: Mapping[str, Any] | None) -> set[str]:
    """The JSON types a schema admits (from `type`, `anyOf`/`oneOf`, `allOf`, `enum`,
    `const`); the Python names `int`, `float`, `bool`, `str`, `dict`, `list` count as theirs."""
    return _types(schema, {}, 0)


def _types(schema: Any, seen: dict[int, Any], depth: int) -> set[str]:
    if not _first_visit(schema, seen, depth):
        return set()
    t = schema.get("type")
    types: set[str] = set()
    if isinstance(t, str):
        types.add(_TYPE_ALIASES.get(t, t))
    elif isinstance(t, list):
        types.update(_TYPE_ALIASES.get(x, x) for x in t if isinstance(x, str))
    for key in ("anyOf", "oneOf"):
        for sub in _branches(schema, key):
            types |= _types(sub, seen, depth + 1)
    for sub in _branches(schema, "allOf"):  # every member holds: the types they all admit
        sub_types = _types(sub, seen, depth + 1)
        if sub_types:
            types = (types & sub_types) if types else sub_types
    if not types and isinstance(schema.get("enum"), list | tuple):
        types = {type_name(v) for v in schema["enum"]}
    if not types and "const" in schema:
        types = {type_name(schema["const"])}
    return types


def _branches(schema: Mapping[str, Any], key: str) -> Iterator[Mapping[str, Any]]:
    subs = schema.get(key)
    if isinstance(subs, list | tuple):
        yield from (s for s in subs if isinstance(s, Mapping))


def _first_visit(schema: Any, seen: dict[int, Any], depth: int) -> bool:
    """Whether one walk over a schema's combinators reaches this node for the first time (a
    node reached again, as through a reference loop, adds nothing), within the bounds."""
    if not isinstance(schema, Mapping) or len(seen) >= MAX_SCHEMA_NODES or depth > MAX_SCHEMA_DEPTH:
        return False
    key = id(schema._src) if isinstance(schema, ToolSchema) else id(schema)
    if key in seen:
        return False
    seen[key] = schema  # kept alive for the walk, so its id stays its own
    return True


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
    """The schema of property `key`: the object's own, or a branch's of its `anyOf` /
    `oneOf` / `allOf` (a root `oneOf` of alternative argument sets); where several
    declare it, any of them (`anyOf`)."""
    found = _sub_schemas(schema, lambda s: _get_mapping(s.get("properties"), key))
    return found[0] if len(found) == 1 else {"anyOf": found} if found else None


def property_names(schema: Mapping[str, Any] | None) -> set[str]:
    """Every property the schema declares, its `anyOf` / `oneOf` / `allOf` branches' too."""
    names: set[str] = set()
    for props in _sub_schemas(schema, lambda s: s.get("properties")):
        names.update(k for k in props if isinstance(k, str))
    return names


def items_schema(schema: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """The schema of an array's items (looked for in `anyOf` / `oneOf` / `allOf` too)."""
    found = _sub_schemas(schema, lambda s: _get_mapping(s, "items"))
    return found[0] if len(found) == 1 else {"anyOf": found} if found else None


def _get_mapping(m: Any, key: str) -> Mapping[str, Any] | None:
    v = m.get(key) if isinstance(m, Mapping) else None
    return v if isinstance(v, Mapping) else None


def _sub_schemas(schema: Any, pick: Callable[[Mapping[str, Any]], Any], seen: dict[int, Any] | None = None,
                 depth: int = 0) -> list:
    """`pick(s)` of the schema and of its combinator branches, the ones found."""
    seen = {} if seen is None else seen
    if not _first_visit(schema, seen, depth):
        return []
    own = pick(schema)
    out = [own] if isinstance(own, Mapping) else []
    for key in ("anyOf", "oneOf", "allOf"):
        for sub in _branches(schema, key):
            out += _sub_schemas(sub, pick, seen, depth + 1)
    return out


# ---- local references -------------------------------------------------------------------------
MAX_REF_HOPS = 16  # references followed in a row before one is refused
MAX_SCHEMA_NODES = 1000  # schema nodes one look through anyOf/oneOf/allOf reads
MAX_SCHEMA_DEPTH = 64  # and how deeply nested


class ToolSchema(Mapping):
    """A tool's JSON Schema read with its local `$ref`s followed (`#/$defs/X`,
    `#/definitions/X`, any JSON pointer into the tool's own schema), lazily: a node is
    resolved when it is reached, so a recursive schema costs only as deep as a value goes.
    A reference that loops, runs more than MAX_REF_HOPS in a row or points outside the
    document is refused: the node reads as its other keywords (untyped when it has none).
    Keywords beside a `$ref` apply with its target's, the node's own winning."""

    __slots__ = ("_node", "_root", "_src")

    def __init__(self, node: Mapping[str, Any], root: Mapping[str, Any]) -> None:
        self._root = root
        self._src = node  # the node as written (its identity: the same node however reached)
        self._node = _deref(node, root)

    def __getitem__(self, key: str) -> Any:
        return _wrap(self._node[key], self._root)

    def __iter__(self) -> Iterator[str]:
        return iter(self._node)

    def __len__(self) -> int:
        return len(self._node)

    def __eq__(self, other: object) -> bool:  # by identity: a recursive schema has no end to compare
        return isinstance(other, ToolSchema) and self._src is other._src and self._root is other._root

    def __hash__(self) -> int:
        return hash((id(self._src), id(self._root)))

    def __repr__(self) -> str:
        return f"ToolSchema({self._node!r})"


def typing_schemas(tools: Mapping[str, Any]) -> dict[str, Any]:
    """Normalised tools (name -> parameters) with each schema read through `ToolSchema`:
    what the codecs type raw values by."""
    return {name: ToolSchema(s, s) if type(s) is dict or isinstance(s, Mapping) else s for name, s in tools.items()}


def _wrap(v: Any, root: Mapping[str, Any]) -> Any:
    if isinstance(v, Mapping):
        return ToolSchema(v, root)
    if isinstance(v, list):
        return [_wrap(x, root) for x in v]
    return v


def _deref(node: Mapping[str, Any], root: Mapping[str, Any]) -> Mapping[str, Any]:
    seen: set[str] = set()
    while isinstance(ref := node.get("$ref"), str):
        rest = {k: v for k, v in node.items() if k != "$ref"}
        target = _pointer(root, ref) if ref not in seen and len(seen) < MAX_REF_HOPS else None
        if target is None:
            return rest  # refused: a loop, too long a chain, or not a local reference
        seen.add(ref)
        node = {**target, **rest} if rest else target
    return node


def rebase_refs(schema: Any, at: str) -> Any:
    """A copy of `schema` for use at JSON pointer `at` inside a larger schema: its local `$ref`s
    (`#/$defs/X`, `#`) rewritten to point where their targets now are (`#{at}/$defs/X`)."""
    if not at:
        return schema
    out: Any = {} if isinstance(schema, Mapping) else [] if isinstance(schema, list) else schema
    stack = [(schema, out)]  # a copy by hand: a schema may nest deeper than recursion goes
    while stack:
        src, dst = stack.pop()
        items = src.items() if isinstance(src, Mapping) else enumerate(src)
        for k, v in items:
            if isinstance(v, Mapping | list):
                c: Any = {} if isinstance(v, Mapping) else []
                stack.append((v, c))
            elif k == "$ref" and isinstance(v, str) and v.startswith("#") and isinstance(src, Mapping):
                c = "#" + at + v[1:]
            else:
                c = v
            if isinstance(dst, dict):
                dst[k] = c
            else:
                dst.append(c)
    return out


def _pointer(root: Mapping[str, Any], ref: str) -> Mapping[str, Any] | None:
    """The node a local reference (`#` and a JSON pointer) names, or None."""
    if not ref.startswith("#"):
        return None
    node: Any = root
    path = unquote(ref[1:])
    if path:
        if not path.startswith("/"):
            return None  # `#anchor`: anchors are not followed
        for part in path[1:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            if isinstance(node, Mapping):
                node = node.get(part)
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                return None
    return node if isinstance(node, Mapping) else None


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
