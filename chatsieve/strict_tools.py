"""`strict` tools with `tool_choice: auto`: the engine constraint that holds a call's arguments to
its tool's schema once the model has chosen to call, leaving it free to answer in text; and the
check after the fact where no engine constraint can be sent.

Once the model writes its family's call opener, the call must go on in the family's own syntax
with arguments the schema admits (a non-strict tool offered beside strict ones gets an
unconstrained body: it must stay callable after the shared opener):

- vLLM and SGLang: an xgrammar structural tag (`triggered_tags`, the opener as trigger; JSON-bodied
  families' arguments object, the XML key/value families' per-parameter values through xgrammar's
  `glm_xml` / `qwen_xml` styles, harmony's `<|message|>` body), sent as vLLM's
  `structured_outputs.structural_tag` or SGLang's `structural_tag` sampling parameter.
- llama.cpp: a lazy GBNF grammar (`grammar_lazy`), armed by the opener (`grammar_triggers`; a
  trigger word that is one token is also in `preserved_tokens`, as llama-server demands), the
  family's control tokens named by id.

Where neither can be built (a family whose call syntax has no strict builder here, a schema the
GBNF builder cannot enforce, another engine) every strict tool's call is validated after the
fact (`StrictCheck`): one whose arguments fail is not returned, and the turn ends with a note
saying why. docs/serving.md, "Strict tools", has the table.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .grammar import (
    _ANNOTATIONS,
    JSON_LITERALS,
    Constraint,
    GrammarError,
    GrammarTooLarge,
    ValueGrammar,
    _check_keywords,
    _lit,
    _Rules,
    check_schema_size,
)
from .spec import FormatSpec
from .tools import normalize_tools, schema_types

# engines whose constraint can be sent (others: validation after the fact)
STRUCTURAL_TAG_ENGINES = frozenset({"vllm", "sglang"})
LAZY_GRAMMAR_ENGINES = frozenset({"llamacpp"})

# llama.cpp's common_grammar_trigger_type (common/common.h)
TRIGGER_TOKEN, TRIGGER_WORD, TRIGGER_PATTERN, TRIGGER_PATTERN_FULL = 0, 1, 2, 3


@dataclass(frozen=True)
class StrictSyntax:
    """How a family writes a call, for the strict builders: `kind` names the builder; `trigger`
    is the text that opens a call (the structural tag's trigger, llama.cpp's trigger word); the
    markers are the family's control tokens the GBNF names by id."""

    kind: str  # "json_tags" | "glm_xml" | "qwen_xml" | "harmony"
    trigger: str
    close: str = ""  # what ends a call ("" : the arguments' end)
    markers: tuple[str, ...] = ()  # control tokens in the call (GBNF: by id)


_JSON_TAGS = StrictSyntax("json_tags", "<tool_call>", "</tool_call>", ("<tool_call>", "</tool_call>"))
_GLM = StrictSyntax("glm_xml", "<tool_call>", "</tool_call>",
                    ("<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"))
_QWEN_XML = StrictSyntax("qwen_xml", "<tool_call>", "</tool_call>", ("<tool_call>", "</tool_call>"))
# gpt-oss: a call's header holds ` to=functions.NAME` whichever order it writes (after the
# channel, `<|channel|>commentary to=functions.f <|constrain|>json<|message|>`, or in the role,
# ` to=functions.f<|channel|>commentary json<|message|>`); the call ends at the JSON's end, where
# `<|call|>` (a stop token: an engine's constraint cannot name it) ends the generation
_HARMONY = StrictSyntax("harmony", " to=functions.", "", ("<|channel|>", "<|constrain|>", "<|message|>"))

# family -> its strict syntax; the rest are checked after the fact
STRICT_SYNTAXES: dict[str, StrictSyntax] = {
    **dict.fromkeys(("qwen3", "hermes", "exaone4", "holo2", "granite4"), _JSON_TAGS),
    **dict.fromkeys(("glm45", "glm47"), _GLM),
    **dict.fromkeys(("qwen3_coder", "qwen35", "nemotron3", "step3p5"), _QWEN_XML),
    "gpt_oss": _HARMONY,
}
# the syntaxes each constraint builder writes (qwen_xml has no GBNF builder: its raw values end at a
# closing tag that is ordinary text)
_TAG_KINDS = frozenset({"json_tags", "glm_xml", "qwen_xml", "harmony"})
_GBNF_KINDS = frozenset({"json_tags", "glm_xml", "harmony"})


def strict_syntax(spec: FormatSpec) -> StrictSyntax | None:
    return STRICT_SYNTAXES.get(spec.name)


def strict_schema(schema: Any) -> Any:
    """`schema` in strict mode, as OpenAI's strict function calling has it: every object schema
    that declares `properties` and says nothing of others admits no others
    (`additionalProperties: false`); optional properties stay optional."""
    if isinstance(schema, list):
        return [strict_schema(s) for s in schema]
    if not isinstance(schema, Mapping):
        return schema
    out = {}
    for key, value in schema.items():
        if key in ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas"):
            out[key] = {k: strict_schema(v) for k, v in value.items()} if isinstance(value, Mapping) else value
        elif key in ("items", "additionalProperties", "not", "if", "then", "else", "contains", "anyOf",
                     "oneOf", "allOf", "prefixItems"):  # fmt: skip
            out[key] = strict_schema(value)
        else:
            out[key] = value
    if "properties" in out and "additionalProperties" not in out and "patternProperties" not in out:
        out["additionalProperties"] = False
    return out


# ---------------------------------------------------------------- the plan


def strict_constraint(
    spec: FormatSpec,
    *,
    engine: str,
    tools: Sequence[Mapping[str, Any]],
    strict: Iterable[str],
    parallel: bool,
    token_id: Callable[[str], int | None] | None,
    aliases: Iterable[tuple[str, str]] = (),
) -> Constraint | None:
    """The engine constraint for a `tool_choice: auto` request whose `strict` tools are among
    `tools`; None when no offered tool is strict, or where none can be sent (`StrictCheck` then
    validates the calls after the fact). A call may name an offered tool or one of its `aliases`
    ((called name, offered name): a namespaced MCP tool's joined names), nothing else.
    GrammarTooLarge past the size bounds."""
    schemas = normalize_tools(tools)
    strict_names = [n for n in schemas if n in set(strict)]
    if not strict_names:
        return None
    syntax = strict_syntax(spec)
    if syntax is None:
        return None
    bodies = {n: (strict_schema(s or {"type": "object"}) if n in strict_names else None) for n, s in schemas.items()}
    for called, offered in aliases:
        if offered in bodies and called not in bodies:
            bodies[called] = bodies[offered]
    check_schema_size([{"name": n, "parameters": schemas[n]} for n in strict_names])
    if engine in STRUCTURAL_TAG_ENGINES and syntax.kind in _TAG_KINDS:
        tag = structural_tag(syntax, bodies)
        return Constraint("structural_tag", structural_tag=json.dumps(tag, ensure_ascii=False))
    if engine in LAZY_GRAMMAR_ENGINES and syntax.kind in _GBNF_KINDS:
        try:
            grammar = lazy_grammar(syntax, bodies, parallel=parallel, token_id=token_id)
        except GrammarTooLarge:
            raise
        except GrammarError:
            return None  # a schema keyword or a marker the GBNF cannot name: checked after the fact
        single = token_id(syntax.trigger) if token_id is not None else None
        return Constraint(
            "grammar", grammar=grammar, triggers=((TRIGGER_WORD, syntax.trigger),),
            preserved_tokens=(syntax.trigger,) if single is not None else (),
        )
    return None


# ---------------------------------------------------------------- xgrammar structural tags


_WS = {"type": "regex", "pattern": "[ \\t\\n]*"}


def _const(text: str) -> dict:
    return {"type": "const_string", "value": text}


def structural_tag(syntax: StrictSyntax, bodies: Mapping[str, Any]) -> dict:
    """The structural tag (xgrammar's format, vLLM's and SGLang's `structural_tag`): free text,
    until the trigger; then one of the tools' calls in the family's syntax, each strict tool's
    arguments held to its schema (`bodies[name]`; None: any arguments); then free text again."""
    style = {"json_tags": "json", "harmony": "json", "glm_xml": "glm_xml", "qwen_xml": "qwen_xml"}[syntax.kind]
    options = []
    for name, schema in bodies.items():
        args = {"type": "json_schema", "json_schema": True if schema is None else schema, "style": style}
        if syntax.kind == "json_tags":
            head = '{"name": ' + json.dumps(name, ensure_ascii=False) + ', "arguments": '
            options.append({"type": "sequence", "elements": [_WS, _const(head), args, _WS, _const("}"), _WS]})
        elif syntax.kind == "glm_xml":  # `NAME<arg_key>k</arg_key><arg_value>v</arg_value>...`
            options.append({"type": "sequence", "elements": [_const(name), args]})
        elif syntax.kind == "qwen_xml":  # `\n<function=NAME>\n<parameter=k>\nv\n</parameter>\n</function>\n`
            options.append({"type": "sequence", "elements": [
                _WS, _const(f"<function={name}>"), args, _WS, _const("</function>"), _WS]})  # fmt: skip
        else:  # harmony: ` to=functions.NAME`, the rest of the header, `<|message|>`, the JSON
            header = {"type": "regex",
                      "pattern": "(<\\|channel\\|>commentary)?( ?<\\|constrain\\|> ?json| json)? ?"}  # fmt: skip
            options.append({"type": "sequence", "elements": [_const(name), header, _const("<|message|>"), args]})
    content = options[0] if len(options) == 1 else {"type": "or", "elements": options}
    tag = {"type": "tag", "begin": syntax.trigger, "content": content, "end": syntax.close}
    # `stop_after_first` stays off even for parallel_tool_calls false (the first call is kept by the
    # server's filter): after the call only a stop token would be admitted, and a family's end of
    # turn need not be one the engine was given (GLM's `<|observation|>` without its generation_config)
    return {"type": "structural_tag", "format": {
        "type": "triggered_tags", "triggers": [syntax.trigger], "tags": [tag],
        "at_least_one": False, "stop_after_first": False}}  # fmt: skip


# ---------------------------------------------------------------- llama.cpp lazy grammars


def lazy_grammar(
    syntax: StrictSyntax,
    bodies: Mapping[str, Any],
    *,
    parallel: bool,
    token_id: Callable[[str], int | None] | None,
) -> str:
    """GBNF for llama.cpp's lazy grammar: it starts at the trigger (which it must accept itself,
    as llama.cpp feeds it from the trigger's start) and holds until the output's end: one call
    (or several, parallel) in the family's syntax, each strict tool's arguments held to its schema,
    then the end of generation. GrammarError where a marker is no single token or a schema keyword
    cannot be enforced."""

    def token(marker: str) -> str:
        tid = token_id(marker) if token_id is not None else None
        if tid is None:
            raise GrammarError(f"{marker!r} is not a single token of the served tokenizer, so a grammar cannot name it")
        return f"<[{tid}]>"

    rules = _Rules()
    values = ValueGrammar(rules, JSON_LITERALS)
    rules.rules["nl"] = "[ \\t\\n]{0,4}"
    options = []
    for name, schema in bodies.items():
        where = f"{name}-args"
        if syntax.kind == "json_tags":
            args = values.value(schema, where) if schema is not None else values.value(True, "any")
            head = '{"name": ' + json.dumps(name, ensure_ascii=False) + ', "arguments": '
            options.append(rules.add(f"call-{name}", f'nl {_lit(head)} {args} nl "}}" nl'))
        elif syntax.kind == "glm_xml":
            ak, eak, av, eav = (token(m) for m in ("<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"))
            pairs = _xml_pairs(rules, values, schema, where, ak=ak, eak=eak, av=av, eav=eav)
            options.append(rules.add(f"call-{name}", f"{_lit(name)} {pairs} nl"))
        elif syntax.kind == "harmony":
            channel, constrain, message = (token(m) for m in ("<|channel|>", "<|constrain|>", "<|message|>"))
            header = rules.add("header", f'({channel} "commentary")? (" "? {constrain} " "? "json" | " json")? " "?')
            args = values.value(schema, where) if schema is not None else values.value(True, "any")
            options.append(rules.add(f"call-{name}", f"{_lit(name)} {header} {message} {args}"))
        else:
            raise GrammarError(f"no lazy grammar for the {syntax.kind} call syntax")
    body = rules.add("call-body", " | ".join(options))
    if syntax.kind == "harmony":  # the trigger is the start of ` to=functions.NAME`: one call, then the end
        return rules.text(f"{_lit(syntax.trigger)} {body}")
    call = rules.add("call", f"{token(syntax.trigger)} {body} {token(syntax.close)}")
    return rules.text(f"{call} (nl {call})*" if parallel else call)


def _xml_pairs(rules: _Rules, values: ValueGrammar, schema: Any, where: str, *, ak: str, eak: str, av: str,
               eav: str) -> str:  # fmt: skip
    """GLM's `<arg_key>k</arg_key><arg_value>v</arg_value>` pairs (newlines between allowed): the
    declared properties in order, required ones always, optional ones may be left out, no others;
    a string value raw up to `</arg_value>`, any other JSON. `schema` None: any pairs."""
    raw = rules.add("raw-value", f"(!{eav})*")
    if schema is None or not isinstance(schema.get("properties"), Mapping):
        if schema is not None and schema.get("additionalProperties") is False:
            return '""'  # no declared properties, none other: no arguments
        key = rules.add("any-key", f"(!{eak})+")
        return rules.add("any-pairs", f"(nl {ak} {key} {eak} nl {av} {raw} {eav})*")
    required = schema.get("required") or []
    if not isinstance(required, list):
        raise GrammarError(f"{where}: 'required' must be an array")
    parts = []
    for key, sub in schema["properties"].items():
        value = _xml_value(rules, values, sub, f"{where}-{key}", raw)
        pair = f"nl {ak} {_lit(key)} {eak} nl {av} {value} {eav}"
        parts.append(pair if key in required else f"({pair})?")
    missing = [k for k in required if k not in schema["properties"]]
    if missing:
        raise GrammarError(f"{where}: required properties {missing} are not declared in 'properties'")
    if schema.get("additionalProperties") not in (None, False):
        raise GrammarError(f"{where}: 'additionalProperties' beside 'properties' cannot be enforced by a grammar here")
    return rules.add(where + "-pairs", " ".join(parts) or '""')


def _xml_value(rules: _Rules, values: ValueGrammar, schema: Any, where: str, raw: str) -> str:
    """One XML value: a string raw (an enum of strings as its words), anything else as JSON.
    GrammarError for a keyword the grammar cannot enforce (`pattern`, `$ref`, ...)."""
    if not isinstance(schema, Mapping) or not schema:
        return raw
    _check_keywords(schema, where)
    types = schema_types(schema)
    if not types and not (schema.keys() - _ANNOTATIONS):
        return raw  # described only: any value
    if "string" in types:
        options = schema.get("enum") if "enum" in schema else [schema["const"]] if "const" in schema else None
        if types == {"string"} and isinstance(options, list) and options and all(isinstance(o, str) for o in options):
            return rules.add(where + "-words", " | ".join(_lit(o) for o in options))
        if types == {"string"}:
            return raw
        # a string among other types: raw (a JSON-looking value is read by the others' types);
        # the other branches' keywords must still be ones a grammar could enforce
        for branch in (*schema.get("anyOf", ()), *schema.get("oneOf", ())):
            if isinstance(branch, Mapping):
                _check_keywords(branch, where)
        return raw
    return values.value(schema, where)


# ---------------------------------------------------------------- validation after the fact


class StrictCheck:
    """Each strict tool's schema (in strict mode) as a validator: `problem(name, arguments)` says
    where and why a call's arguments (JSON text) do not match (`at days: 'three' is not of type
    'integer'`), or None."""

    def __init__(self, tools: Sequence[Mapping[str, Any]] | None, strict: Iterable[str]) -> None:
        names = set(strict)
        self.schemas = {n: strict_schema(s or {"type": "object"}) for n, s in normalize_tools(tools).items()
                        if n in names}  # fmt: skip
        self._validators: dict[str, Any] = {}

    def __bool__(self) -> bool:
        return bool(self.schemas)

    def covers(self, name: str) -> bool:
        return name in self.schemas

    def problem(self, name: str, arguments: str) -> str | None:
        try:
            value = json.loads(arguments or "{}")
        except ValueError:
            return "not JSON"
        validator = self._validators.get(name)
        if validator is None:
            import jsonschema

            cls = jsonschema.validators.validator_for(self.schemas[name], default=jsonschema.Draft202012Validator)
            try:
                cls.check_schema(self.schemas[name])
            except jsonschema.SchemaError as e:
                return f"the tool's schema is not a valid JSON Schema ({e.message})"
            validator = self._validators[name] = cls(self.schemas[name])
        error = next(iter(sorted(validator.iter_errors(value), key=lambda e: list(e.path))), None)
        if error is None:
            return None
        at = "/".join(str(p) for p in error.absolute_path)
        return f"at {at}: {error.message}" if at else error.message
