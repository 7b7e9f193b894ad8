"""What the engines do with the strict-tool constraints chatsieve sends, for the stand-in engine
(tests/fake_engines.py): refuse a request shape the real engine refuses, and enforce the rest.

- vLLM: the request goes through vLLM's own request model and xgrammar validation
  (`CompletionRequest` -> `to_sampling_params` -> `validate_xgrammar_grammar`; vLLM 0.33 imports
  on CPU); the structural tag is compiled by xgrammar against the family's real tokenizer and a
  `GrammarMatcher` (stop tokens: the request's, as vLLM's `all_stop_token_ids`) takes the output.
- SGLang: xgrammar's structural-tag parser (`StructuralTag.from_json`) and the same matcher.
- llama.cpp: llama-server's request checks (tools/server/server-schema.cpp: a lazy grammar needs a
  non-empty trigger list; a trigger word that is one token must be in `preserved_tokens`; trigger
  types 0..3, the token type with its id; the grammar must parse) and its lazy arming
  (src/llama-grammar.cpp: free output until a trigger; a token trigger is fed to the grammar, a
  word's text from its start; then every token must be accepted, and an end-of-generation token
  only where the grammar is complete), with tests/gbnf.py as the grammar.

`choose(...)`: the output the engine produces -- the model's first choice where the constraint
admits it, else the first of its next choices that it admits (a real engine masks token by token:
the scripts here differ from their first choice in one place, where the constraint bites); None
when none is admitted, which the stand-in reports as a failure, loudly.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Sequence
from typing import Any

STRICT_KINDS = ("structural_tag", "lazy_grammar")


def strict_constraint(path: str, payload: dict) -> tuple[str, Any] | None:
    """The strict-tool constraint a request carries: ("structural_tag", its JSON text) for vLLM and
    SGLang, ("lazy_grammar", the payload) for llama.cpp; None for none."""
    if path == "/v1/completions":
        tag = (payload.get("structured_outputs") or {}).get("structural_tag")
        return None if tag is None else ("structural_tag", tag)
    if path == "/generate":
        tag = (payload.get("sampling_params") or {}).get("structural_tag")
        return None if tag is None else ("structural_tag", tag)
    if "grammar_lazy" in payload or "grammar_triggers" in payload:
        return "lazy_grammar", payload
    return None


# ---------------------------------------------------------------- refusals


@functools.cache
def _vllm():
    from vllm.entrypoints.openai.completion.protocol import CompletionRequest
    from vllm.v1.structured_output.backend_xgrammar import validate_xgrammar_grammar

    return CompletionRequest, validate_xgrammar_grammar


def refusal(path: str, payload: dict, tok: Any) -> str | None:
    """Why the real engine would answer this request with a 400, or None."""
    if path == "/v1/completions":
        request_model, validate = _vllm()
        try:
            params = request_model.model_validate(payload).to_sampling_params(max_tokens=payload.get("max_tokens") or 16)
            validate(params)
        except Exception as e:  # vLLM's VLLMValidationError, pydantic's ValidationError
            return f"vLLM refuses the request: {type(e).__name__}: {e}"
        return None
    if path == "/generate":
        tag = (payload.get("sampling_params") or {}).get("structural_tag")
        if tag is not None:
            from xgrammar import StructuralTag

            try:
                StructuralTag.from_json(tag if isinstance(tag, str) else json.dumps(tag))
            except Exception as e:
                return f"SGLang's xgrammar cannot read the structural tag: {e}"
        return None
    return _llama_server_refusal(payload, tok)


def _llama_server_refusal(payload: dict, tok: Any) -> str | None:
    from gbnf import parse

    if payload.get("grammar_lazy") is not None and not isinstance(payload["grammar_lazy"], bool):
        return "grammar_lazy must be a boolean"
    grammar = payload.get("grammar")
    if grammar is not None:
        try:
            parse(grammar)
        except (AssertionError, IndexError, KeyError, ValueError) as e:
            return f"failed to parse grammar ({e})"
    preserved = set()
    for t in payload.get("preserved_tokens") or []:
        tid = tok.single_token_id(t)
        if tid is not None:
            preserved.add(tid)
    triggers = payload.get("grammar_triggers")
    if triggers is not None:
        for t in triggers:
            kind = t.get("type") if isinstance(t, dict) else None
            if kind not in (0, 1, 2, 3) or not isinstance(t.get("value"), str):
                # an unknown type aborted llama-server (GGML_ASSERT in common/sampling.cpp)
                raise AssertionError(f"llama-server would crash on the trigger {t!r}")
            if kind == 0 and not isinstance(t.get("token"), int):
                return "a token trigger needs its token id"
            if kind == 1:
                tid = tok.single_token_id(t["value"])
                if tid is not None and tid not in preserved:
                    return f"Grammar trigger word should be marked as preserved token: {t['value']}"
    if payload.get("grammar_lazy") and not triggers:
        if triggers is None:  # taken with 200, and the grammar never armed: the stand-in says so
            raise AssertionError("a lazy grammar without grammar_triggers: llama-server never arms it")
        return "Error: no triggers set for lazy grammar!"
    return None


# ---------------------------------------------------------------- enforcement


@functools.cache
def _compiler(tok: Any):
    import xgrammar
    from transformers import PreTrainedTokenizerFast

    hf = PreTrainedTokenizerFast(tokenizer_object=tok.hf)
    info = xgrammar.TokenizerInfo.from_huggingface(hf, vocab_size=tok.hf.get_vocab_size(with_added_tokens=True))
    return xgrammar.GrammarCompiler(info)


def _stop_ids(path: str, payload: dict, tok: Any) -> list[int]:
    if path == "/v1/completions":
        return sorted(set(payload.get("stop_token_ids") or []) | set(tok.stop_token_ids))
    return sorted(set((payload.get("sampling_params") or {}).get("stop_token_ids") or []) | set(tok.stop_token_ids))


def admits(path: str, payload: dict, ids: Sequence[int], tok: Any, eog: frozenset[int] = frozenset()) -> bool:
    """Whether the engine, given this request, could produce `ids` (up to its first stop token)."""
    kind, value = strict_constraint(path, payload) or (None, None)
    if kind is None:
        return True
    if kind == "structural_tag":
        import xgrammar

        stops = _stop_ids(path, payload, tok)
        matcher = xgrammar.GrammarMatcher(_compiler(tok).compile_structural_tag(value), override_stop_tokens=stops)
        for t in ids:
            if not matcher.accept_token(t):
                return False
            if t in stops:
                return True
        return True  # cut short (max tokens): what came was admitted
    return _lazy_admits(value, list(ids), tok, eog or frozenset(tok.stop_token_ids))


def _lazy_admits(payload: dict, ids: list[int], tok: Any, eog: frozenset[int]) -> bool:
    from gbnf import accepts, token_char

    grammar = payload["grammar"]
    named = {int(t) for t in re.findall(r"<\[(\d+)\]>", grammar)}
    preserved = {tok.single_token_id(t) for t in payload.get("preserved_tokens") or []} - {None}
    token_triggers, words = set(), []
    for t in payload["grammar_triggers"]:
        if t["type"] == 0:
            token_triggers.add(t["token"])
        elif t["type"] == 1:
            tid = tok.single_token_id(t["value"])
            if tid is not None and tid in preserved:
                token_triggers.add(tid)
            else:
                words.append(t["value"])
        else:
            raise AssertionError("the stand-in reads token and word triggers only")
    end = next((i for i, t in enumerate(ids) if t in eog), len(ids))
    out, ended = ids[:end], end < len(ids)
    pieces = [token_char(t) if t in named else tok.decode([t]) for t in out]
    text = "".join(pieces)
    start = None  # where the grammar is armed, in `text`
    at = 0
    for t, piece in zip(out, pieces):
        if t in token_triggers:
            start = at
            break
        at += len(piece)
        hits = [text.find(w, 0, at) for w in words]
        hits = [h for h in hits if h >= 0]
        if hits:
            start = min(hits)
            break
    if start is None:
        return True  # never armed: free output
    constrained = text[start:]
    if ended:
        return accepts(grammar, constrained)  # the end of generation only where the grammar is complete
    return True
