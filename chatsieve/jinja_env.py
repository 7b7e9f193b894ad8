"""The Jinja sandbox chat templates are rendered in, compatible with Hugging Face's.

Templates from model repositories are untrusted code: they run in Jinja's immutable
sandbox, with the options and helpers chat templates are written against.
"""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment, SandboxedEnvironment

from . import shared
from .prefix_cache import current_partition

try:
    import orjson
except ImportError:  # pragma: no cover - the core library stays stdlib-only
    orjson = None

__all__ = ["compile_template", "render_template", "template_globals"]


def _fail(message: str) -> None:
    """`raise_exception(msg)` in a template: chatsieve.prompt reports msg as a PromptError."""
    raise jinja2.exceptions.TemplateError(message)


def _to_json(
    value: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None, sort_keys: bool = False
) -> str:
    """`tojson` as chat templates expect it: plain json.dumps, no HTML escaping; what a filter
    chain leaves as a generator (`tools | map(attribute='function') | tojson`, as llama.cpp's own
    templates write it, whose Jinja makes a list of it) is the list of its items. An object or
    array comes from `_JSON_CACHE` when the same one was written before (`_cache_key`); one that
    is shared (a caller's kept tools and each tool in them: chatsieve/shared.py) is written once."""
    if type(value) in _CACHED and shared.is_shared(value) and _plain_options(ensure_ascii, indent, separators, sort_keys):
        return shared.once(value, ("tojson", ensure_ascii, indent, separators, sort_keys), _dumps,
                           ensure_ascii, indent, separators, sort_keys)
    key = _cache_key(value, ensure_ascii, indent, separators, sort_keys) if type(value) in _CACHED else None
    if key is not None:
        got = _JSON_CACHE.get(key)
        if got is not None:
            return got
    out = _dumps(value, ensure_ascii, indent, separators, sort_keys)
    if key is not None:
        global _cached_bytes
        if _cached_bytes > _JSON_CACHE_BYTES:
            _JSON_CACHE.clear()
            _cached_bytes = 0
        _JSON_CACHE[key] = out
        _cached_bytes += len(key[0]) + len(out)
    return out


# tojson's output by the value's content. A team's agents send the same tools with every request,
# and templates write each tool (or the whole list) with tojson, which is a fifth of preparing such
# a request; the output of one seen before is looked up instead. The key is orjson's spelling of
# the value, which tells JSON's own types apart one to one except for NaN and the infinities (it
# writes them null, so a value whose spelling holds a null is not cached), and which refuses what
# json.dumps might write otherwise (subclasses of the builtin types, dataclasses, dates, integers
# beyond 64 bits, keys that are no strings, lone surrogates: not cached). A template's values come
# from a request's JSON: none of them is one of the few types orjson writes and json.dumps refuses
# (UUID, Enum). Like the prefix cache, it is partitioned by the caller (`prefix_cache.partition`):
# how fast a prompt is rendered says nothing of what another API key sent.
_CACHED = frozenset({dict, list})
_INDENTS = frozenset({type(None), int, str})
_JSON_CACHE: dict[tuple, str] = {}
_JSON_CACHE_BYTES = 4 << 20  # emptied when its keys and outputs pass this
_JSON_KEY_BYTES = 16 << 10  # values spelled longer are not cached
_cached_bytes = 0
_KEY_OPTIONS = (
    orjson.OPT_PASSTHROUGH_SUBCLASS | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME
    if orjson is not None else 0
)


def _dumps(value: Any, ensure_ascii: Any, indent: Any, separators: Any, sort_keys: Any) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys,
                      default=_items)


def _plain_options(ensure_ascii: Any, indent: Any, separators: Any, sort_keys: Any) -> bool:
    """Whether tojson's options can be part of a key (hashable, of the types json.dumps takes)."""
    return ((separators is None or type(separators) is tuple and all(type(x) is str for x in separators))
            and type(indent) in _INDENTS
            and type(ensure_ascii) is bool and type(sort_keys) is bool)


def _cache_key(value: Any, ensure_ascii: Any, indent: Any, separators: Any, sort_keys: Any) -> tuple | None:
    """`_JSON_CACHE`'s key for writing `value` so, or None: not cached."""
    if orjson is None or not _plain_options(ensure_ascii, indent, separators, sort_keys):
        return None
    try:
        spelled = orjson.dumps(value, option=_KEY_OPTIONS)
        key = (spelled, ensure_ascii, indent, separators, sort_keys, current_partition())
        hash(key)
    except TypeError:  # (orjson.JSONEncodeError is one)
        return None
    if len(spelled) > _JSON_KEY_BYTES or (b"null" in spelled and (  # (one search instead of three where none is spelled)
            b":null" in spelled or b",null" in spelled or b"[null" in spelled)):
        return None  # (a null, or maybe NaN; or text that spells one: not cached either way)
    return key


def _items(value: Any) -> list:
    if isinstance(value, Iterator):
        return list(value)
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


class _SafeNamespace(jinja2.utils.Namespace):
    """`namespace()` whose slots cannot be named with a leading underscore, so that
    `{% set ns._x = ... %}` cannot plant a name the sandbox would otherwise guard."""

    def __setitem__(self, name: str, value: Any) -> None:
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(f"namespace slot {name!r}: names may not start with '_'")
        super().__setitem__(name, value)


def _namespace(*args: Any, **kwargs: Any) -> _SafeNamespace:
    ns = _SafeNamespace()
    for key, value in dict(*args, **kwargs).items():
        ns[key] = value
    return ns


class _GenerationTag(jinja2.ext.Extension):
    """`{% generation %}…{% endgeneration %}` marks assistant text for training masks; here it
    simply renders its body."""

    tags = {"generation"}

    def parse(self, parser: jinja2.parser.Parser) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.Scope(body).set_lineno(lineno)


_DICT_ATTRIBUTES = frozenset(dir(dict))
# JSON's types (and tuple, bytes), loops' `loop` and namespaces: whether a template may read one
# of their attributes depends on the type and the name alone (jinja2's checks are isinstance
# checks, none of which these types' instances can answer otherwise, and the name's spelling)
_KNOWN_TYPES = frozenset({str, int, float, bool, type(None), tuple, bytes, dict, list, jinja2.runtime.LoopContext,
                          _SafeNamespace})
_SAFE_ATTRIBUTES_KEPT = 4096  # (type, name) answers kept per sandbox class; names come from templates


class _PlainDictItems:
    """A sandbox where `obj.name` on a plain dict, for a name no dict has as an attribute, looks
    up the item at once: what the sandbox's `getattr` gives after the AttributeError it raises
    and catches for every such name (`message.content`, `tool.function`). And where whether an
    attribute of a known type (`_KNOWN_TYPES`) may be read is answered once per type and name:
    the sandbox's own answer, which is three ABC isinstance checks and more per read (a Qwen3
    agent prompt makes about 17: `loop.index0`, `ns.multi_step_tool`, `content.startswith`)."""

    _safe_attributes: dict[tuple[type, str], bool]  # one per sandbox class: their answers differ

    def getattr(self, obj: Any, attribute: str) -> Any:
        if type(obj) is dict and type(attribute) is str and attribute not in _DICT_ATTRIBUTES:
            try:
                return obj[attribute]
            except KeyError:
                return self.undefined(obj=obj, name=attribute)  # type: ignore[attr-defined]
        return super().getattr(obj, attribute)  # type: ignore[misc]

    def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
        kind = type(obj)
        if kind not in _KNOWN_TYPES or type(attr) is not str:
            return super().is_safe_attribute(obj, attr, value)  # type: ignore[misc]
        known = self._safe_attributes
        safe = known.get((kind, attr))
        if safe is None:
            safe = super().is_safe_attribute(obj, attr, value)  # type: ignore[misc]
            if len(known) < _SAFE_ATTRIBUTES_KEPT:
                known[kind, attr] = safe
        return safe


class _Sandbox(_PlainDictItems, SandboxedEnvironment):
    _safe_attributes: dict[tuple[type, str], bool] = {}


class _ImmutableSandbox(_PlainDictItems, ImmutableSandboxedEnvironment):
    _safe_attributes: dict[tuple[type, str], bool] = {}


def _environment(mutable: bool) -> jinja2.Environment:
    env_class = _Sandbox if mutable else _ImmutableSandbox
    env = env_class(trim_blocks=True, lstrip_blocks=True, extensions=[_GenerationTag, jinja2.ext.loopcontrols])
    env.filters["tojson"] = _to_json
    env.globals.update(raise_exception=_fail, strftime_now=_now, namespace=_namespace)
    return env


@functools.lru_cache(maxsize=64)
def compile_template(source: str, *, mutable: bool = False) -> jinja2.Template:
    """Compile a chat template in the immutable sandbox (or the mutable one if asked)."""
    return _environment(mutable).from_string(source)


def render_template(source: str, context: dict[str, Any]) -> str:
    """Render a chat template; jinja2 errors propagate unchanged.

    The immutable sandbox changes none of the data it is given (it refuses every method that
    would), so `context` is rendered as it is, with no copy. A few templates (Kimi K2
    Instruct/Thinking) call `list.append`, which it refuses; those are rendered again in the
    mutable sandbox, on a deep copy of `context`, which the caller's data never sees changed.
    """
    try:
        return compile_template(source).render(**context)
    except jinja2.exceptions.SecurityError:
        return compile_template(source, mutable=True).render(**copy.deepcopy(context))


@functools.cache
def template_globals() -> frozenset[str]:
    """The names templates get from the environment (`raise_exception`, `namespace`, `range`, ...):
    a variable of the same name would shadow the helper."""
    return frozenset(_environment(False).globals)
