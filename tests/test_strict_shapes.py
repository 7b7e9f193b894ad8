"""Every strict-tool constraint shape chatsieve sends, against what the engines accept (issue 34):

- vLLM: each request body through vLLM 0.33's own request model and xgrammar validation
  (`CompletionRequest.to_sampling_params`, `validate_xgrammar_grammar`), and each structural tag
  compiled by xgrammar against the family's tokenizer;
- SGLang: each structural tag read by xgrammar's structural-tag parser in SGLang 0.5.23's own venv
  (its xgrammar 0.2.7; tests/sglang_env.py);
- llama.cpp: each lazy grammar parsed by tests/gbnf.py here; the real llama-server takes them in
  tests/test_real_engine.py.

The shapes: every family with a strict syntax, tools with nested objects, arrays, enums, anyOf,
local $refs, no parameters, names with dots and dashes, a non-strict tool beside strict ones,
aliases (namespaced names), parallel calls on and off. And where none can be sent, None (the
calls are checked after the fact) or, past the size bounds, the 400.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from chatsieve.constraints import plan
from chatsieve.grammar import GrammarTooLarge
from chatsieve.server.backends import GenerationRequest, llamacpp_payload, sglang_payload, vllm_payload
from chatsieve.strict_tools import STRICT_SYNTAXES, strict_schema

WEATHER = {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
           "required": ["city", "days"]}  # fmt: skip
NESTED = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "description": "what to look for"},
        "filters": {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string"}},
                                                     "since": {"type": ["string", "null"]}}},
        "mode": {"enum": ["fast", "deep"]},
        "limit": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
        "ratio": {"type": "number"},
        "flag": {"type": "boolean"},
    },
    "required": ["query", "mode"],
}  # fmt: skip
REFS = {"type": "object", "$defs": {"point": {"type": "object", "properties": {"x": {"type": "number"},
                                                                                "y": {"type": "number"}}}},
        "properties": {"a": {"$ref": "#/$defs/point"}, "b": {"$ref": "#/$defs/point"}}, "required": ["a"]}  # fmt: skip
NONE = {"type": "object", "properties": {}}


def fn(name: str, params: dict | None) -> dict:
    f = {"name": name, **({} if params is None else {"parameters": params})}
    return {"type": "function", "function": f}


TOOL_SETS = {
    "weather+loose": ([fn("get_weather", WEATHER), fn("get_time", {"type": "object", "properties": {"zone": {"type": "string"}}})],
                      ["get_weather"], ()),
    "nested": ([fn("search.web-v2", NESTED)], ["search.web-v2"], ()),
    "refs": ([fn("plot", REFS)], ["plot"], ()),
    "no-params": ([fn("now", None), fn("noargs", NONE)], ["now", "noargs"], ()),
    "aliases": ([fn("fetch_page", {"type": "object", "properties": {"url": {"type": "string"}}})], ["fetch_page"],
                (("mcp__srv__fetch_page", "fetch_page"), ("mcp__srv.fetch_page", "fetch_page"))),
}  # fmt: skip
TOKENIZERS = {"glm45": "glm47", "glm47": "glm47", "gpt_oss": "gpt_oss"}  # the rest: Qwen3's vocabulary


def _tok(family: str):
    from agent_families import tokenizer

    return tokenizer(TOKENIZERS.get(family, "qwen3"))


def _shapes(engine: str):
    for family in sorted(STRICT_SYNTAXES):
        tok = _tok(family)
        for name, (tools, strict, aliases) in TOOL_SETS.items():
            for parallel in (True, False):
                c = plan(family, engine=engine, tools=tools, tool_choice="auto", response_format=None,
                         token_id=tok.single_token_id, parallel=parallel, strict=strict, aliases=aliases)  # fmt: skip
                yield family, name, parallel, tok, c


def test_vllm_takes_every_structural_tag():
    from strict_engine import _compiler, refusal

    n = 0
    for family, name, _parallel, tok, c in _shapes("vllm"):
        assert c is not None and c.kind == "structural_tag", (family, name)
        payload = vllm_payload(GenerationRequest([1, 2, 3], max_tokens=8, constraint=c,
                                                 stop_token_ids=tuple(tok.stop_token_ids)), None)  # fmt: skip
        assert refusal("/v1/completions", payload, tok) is None, (family, name)
        _compiler(tok).compile_structural_tag(c.structural_tag)
        n += 1
    assert n == len(STRICT_SYNTAXES) * len(TOOL_SETS) * 2


def test_sglangs_xgrammar_reads_every_structural_tag():
    from sglang_env import sglang_python

    tags = [sglang_payload(GenerationRequest([1], constraint=c), None)["sampling_params"]["structural_tag"]
            for *_, c in _shapes("sglang")]  # fmt: skip
    code = ("import json, sys, xgrammar\n"
            "for line in sys.stdin:\n"
            "    xgrammar.Grammar.from_structural_tag(json.loads(line))\n"
            "print('read', xgrammar.__version__ if hasattr(xgrammar, '__version__') else '')\n")  # fmt: skip
    out = subprocess.run([str(sglang_python()), "-c", code], input="\n".join(json.dumps(t) for t in tags),
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("read")


def test_every_lazy_grammar_parses_and_names_its_trigger():
    from gbnf import parse

    for family, name, _parallel, tok, c in _shapes("llamacpp"):
        if STRICT_SYNTAXES[family].kind == "qwen_xml" or name == "refs":
            assert c is None  # checked after the fact: raw values up to a text tag; $ref beyond the GBNF builder
            continue
        assert c is not None and c.kind == "grammar" and c.triggers, (family, name)
        payload = llamacpp_payload(GenerationRequest([1], constraint=c), None)
        assert payload["grammar_lazy"] is True and payload["grammar_triggers"]
        for t in payload["grammar_triggers"]:
            single = tok.single_token_id(t["value"]) is not None
            assert t["type"] == 1 and (t["value"] in payload["preserved_tokens"]) == single
        parse(payload["grammar"])


def test_what_cannot_be_sent_is_checked_after_the_fact_or_refused():
    tok = _tok("qwen3")
    pattern = [fn("f", {"type": "object", "properties": {"a": {"type": "string", "pattern": "^x+$"}}})]
    # a keyword the GBNF builder cannot enforce: llama.cpp gets nothing, the call is checked after
    assert plan("qwen3", engine="llamacpp", tools=pattern, tool_choice="auto", response_format=None,
                token_id=tok.single_token_id, strict=["f"]) is None  # fmt: skip
    # xgrammar enforces it: vLLM gets the tag
    assert plan("qwen3", engine="vllm", tools=pattern, tool_choice="auto", response_format=None,
                token_id=tok.single_token_id, strict=["f"]).kind == "structural_tag"  # fmt: skip
    # no strict syntax, or another engine: nothing sent
    for family, engine in (("kimi_k2", "vllm"), ("gemma4", "llamacpp"), ("qwen3", "dynamo")):
        assert plan(family, engine=engine, tools=pattern, tool_choice="auto", response_format=None,
                    token_id=tok.single_token_id, strict=["f"]) is None  # fmt: skip
    # no strict tool: nothing, as before
    assert plan("qwen3", engine="vllm", tools=pattern, tool_choice="auto", response_format=None,
                token_id=tok.single_token_id) is None  # fmt: skip
    # past the size bounds: the 400 (grammar_too_large), whatever the engine
    wide = [fn(f"t{i}", {"type": "object", "properties": {f"p{j}": {"anyOf": [{"type": "string"}, {"type": "integer"}]}
                                                          for j in range(300)}}) for i in range(80)]  # fmt: skip
    for engine in ("vllm", "llamacpp"):
        with pytest.raises(GrammarTooLarge):
            plan("qwen3", engine=engine, tools=wide, tool_choice="auto", response_format=None,
                 token_id=tok.single_token_id, strict=[f"t{i}" for i in range(80)])  # fmt: skip


def test_strict_mode_admits_no_other_keys():
    assert strict_schema(WEATHER)["additionalProperties"] is False
    loose = {**WEATHER, "additionalProperties": True}
    assert strict_schema(loose)["additionalProperties"] is True  # said: kept
    nested = strict_schema(NESTED)
    assert nested["properties"]["filters"]["additionalProperties"] is False
    assert strict_schema(REFS)["$defs"]["point"]["additionalProperties"] is False
