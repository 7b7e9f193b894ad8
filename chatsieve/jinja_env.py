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

__all__ = ["compile_template", "render_template", "template_globals"]


def _fail(message: str) -> None:
    """`raise_exception(msg)` in a template: chatsieve.prompt reports msg as a PromptError."""
    raise jinja2.exceptions.TemplateError(message)


def _to_json(
    value: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None, sort_keys: bool = False
) -> str:
    """`tojson` as chat templates expect it: plain json.dumps, no HTML escaping; what a filter
    chain leaves as a generator (`tools | map(attribute='function') | tojson`, as llama.cpp's own
    templates write it, whose Jinja makes a list of it) is the list of its items."""
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys,
                      default=_items)


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


def _environment(mutable: bool) -> jinja2.Environment:
    env_class = SandboxedEnvironment if mutable else ImmutableSandboxedEnvironment
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
