"""Engine-enforced structure: grammars that force a tool call in a family's own syntax, and
the JSON constraints behind `response_format`.

One builder per call syntax (`FormatSpec.call_syntax`), fed the tools' JSON Schemas; its
output is GBNF, which llama.cpp reads as `grammar` and xgrammar (vLLM `structured_outputs`,
SGLang `ebnf`) reads as EBNF. Control markers are written as token ids (`<[id]>`) where the
engine's grammar can name a token (llama.cpp): spelled as text they would be sub-word
pieces, which the gated parser rightly never takes for a call. What cannot be expressed
raises `GrammarError` (a 400 for the client).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .formats.registry import get as get_format
from .spec import FormatSpec
from .tools import normalize_tools, rebase_refs

# which engines can name a control token inside a grammar
TOKEN_GRAMMAR_ENGINES = frozenset({"llamacpp"})

# schema keywords that only describe (ignored) and those a grammar here cannot enforce
_ANNOTATIONS = frozenset(
    {"description", "title", "default", "examples", "$schema", "$id", "$comment", "format", "deprecated",
     "readOnly", "writeOnly", "strict"}
)  # fmt: skip
_UNSUPPORTED = (
    "pattern", "minLength", "maxLength", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
    "multipleOf", "uniqueItems", "contains", "minProperties", "maxProperties",
    "patternProperties", "propertyNames", "dependentRequired", "dependentSchemas", "if", "then", "else",
    "not", "allOf", "$ref", "$defs", "definitions", "prefixItems",
)  # fmt: skip


# Bounds on one grammar: schema nodes expanded (a node reached again through anyOf, oneOf or a type
# list costs one more, its subschemas are shared) and the GBNF's size; past them a GrammarError.
MAX_SCHEMA_NODES = 20_000
MAX_GRAMMAR_BYTES = 512 * 1024


class GrammarError(ValueError):
    """A constraint this family, engine or schema cannot express."""


class GrammarTooLarge(GrammarError):
    """The tools' schemas would make a grammar past the size bounds."""


@dataclass(frozen=True, slots=True)
class Constraint:
    """What to ask the engine for: a GBNF `grammar` (lazy, llama.cpp, when it has `triggers`), a
    JSON `schema`, any JSON object, or an xgrammar `structural_tag` (JSON text; strict_tools.py)."""

    kind: str  # "grammar" | "json_schema" | "json_object" | "structural_tag"
    grammar: str | None = None
    schema: dict | None = None
    calls: bool = False  # the reply is a JSON list of calls (chatsieve.call_list), parsed as the calls
    # Two phases: first generate unconstrained up to and including this reasoning end marker, then
    # continue constrained from the prompt plus that reasoning (engines whose grammar cannot leave
    # room for a reasoning block)
    reasoning_end: str | None = None
    answer_prefix: str | None = None  # written after reasoning_end, before the constrained answer
    structural_tag: str | None = None
    # a lazy grammar: free output until one of these (llama.cpp's (trigger type, value)) arms it;
    # preserved_tokens: the trigger words that are one token (llama-server's rule)
    triggers: tuple[tuple[int, str], ...] = ()
    preserved_tokens: tuple[str, ...] = ()


# ---------------------------------------------------------------- GBNF assembly


def _lit(text: str) -> str:
    """A GBNF string literal."""
    out = []
    for ch in text:
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


class _Rules:
    """Named GBNF rules, deduplicated by body."""

    def __init__(self) -> None:
        self.rules: dict[str, str] = {}
        self._by_body: dict[str, str] = {}
        self.size = 0  # characters of the rule bodies so far

    def add(self, hint: str, body: str) -> str:
        if body in self._by_body:
            return self._by_body[body]
        self.size += len(body) + len(hint) + 8
        if self.size > MAX_GRAMMAR_BYTES:
            raise GrammarTooLarge(
                f"the tools' schemas make a grammar of more than {MAX_GRAMMAR_BYTES} bytes: "
                "send fewer or smaller tool schemas"
            )
        # names from the schema path, cut to their last part: deep paths keep the grammar linear
        base = re.sub(r"[^a-zA-Z0-9]+", "-", hint[-48:]).strip("-").lower() or "r"
        if base[0].isdigit():
            base = "r" + base
        name, k = base, 1
        while name in self.rules:
            k += 1
            name = f"{base}{k}"
        self.rules[name] = body
        self._by_body[body] = name
        return name

    def text(self, root: str) -> str:
        lines = [f"root ::= {root}"]
        lines += [f"{name} ::= {body}" for name, body in self.rules.items()]
        return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class _Literals:
    """How a value language spells the JSON scalars (JSON itself, or Python literals)."""

    true: str
    false: str
    null: str


JSON_LITERALS = _Literals("true", "false", "null")
PYTHON_LITERALS = _Literals("True", "False", "None")

_PRIMITIVES = {
    "ws": "[ ]?",
    "string": '"\\"" char* "\\""',
    # escapes JSON and Python read alike (no "\\/", which Python keeps as two characters)
    "char": '[^"\\\\\\x00-\\x1f] | "\\\\" (["\\\\bfnrt] | "u" [0-9a-fA-F]{4})',
    "integer": '"-"? ("0" | [1-9] [0-9]{0,15})',
    "number": '"-"? ("0" | [1-9] [0-9]{0,15}) ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})?',
}


MAX_ITEM_BOUND = 64  # minItems / maxItems a grammar writes out (the engine expands each repetition)


def _item_bounds(schema: Mapping[str, Any], where: str) -> tuple[int, int | None]:
    """An array schema's (minItems, maxItems or None)."""
    bounds = []
    for key in ("minItems", "maxItems"):
        value = schema.get(key)
        if value is None:
            bounds.append(None)
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise GrammarError(f"{where}: {key!r} must be a non-negative integer")
        if value > MAX_ITEM_BOUND:
            raise GrammarError(f"{where}: {key!r} above {MAX_ITEM_BOUND} cannot be enforced by a grammar here")
        bounds.append(value)
    low, high = bounds[0] or 0, bounds[1]
    if high is not None and high < low:
        raise GrammarError(f"{where}: 'maxItems' is below 'minItems': no array satisfies the schema")
    return low, high


def _repeat(low: int, high: int | None) -> str:
    """GBNF's repetition suffix for `low` to `high` (None: unbounded) occurrences."""
    if high is None:
        return "*" if low == 0 else ("+" if low == 1 else f"{{{low},}}")
    if (low, high) == (0, 1):
        return "?"
    return "" if low == high == 1 else f"{{{low},{high}}}"  # high >= 1 here


def _check_keywords(schema: Any, where: str) -> None:
    if not isinstance(schema, Mapping):
        raise GrammarError(f"{where}: a schema must be an object")
    for key in _UNSUPPORTED:
        if key in schema:
            raise GrammarError(f"{where}: the JSON Schema keyword {key!r} cannot be enforced by a grammar here")


class ValueGrammar:
    """JSON Schema -> GBNF for one value language.

    Linear in the schema: each schema object is expanded once and its rule shared by every place
    that reaches it (an object's properties under each `anyOf` option or `type` entry are the same
    objects), and at most `MAX_SCHEMA_NODES` objects are expanded (`GrammarTooLarge`).
    """

    def __init__(self, rules: _Rules, literals: _Literals) -> None:
        self.r = rules
        self.lit = literals
        self._done: dict[int, str] = {}  # id(schema object) -> its rule
        self._alive: list[Any] = []  # keeps those objects alive, so no id is reused meanwhile
        self._expanded = 0
        for name, body in _PRIMITIVES.items():
            rules.rules.setdefault(name, body)
            rules._by_body.setdefault(body, name)

    def value(self, schema: Any, where: str) -> str:
        if not isinstance(schema, Mapping):
            return self._value(schema, where)
        done = self._done.get(id(schema))
        if done is not None:
            return done
        self._expanded += 1
        if self._expanded > MAX_SCHEMA_NODES:
            raise GrammarTooLarge(
                f"the tools' schemas need more than {MAX_SCHEMA_NODES} schema expansions for a grammar "
                "(anyOf, oneOf and type lists multiply them): send fewer or simpler tool schemas"
            )
        rule = self._done[id(schema)] = self._value(schema, where)
        self._alive.append(schema)
        return rule

    def _value(self, schema: Any, where: str) -> str:
        if schema is True or schema == {} or schema is None:
            return self._any()
        if schema is False:
            raise GrammarError(f"{where}: the schema 'false' allows no value")
        _check_keywords(schema, where)
        if "const" in schema:
            return self._constant(schema["const"], where)
        if "enum" in schema:
            values = schema["enum"]
            if not isinstance(values, list) or not values:
                raise GrammarError(f"{where}: 'enum' must be a non-empty array")
            return self.r.add(where + "-enum", " | ".join(self._constant(v, where) for v in values))
        for key in ("anyOf", "oneOf"):
            if key in schema:
                options = schema[key]
                if not isinstance(options, list) or not options:
                    raise GrammarError(f"{where}: {key!r} must be a non-empty array")
                base = {k: v for k, v in schema.items() if k != key}
                alts = [self.value({**base, **o} if isinstance(o, Mapping) else o, f"{where}-{i}")
                        for i, o in enumerate(options)]  # fmt: skip
                return self.r.add(where + "-alt", " | ".join(alts))
        types = schema.get("type")
        if isinstance(types, list):
            if not types:
                raise GrammarError(f"{where}: 'type' is an empty array")
            alts = [self.value({**schema, "type": t}, f"{where}-{t}") for t in types]
            return self.r.add(where + "-types", " | ".join(alts))
        if types is None:
            if "properties" in schema:
                types = "object"
            elif "items" in schema:
                types = "array"
            else:
                return self._any()
        if types == "string":
            return "string"
        if types == "integer":
            return "integer"
        if types == "number":
            return "number"
        if types == "boolean":
            return self.r.add("boolean-" + self.lit.true, f"{_lit(self.lit.true)} | {_lit(self.lit.false)}")
        if types == "null":
            return _lit(self.lit.null)
        if types == "array":
            items = schema.get("items", True)
            item = self.value(items, where + "-item")
            low, high = _item_bounds(schema, where)
            if high == 0:
                return _lit("[]")
            rest = None if high is None else high - 1  # items after the first, at most
            more = "" if rest == 0 else f' ("," ws {item})' + _repeat(max(low - 1, 0), rest)
            body = f"{item}{more}" if low else f"({item}{more})?"
            return self.r.add(where + "-array", f'"[" ws {body} "]"')
        if types == "object":
            return self._object(schema, where)
        raise GrammarError(f"{where}: unknown JSON Schema type {types!r}")

    def members(
        self, schema: Mapping[str, Any], where: str, key: Callable[[str], str], sep: str
    ) -> str | None:
        """`k1<sep>v1, k2<sep>v2` for an object's declared properties (required ones always, in
        order; optional ones may be left out); None when the schema declares none."""
        _check_keywords(schema, where)
        props = schema.get("properties")
        if props is None:
            return None
        if not isinstance(props, Mapping):
            raise GrammarError(f"{where}: 'properties' must be an object")
        required = schema.get("required") or []
        if not isinstance(required, list):
            raise GrammarError(f"{where}: 'required' must be an array")
        missing = [k for k in required if k not in props]
        if missing:
            raise GrammarError(f"{where}: required properties {missing} are not declared in 'properties'")
        pairs = []
        for k, s in props.items():
            pairs.append((k in required, f"{key(k)} {_lit(sep)} ws {self.value(s, f'{where}-{k}')}"))
        if not pairs:
            return '""'
        # after the first written member, each later one is "," + member; optional ones may be skipped
        tail = '""'
        tails = []
        for req, kv in reversed(pairs):
            tail = self.r.add(where + "-tail", f'"," ws {kv} {tail}' if req else f'("," ws {kv})? {tail}')
            tails.append(tail)
        tails.reverse()  # tails[i]: members i.. after something was written
        head = '""'
        for i in range(len(pairs) - 1, -1, -1):
            req, kv = pairs[i]
            after = tails[i + 1] if i + 1 < len(pairs) else '""'
            head = self.r.add(where + "-head", f"{kv} {after}" if req else f"{kv} {after} | {head}")
        return head

    def _object(self, schema: Mapping[str, Any], where: str) -> str:
        body = self.members(schema, where, lambda k: _lit(json.dumps(k, ensure_ascii=False)), ":")
        if body is None:
            return self._any_object()
        return self.r.add(where + "-object", f'"{{" ws {body} "}}"')

    def _constant(self, value: Any, where: str) -> str:
        if value is True:
            return _lit(self.lit.true)
        if value is False:
            return _lit(self.lit.false)
        if value is None:
            return _lit(self.lit.null)
        if isinstance(value, str | int | float):
            return _lit(json.dumps(value, ensure_ascii=False))
        if isinstance(value, list):
            return '"[" ' + ' ", " '.join(self._constant(v, where) for v in value) + ' "]"' if value else '"[]"'
        if isinstance(value, Mapping):
            parts = [f"{_lit(json.dumps(str(k), ensure_ascii=False) + ': ')} {self._constant(v, where)}"
                     for k, v in value.items()]  # fmt: skip
            return '"{" ' + ' ", " '.join(parts) + ' "}"' if parts else '"{}"'
        raise GrammarError(f"{where}: cannot express the constant {value!r}")

    def _any(self) -> str:
        self._any_object()
        return "value"

    def _any_object(self) -> str:
        if "value" not in self.r.rules:
            t, f, n = (_lit(x) for x in (self.lit.true, self.lit.false, self.lit.null))
            self.r.rules["value"] = f"object | array | string | number | {t} | {f} | {n}"
            self.r.rules["object"] = '"{" ws (string ":" ws value ("," ws string ":" ws value)*)? "}"'
            self.r.rules["array"] = '"[" ws (value ("," ws value)*)? "]"'
        return "object"


# ---------------------------------------------------------------- call syntaxes


@dataclass(frozen=True)
class _Ctx:
    spec: FormatSpec
    token: Callable[[str], str]  # a control marker as the grammar must write it


def _pythonic(ctx: _Ctx, tools: Mapping[str, dict], parallel: bool, rules: _Rules) -> str:
    """`[f(a=1, b="x"), g()]`: keyword arguments as Python literals."""
    values = ValueGrammar(rules, PYTHON_LITERALS)
    calls = []
    for name, params in tools.items():
        if not re.fullmatch(r"[A-Za-z_][\w.\-]*", name):
            raise GrammarError(f"the function name {name!r} cannot be written as a Python-style call")
        kwargs = values.members(params or {}, f"{name}-args", _kwarg, "=")
        if kwargs is None:  # no declared properties: any keyword arguments
            kw = rules.add("keyword", "[A-Za-z_] [A-Za-z0-9_]{0,63}")
            pair = f'{kw} "=" ws {values.value(True, "any")}'
            kwargs = rules.add("any-kwargs", f'({pair} ("," ws {pair})*)?')
        calls.append(rules.add(f"call-{name}", f"{_lit(name + '(')} {kwargs} {_lit(')')}"))
    call = rules.add("call", " | ".join(calls))
    more = f' ("," ws {call})*' if parallel else ""
    return f'"[" {call}{more} "]"'


def _kwarg(key: str) -> str:
    if not key.isidentifier():
        raise GrammarError(f"the argument name {key!r} cannot be a Python keyword argument")
    return _lit(key)


def _json_object_call(ctx: _Ctx, tools: Mapping[str, dict], parallel: bool, rules: _Rules,
                      *, args_key: str, open_: str, close: str, between: str) -> str:  # fmt: skip
    values = ValueGrammar(rules, JSON_LITERALS)
    calls = []
    for name, params in tools.items():
        args = values.value(params or {"type": "object"}, f"{name}-args")
        head = "{" + json.dumps("name") + ": " + json.dumps(name, ensure_ascii=False) + ", " + json.dumps(args_key) + ": "
        calls.append(rules.add(f"call-{name}", f"{open_} {_lit(head)} {args} {_lit('}')} {close}".strip()))
    call = rules.add("call", " | ".join(calls))
    more = f" ({_lit(between)} {call})*" if parallel else ""
    return f"{call}{more}"


def _tool_call_tags(ctx: _Ctx, tools: Mapping[str, dict], parallel: bool, rules: _Rules) -> str:
    """Hermes / Qwen: `<tool_call>\\n{"name": …, "arguments": {…}}\\n</tool_call>`."""
    spec = ctx.spec
    open_ = f"{ctx.token(spec.call_open[0])} {_lit(chr(10))}"
    close = f"{_lit(chr(10))} {ctx.token(spec.call_close[0])}"
    return _json_object_call(ctx, tools, parallel, rules, args_key="arguments", open_=open_, close=close,
                             between="\n")  # fmt: skip


def _llama3_json(ctx: _Ctx, tools: Mapping[str, dict], parallel: bool, rules: _Rules) -> str:
    """Llama 3.x: a bare `{"name": …, "parameters": {…}}`, `; ` between parallel calls."""
    return _json_object_call(ctx, tools, parallel, rules, args_key="parameters", open_="", close="",
                             between="; ")  # fmt: skip


CALL_SYNTAXES: dict[str, Callable[[_Ctx, Mapping[str, dict], bool, _Rules], str]] = {
    "pythonic": _pythonic,
    "tool_call_tags": _tool_call_tags,
    "llama3_json": _llama3_json,
}


def supported_formats() -> list[str]:
    """Formats whose tool calls can be forced (tool_choice required / named)."""
    from .formats import registry as formats

    return [n for n in formats.names() if formats.get(n).call_syntax in CALL_SYNTAXES]


def call_grammar(
    format: str | FormatSpec,
    tools: Sequence[Mapping[str, Any]],
    *,
    engine: str = "llamacpp",
    token_id: Callable[[str], int | None] | None = None,
    parallel: bool = True,
    thinking: bool | None = None,
    answer_schema: Mapping[str, Any] | None = None,
) -> str:
    """GBNF that makes the model answer with calls (at least one) to `tools`, in `format`'s syntax
    -- or, given `answer_schema`, with either those calls or JSON content matching it.

    `token_id(marker)` gives a control marker's single token id (the served tokenizer's);
    engines that cannot name a token in a grammar refuse families whose calls open with one.
    """
    spec = get_format(format)
    build = CALL_SYNTAXES.get(spec.call_syntax or "")
    if build is None:
        raise GrammarError(
            f"tool_choice cannot be enforced for format {spec.name!r}: no call grammar for its syntax; "
            f"supported: {', '.join(supported_formats())}"
        )
    normalized = normalize_tools(tools)
    if not normalized:
        raise GrammarError("tool_choice needs at least one tool to call")

    def token(marker: str) -> str:
        if engine not in TOKEN_GRAMMAR_ENGINES:
            raise GrammarError(
                f"format {spec.name!r}: its calls open with the control token {marker!r}, which a {engine} "
                "grammar cannot name; tool_choice can be enforced for it with the llamacpp backend"
            )
        tid = token_id(marker) if token_id is not None else None
        if tid is None:
            raise GrammarError(
                f"format {spec.name!r}: {marker!r} is not a single token of the served tokenizer, "
                "so a grammar cannot force it"
            )
        return f"<[{tid}]>"

    thinking_on = spec.default_thinking if thinking is None else thinking
    rules = _Rules()
    ctx = _Ctx(spec, token)
    root = build(ctx, normalized, parallel, rules)
    if answer_schema is not None:
        root = f"({root} | {ValueGrammar(rules, JSON_LITERALS).value(answer_schema, 'answer')})"
    if spec.reasoning_open and thinking_on:
        if engine not in TOKEN_GRAMMAR_ENGINES:
            raise GrammarError(
                f"format {spec.name!r} with thinking on: a {engine} grammar cannot leave room for the "
                "reasoning block; turn thinking off (chat_template_kwargs.enable_thinking: false)"
            )
        o, c = token(spec.reasoning_open[0]), token(spec.reasoning_close[0])
        rules.rules["reasoning"] = f"{o}? !{c}* {c} [\\n]*"
        root = f"reasoning? {root}"
    return rules.text(root)


def json_schema_grammar(schema: Mapping[str, Any]) -> str:
    """GBNF for JSON content matching `schema` (used where an engine takes no JSON Schema)."""
    rules = _Rules()
    root = ValueGrammar(rules, JSON_LITERALS).value(schema, "schema")
    return rules.text(root)


# ---------------------------------------------------------------- requests -> constraints


def response_format_constraint(response_format: Mapping[str, Any] | None) -> Constraint | None:
    """OpenAI's `response_format` as a constraint; None for `text` or absent."""
    if response_format is None:
        return None
    kind = response_format.get("type")
    if kind in (None, "text"):
        return None
    if kind == "json_object":
        return Constraint("json_object", schema={"type": "object"})
    if kind == "json_schema":
        wrapper = response_format.get("json_schema")
        schema = wrapper.get("schema") if isinstance(wrapper, Mapping) else None
        if schema is None:
            schema = {}
        if not isinstance(schema, Mapping):
            raise GrammarError("response_format.json_schema.schema must be an object")
        return Constraint("json_schema", schema=dict(schema))
    raise GrammarError(f"response_format.type must be 'text', 'json_object' or 'json_schema', got {kind!r}")


def check_schema_size(tools: Sequence[Mapping[str, Any]]) -> None:
    """`GrammarTooLarge` when the tools' schemas pass the grammar bounds, whatever constraint is
    sent: a JSON Schema handed to the engine is compiled there, with the same blow-up risk."""
    values = ValueGrammar(_Rules(), JSON_LITERALS)
    for tool in normalize_tools(tools).values():
        try:
            values.value(tool or {"type": "object"}, "size")
        except GrammarTooLarge:
            raise
        except GrammarError:
            pass  # keywords the engine's own JSON Schema support may take


def forced_calls(
    format: str | FormatSpec,
    *,
    engine: str,
    tools: Sequence[Mapping[str, Any]],
    token_id: Callable[[str], int | None] | None,
    parallel: bool,
    thinking: bool | None,
) -> Constraint:
    """The constraint that forces calls: the family's own syntax where the engine's grammar can
    express it (llama.cpp names control tokens; pythonic and Llama 3 JSON need none), else a JSON
    list of calls (`chatsieve.call_list`), which every engine takes as a JSON Schema."""
    return _calls_constraint(format, engine=engine, tools=tools, token_id=token_id, parallel=parallel,
                             thinking=thinking, answer_schema=None, what="tool_choice")


def calls_or_answer(
    format: str | FormatSpec,
    *,
    engine: str,
    tools: Sequence[Mapping[str, Any]],
    token_id: Callable[[str], int | None] | None,
    parallel: bool,
    thinking: bool | None,
    answer: Constraint,
) -> Constraint:
    """Tools with a response_format, as OpenAI treats them: the model may call the tools, and only
    an answer without calls must match the schema. The family's calls or the JSON in one grammar
    where the engine can express the calls; else a JSON Schema `anyOf` [a list of calls, the
    answer] (a reply that is a list of calls is parsed as the calls, any other as the content)."""
    return _calls_constraint(format, engine=engine, tools=tools, token_id=token_id, parallel=parallel,
                             thinking=thinking, answer_schema=answer.schema or {"type": "object"},
                             what="tools with response_format")


def call_list_schema(tools: Sequence[Mapping[str, Any]], *, parallel: bool) -> dict:
    """JSON Schema of a list of calls to `tools`: each item one tool's name and its arguments (the
    reply `chatsieve.call_list.CallListParser` reads as the calls)."""
    normalized = normalize_tools(tools)
    if not normalized:
        raise GrammarError("tool_choice needs at least one tool to call")
    one = len(normalized) == 1
    items = [
        {
            "type": "object",
            # the arguments' own `$ref`s, rewritten to where that schema now stands
            "properties": {"name": {"const": name},
                           "arguments": rebase_refs(dict(params), "/items" + ("" if one else f"/anyOf/{i}")
                                                    + "/properties/arguments") if params else {"type": "object"}},
            "required": ["name", "arguments"],
            "additionalProperties": False,
        }
        for i, (name, params) in enumerate(normalized.items())
    ]  # fmt: skip
    schema: dict[str, Any] = {"type": "array", "items": items[0] if one else {"anyOf": items},
                              "minItems": 1}  # fmt: skip
    if not parallel:
        schema["maxItems"] = 1
    return schema


def _calls_constraint(
    format: str | FormatSpec,
    *,
    engine: str,
    tools: Sequence[Mapping[str, Any]],
    token_id: Callable[[str], int | None] | None,
    parallel: bool,
    thinking: bool | None,
    answer_schema: Mapping[str, Any] | None,
    what: str,
) -> Constraint:
    """The family's calls (or, with `answer_schema`, the calls or that answer) in one grammar where
    the engine can express them, else as a JSON Schema for a list of calls (`anyOf` the answer)."""
    extra = {} if answer_schema is None else {"answer_schema": answer_schema}
    try:
        return Constraint("grammar", grammar=call_grammar(
            format, tools, engine=engine, token_id=token_id, parallel=parallel, thinking=thinking, **extra))
    except GrammarTooLarge:
        raise  # a bound on the request's schemas, not something another constraint can work around
    except GrammarError as own:
        spec = get_format(format)
        end = _reasoning_end(spec, thinking)
        check_schema_size(tools)
        schema = call_list_schema(tools, parallel=parallel)
        if answer_schema is not None:  # each keeps its own `$ref`s pointing at its own definitions
            schema = {"anyOf": [rebase_refs(schema, "/anyOf/0"), rebase_refs(answer_schema, "/anyOf/1")]}
        if end is not None and engine in TOKEN_GRAMMAR_ENGINES and spec.reasoning_open:
            try:  # llama.cpp: one grammar, the reasoning block and then the call list
                return Constraint("grammar", grammar=_after_reasoning(spec, end, token_id, schema), calls=True)
            except GrammarTooLarge:
                raise
            except GrammarError as e:
                raise GrammarError(f"{what} for format {spec.name!r} with thinking on: {own}; {e}") from None
        return Constraint("json_schema", schema=schema, calls=True, reasoning_end=end,
                          answer_prefix=_answer_prefix(spec) if end else None)


# Families whose reasoning is not a marked block, and the token that would end it and what opens
# the answer after it. gpt-oss is left out on purpose: a model that skips its analysis writes the
# final channel in the first, free phase, so its answer would go unconstrained; for gpt-oss the
# constraint covers the whole output instead (see docs/serving.md). Kept as the hook for a channel-routing
# first phase (stop at `<|message|>`, read the channel).
_REASONING_THEN_ANSWER: dict[str, tuple[str, str]] = {}


def _reasoning_end(spec: FormatSpec, thinking: bool | None) -> str | None:
    """The marker that ends the reasoning when thinking is on for `spec`, else None."""
    thinking_on = spec.default_thinking if thinking is None else thinking
    if not thinking_on:
        return None
    if spec.name in _REASONING_THEN_ANSWER:
        return _REASONING_THEN_ANSWER[spec.name][0]
    return spec.reasoning_close[0] if spec.reasoning_open and spec.reasoning_close else None


# Families whose reasoning is a message of its own: what ends it and opens the next message (the
# model then picks its channel). Kept apart from _REASONING_THEN_ANSWER, which is the constrained
# two-phase path's (empty for gpt-oss, whose constraint covers its whole output).
_REASONING_MESSAGE_END = {"gpt_oss": "<|end|><|start|>assistant"}


def reasoning_close(format: str | FormatSpec, thinking: bool | None) -> str | None:
    """What closes `format`'s reasoning and opens the next part of the answer, when thinking is on
    (a reasoning budget writes it where the budget ends); None when there is no such marker."""
    spec = get_format(format)
    if spec.name in _REASONING_MESSAGE_END:
        thinking_on = spec.default_thinking if thinking is None else thinking
        return _REASONING_MESSAGE_END[spec.name] if thinking_on else None
    end = _reasoning_end(spec, thinking)
    prefix = _answer_prefix(spec)
    if end is None or prefix is None:
        return end
    return end + prefix.split("<|channel|>")[0]


def _answer_prefix(spec: FormatSpec) -> str | None:
    entry = _REASONING_THEN_ANSWER.get(spec.name)
    return entry[1] if entry else None


def json_after_reasoning(spec: FormatSpec, constraint: Constraint, *, engine: str, thinking: bool | None,
                         token_id: Callable[[str], int | None] | None) -> Constraint:
    """A response_format's JSON `constraint` for a family that may reason first: two phases (the
    reasoning, then the JSON) where the engine takes them, a GBNF with room for the reasoning on
    llama.cpp, or the JSON as the whole output where there is no reasoning to leave room for."""
    end = _reasoning_end(spec, thinking)
    if end is None:
        return constraint
    if engine not in TOKEN_GRAMMAR_ENGINES:  # reasoning first, then the JSON (two phases)
        return Constraint(constraint.kind, schema=constraint.schema, reasoning_end=end,
                          answer_prefix=_answer_prefix(spec))
    if not spec.reasoning_open:  # llama.cpp, gpt-oss: the JSON as the whole output, as before
        return constraint
    return Constraint("grammar", grammar=_after_reasoning(spec, end, token_id, constraint.schema or {"type": "object"}))


def _after_reasoning(spec: FormatSpec, end: str, token_id: Callable[[str], int | None] | None,
                     schema: Mapping[str, Any]) -> str:
    """A GBNF (llama.cpp) for an optional reasoning block, its markers by token id, and then JSON
    valid against `schema`."""
    tokens = []
    for marker in (spec.reasoning_open[0], end):
        tid = token_id(marker) if token_id is not None else None
        if tid is None:
            raise GrammarError(f"format {spec.name!r}: {marker!r} is not a single token of the served tokenizer, "
                               "so a grammar cannot leave room for the reasoning; turn thinking off "
                               "(chat_template_kwargs.enable_thinking: false)")
        tokens.append(f"<[{tid}]>")
    rules = _Rules()
    root = ValueGrammar(rules, JSON_LITERALS).value(schema, "schema")
    rules.rules["reasoning"] = f"{tokens[0]}? !{tokens[1]}* {tokens[1]} [ \\t\\n]*"
    return rules.text(f"reasoning? {root}")
