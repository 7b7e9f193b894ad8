"""A model family described as data (`--format-file`, `chatsieve.formats.load`): the fields a
`formats/` module sets, read from YAML or JSON and checked like user input.

Nothing in a file is code: codecs, engines and call-id styles are chosen by name from the
ones the built-in families use, markers are plain strings, and every size is bounded.
docs/format-files.md describes the fields.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from .spec import FormatSpec

__all__ = ["FormatFileError", "load", "parse_format", "CODECS", "ENGINES", "CALL_IDS"]

MAX_FILE_BYTES = 64 * 1024
MAX_MARKER = 64  # characters in one marker
MAX_MARKERS = 32  # markers in one list
MAX_TEXT = 400  # characters in a description or a docs line
VERSION = 1
_NAME = re.compile(r"[a-z][a-z0-9_.\-]{0,47}\Z")


class FormatFileError(ValueError):
    """A format file that cannot be used; the message names the file and each bad field."""


def _codecs() -> dict[str, Any]:
    from .args.deepseek import DeepSeekCallCodec
    from .args.dispatch import JsonCallsCodec
    from .args.gemma4 import Gemma4CallCodec
    from .args.json_call import JsonCallCodec
    from .args.kimi import KimiCallCodec
    from .args.llama3 import Llama3JsonCodec
    from .args.mistral import MistralCallCodec
    from .args.pythonic import PythonicCallCodec

    return {
        "json_call": JsonCallCodec,  # one {"name", "arguments"} object per region
        "json_calls": JsonCallsCodec,  # a JSON list of them (or one object)
        "xml_kv": None,  # built from `calls.syntax`
        "deepseek": DeepSeekCallCodec,
        "kimi": KimiCallCodec,
        "pythonic": PythonicCallCodec,
        "llama3_json": Llama3JsonCodec,
        "mistral": MistralCallCodec,
        "gemma4": Gemma4CallCodec,
    }


CODECS = ("json_call", "json_calls", "xml_kv", "deepseek", "kimi", "pythonic", "llama3_json", "mistral", "gemma4")
ENGINES = ("shared", "harmony")
CALL_IDS = ("openai", "kimi", "mistral")

# harmony's engine reads these markers itself: a file that picks it must list them as they are
_HARMONY_INNER = ("<|start|>", "<|channel|>", "<|message|>", "<|constrain|>", "<|end|>", "<|call|>")

_TOP = {"chatsieve_format", "name", "description", "aliases", "reasoning", "calls", "end", "strip", "engine",
        "docs", "template"}  # fmt: skip
_REASONING = {"open", "close", "label", "default", "starts_inside", "single_block", "calls_inside"}
_CALLS = {"open", "close", "inner", "codec", "syntax", "text_open", "content_start", "prompt_opens", "call_id",
          "grammar"}  # fmt: skip
_SYNTAX = {"call_open", "name_close", "call_close", "key_open", "key_close", "value_open", "value_close",
           "trim_newline", "quoted", "string_attr", "structural", "openers", "closers", "type_open",
           "type_close"}  # fmt: skip
_DOCS = {"reasoning", "calls"}


class _Reader:
    """Collects every problem of a file, each naming its field, before failing once."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.problems: list[str] = []

    def bad(self, field: str, why: str) -> None:
        self.problems.append(f"{field}: {why}")

    def mapping(self, value: Any, field: str, allowed: set[str]) -> dict:
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            self.bad(field, f"must be a mapping, not {type(value).__name__}")
            return {}
        for key in value:
            if key not in allowed:
                self.bad(f"{field}.{key}" if field else str(key),
                         f"unknown field; known: {', '.join(sorted(allowed))}")
        return dict(value)

    def text(self, value: Any, field: str, *, limit: int = MAX_TEXT, empty: bool = True) -> str:
        if value is None:
            return ""
        if not isinstance(value, str):
            self.bad(field, f"must be a string, not {type(value).__name__}")
            return ""
        if len(value) > limit:
            self.bad(field, f"longer than {limit} characters")
            return ""
        if not empty and not value:
            self.bad(field, "must not be empty")
        return value

    def flag(self, value: Any, field: str, default: bool = False) -> bool:
        if value is None:
            return default
        if not isinstance(value, bool):
            self.bad(field, f"must be true or false, not {value!r}"[:200])
            return default
        return value

    def marker(self, value: Any, field: str, *, blank: bool = False) -> str:
        text = self.text(value, field, limit=MAX_MARKER, empty=False)
        if text and not text.strip() and not blank:
            self.bad(field, "a marker cannot be only whitespace")
        return text

    def markers(self, value: Any, field: str, *, blank: bool = False) -> tuple[str, ...]:
        if value is None:
            return ()
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list):
            self.bad(field, f"must be a list of strings, not {type(value).__name__}")
            return ()
        if len(value) > MAX_MARKERS:
            self.bad(field, f"more than {MAX_MARKERS} markers")
            return ()
        out = []
        for i, v in enumerate(value):
            m = self.marker(v, f"{field}[{i}]", blank=blank)
            if m:
                out.append(m)
        return tuple(dict.fromkeys(out))

    def choice(self, value: Any, field: str, choices: tuple[str, ...], default: str) -> str:
        if value is None:
            return default
        if value not in choices:
            self.bad(field, f"{value!r} is not one of {', '.join(choices)}"[:300])
            return default
        return value


def parse_format(doc: Any, where: str = "<format>") -> FormatSpec:
    """A FormatSpec from a format file's parsed content (a mapping)."""
    r = _Reader(where)
    top = r.mapping(doc, "", _TOP)
    if not isinstance(doc, Mapping):
        raise FormatFileError(f"{where}: a format file is a mapping of fields (name, reasoning, calls, ...)")
    version = top.get("chatsieve_format", VERSION)
    if version != VERSION:
        r.bad("chatsieve_format", f"this chatsieve reads version {VERSION}, not {version!r}")
    name = r.text(top.get("name"), "name", limit=48, empty=False)
    if "name" not in top:
        r.bad("name", "required (lowercase letters, digits, '_', '.', '-')")
    elif name and not _NAME.match(name):
        r.bad("name", f"{name!r}: lowercase letters, digits, '_', '.', '-', starting with a letter")
    aliases = r.markers(top.get("aliases"), "aliases")
    for i, a in enumerate(aliases):
        if not _NAME.match(a):
            r.bad(f"aliases[{i}]", f"{a!r}: lowercase letters, digits, '_', '.', '-', starting with a letter")

    rs = r.mapping(top.get("reasoning"), "reasoning", _REASONING)
    cs = r.mapping(top.get("calls"), "calls", _CALLS)
    docs = r.mapping(top.get("docs"), "docs", _DOCS)
    engine_name = r.choice(top.get("engine"), "engine", ENGINES, "shared")
    codec = _codec(r, cs, engine_name)
    inner = r.markers(cs.get("inner"), "calls.inner")
    if engine_name == "harmony":
        missing = [m for m in _HARMONY_INNER if m not in inner]
        if missing:
            r.bad("calls.inner", f"the harmony engine needs {', '.join(missing)} among them")
        if codec is not None:
            r.bad("calls.codec", "the harmony engine reads its calls itself: leave the codec out")
    call_open = r.markers(cs.get("open"), "calls.open")
    if codec is not None and not call_open and not cs.get("text_open") and not cs.get("content_start"):
        r.bad("calls.open", "a codec needs the markers that open its region (open, text_open or content_start)")
    if call_open and codec is None and engine_name == "shared":
        r.bad("calls.codec", f"calls.open is set but no codec reads the calls; one of {', '.join(CODECS)}")
    call_ids = _call_ids()
    grammar = r.choice(cs.get("grammar"), "calls.grammar", _grammars(), "")
    from .formats.gpt_oss import HarmonyEngine

    fields = dict(
        name=name,
        description=r.text(top.get("description"), "description"),
        aliases=aliases,
        reasoning_open=r.markers(rs.get("open"), "reasoning.open"),
        reasoning_close=r.markers(rs.get("close"), "reasoning.close"),
        reasoning_label=r.text(rs.get("label"), "reasoning.label", limit=MAX_MARKER) or None,
        default_thinking=r.flag(rs.get("default"), "reasoning.default"),
        thinking_starts_in_reasoning=r.flag(rs.get("starts_inside"), "reasoning.starts_inside"),
        single_reasoning_block=r.flag(rs.get("single_block"), "reasoning.single_block"),
        calls_inside_reasoning=r.flag(rs.get("calls_inside"), "reasoning.calls_inside"),
        call_open=call_open,
        call_close=r.markers(cs.get("close"), "calls.close"),
        codec=codec,
        prompt_opens_call=r.marker(cs["prompt_opens"], "calls.prompt_opens") if cs.get("prompt_opens") else None,
        inner=inner,
        text_call_open=r.markers(cs.get("text_open"), "calls.text_open"),
        content_call_start=r.markers(cs.get("content_start"), "calls.content_start"),
        end=r.markers(top.get("end"), "end"),
        strip=r.markers(top.get("strip"), "strip"),
        call_id=call_ids[r.choice(cs.get("call_id"), "calls.call_id", CALL_IDS, "openai")],
        reasoning_doc=r.text(docs.get("reasoning"), "docs.reasoning"),
        calls_doc=r.text(docs.get("calls"), "docs.calls"),
        template=r.text(top.get("template"), "template", limit=300) or None,
        engine=HarmonyEngine if engine_name == "harmony" else None,
        call_syntax=grammar or None,
    )
    if r.problems:
        raise FormatFileError(f"{where}: " + "; ".join(r.problems))
    spec = FormatSpec(**fields)
    if spec.reasoning_close and not spec.reasoning_open and not spec.thinking_starts_in_reasoning:
        raise FormatFileError(f"{where}: reasoning.close without reasoning.open needs reasoning.starts_inside: true")
    return spec


def _codec(r: _Reader, cs: dict, engine_name: str) -> Callable | None:
    name = cs.get("codec")
    if name is None:
        if "syntax" in cs:
            r.bad("calls.syntax", "only the xml_kv codec takes a syntax")
        return None
    if name not in CODECS:
        r.bad("calls.codec", f"{name!r} is not one of {', '.join(CODECS)}"[:300])
        return None
    if name != "xml_kv":
        if "syntax" in cs:
            r.bad("calls.syntax", "only the xml_kv codec takes a syntax")
        return _codecs()[name]
    from .args.xml_kv import XmlKvSyntax, xml_kv_codec

    syn = r.mapping(cs.get("syntax"), "calls.syntax", _SYNTAX)
    if not syn:
        r.bad("calls.syntax", "the xml_kv codec needs its tags (call_open, name_close, call_close, key_open, ...)")
        return None
    for key in ("key_open", "key_close", "value_close"):
        if not syn.get(key):
            r.bad(f"calls.syntax.{key}", "required")

    def tag(key: str) -> str:
        value = syn.get(key, "")
        return r.text(value, f"calls.syntax.{key}", limit=MAX_MARKER) if value else ""

    syntax = XmlKvSyntax(
        call_open=tag("call_open"),
        name_close=r.markers(syn.get("name_close"), "calls.syntax.name_close", blank=True),  # "\n" ends a name
        call_close=tag("call_close"),
        key_open=tag("key_open"),
        key_close=tag("key_close"),
        value_open=tag("value_open"),
        value_close=tag("value_close"),
        trim_newline=r.flag(syn.get("trim_newline"), "calls.syntax.trim_newline"),
        quoted=r.flag(syn.get("quoted"), "calls.syntax.quoted"),
        string_attr=r.flag(syn.get("string_attr"), "calls.syntax.string_attr"),
        structural=r.markers(syn.get("structural"), "calls.syntax.structural"),
        openers=r.markers(syn.get("openers"), "calls.syntax.openers"),
        closers=r.markers(syn.get("closers"), "calls.syntax.closers"),
        type_open=tag("type_open"),
        type_close=tag("type_close"),
    )
    if bool(syntax.type_open) != bool(syntax.type_close) or (syntax.type_open and not syntax.value_open):
        r.bad("calls.syntax.type_open", "type_open and type_close go together, before a value_open")
    return xml_kv_codec("FileXmlKvCodec", syntax)


def _call_ids() -> dict[str, Callable]:
    from .args.base import openai_call_id
    from .args.kimi import kimi_call_id
    from .args.mistral import mistral_call_id

    return {"openai": openai_call_id, "kimi": kimi_call_id, "mistral": mistral_call_id}


def _grammars() -> tuple[str, ...]:
    from .grammar import CALL_SYNTAXES

    return tuple(CALL_SYNTAXES)


def read_document(text: str, where: str) -> Any:
    """YAML (safe: data only) or JSON, by the file's suffix; JSON first when it is neither."""
    suffix = Path(where).suffix.lower()
    if suffix in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError:
            raise FormatFileError(f"{where}: reading YAML needs PyYAML (pip install pyyaml), or write JSON") from None
        try:
            return yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise FormatFileError(f"{where}: not valid YAML: {e}") from None
    try:
        return json.loads(text)
    except ValueError as e:
        raise FormatFileError(f"{where}: not valid JSON: {e}") from None


def load(path: str | Path) -> FormatSpec:
    """The FormatSpec a format file describes (YAML or JSON); FormatFileError names what is wrong."""
    p = Path(path)
    try:
        size = p.stat().st_size
        if size > MAX_FILE_BYTES:
            raise FormatFileError(f"{p}: {size} bytes; a format file has at most {MAX_FILE_BYTES}")
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise FormatFileError(f"cannot read the format file {p}: {e}") from None
    return parse_format(read_document(text, str(p)), str(p))


_REGISTERED: dict[str, FormatSpec] = {}  # families registered from files, by name


def register_file(path: str | Path) -> FormatSpec:
    """`load` and register the family under its name (again: replaced). A name or alias that a
    built-in family has is refused."""
    from .formats import registry as formats

    spec = load(path)
    for key in (spec.name, *spec.aliases):
        try:
            taken = formats.get(key)
        except formats.UnknownFormat:
            continue
        if _REGISTERED.get(taken.name) is not taken or taken.name != spec.name:
            raise FormatFileError(f"{path}: the name {key!r} is taken by the format {taken.name!r}; choose another")
    _REGISTERED[spec.name] = spec
    return formats.register(spec)
