"""The tools a caller sent before, byte for byte, are not decoded again (server/known_tools.py): every
body reads as json.loads reads it, kept tools or not; the depth check refuses what it refused; the
kept value is never changed by a request; and each caller has its own."""

from __future__ import annotations

import copy
import json
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chatsieve import shared
from chatsieve.protocols.common import RequestError, check_json_depth
from chatsieve.server import known_tools
from chatsieve.server.intake import decode_body
from chatsieve.server.known_tools import KnownTools

_numbers = st.one_of(st.integers(), st.floats(allow_nan=True, allow_infinity=True))
_strings = st.one_of(st.text(max_size=8), st.sampled_from(['"tools":[', '\\"tools\\":', "é中🌦", "\ud800", "tools"]))
_json = st.recursive(
    st.one_of(st.none(), st.booleans(), _numbers, _strings),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(_strings, inner, max_size=3)),
    max_leaves=12,
)


def _encode(text: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate written as itself
        return text.encode("utf-8", "surrogatepass")


def _spell(value, ascii: bool, spaced: bool) -> str:
    return json.dumps(value, ensure_ascii=ascii, separators=(", ", ": ") if spaced else (",", ":"))


class _Whole:
    """decode_body, noting whether it was handed a body with the placeholder in it."""

    def __init__(self) -> None:
        self.placeholder = 0

    def __call__(self, raw: bytes):
        self.placeholder += known_tools._PLACEHOLDER in raw
        return decode_body(raw)


def _decode_as_json_loads(kt: KnownTools, raw: bytes, caller: str = "c", whole=decode_body) -> None:
    try:
        want = json.loads(raw)
    except ValueError as e:
        with pytest.raises(type(e)):
            kt.decode(raw, caller, whole)
        return
    assert repr(kt.decode(raw, caller, whole)) == repr(want)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(tools=st.lists(_json, min_size=1, max_size=4), before=st.dictionaries(_strings, _json, max_size=2),
       after=st.lists(st.dictionaries(_strings, _json, max_size=2), min_size=3, max_size=3),
       where=st.sampled_from(["top", "nested first", "duplicate before", "duplicate after", "spaces", "broken"]),
       ascii=st.booleans(), spaced=st.booleans())
def test_every_body_reads_as_json_loads_reads_it(tools, before, after, where, ascii, spaced):
    """Three bodies of one caller with the same tools' bytes (the third is read with the kept ones
    where they can be), shaped every way the placeholder could land elsewhere."""
    tools_text = _spell(tools, ascii, spaced)
    kt, whole = KnownTools(), _Whole()
    others_name_tools = False
    # (tools this short are not kept: MIN_BYTES is above _HEAD, the bytes that say they came again)
    with mock.patch.object(known_tools, "MIN_BYTES", 1), mock.patch.object(known_tools, "_HEAD", 1):
        for i, rest in enumerate(after):
            head = _spell(before, ascii, spaced)[1:-1]
            tail = _spell({**rest, "n": i}, ascii, spaced)[1:-1]
            sep = ", " if spaced else ","
            key = '"tools": ' if where == "spaces" else '"tools":'
            parts = [p for p in (head, key + tools_text, tail) if p]
            if where == "nested first":
                parts.insert(0, '"meta":{"tools":' + tools_text + "}")
            elif where == "duplicate before":
                parts.insert(0, '"tools":' + tools_text)
                parts.insert(1, '"tools":[1]')
            elif where == "duplicate after":
                parts.append('"tools":' + tools_text[:-1] + (",0]" if tools_text != "[]" else "0]"))
            text = "{" + sep.join(parts) + ("" if where == "broken" and i == 2 else "}")
            _decode_as_json_loads(kt, _encode(text), whole=whole)
            others_name_tools = others_name_tools or '"tools"' in head + tail
    # Where nothing else names `tools` (a nested key of ours first is fine) and the tools equal
    # themselves decoded again (no NaN), the third body was read with the kept tools.
    reads_back = all(json.dumps(t) == json.dumps(json.loads(json.dumps(t))) for t in tools)
    if where in ("top", "spaces", "nested first") and not others_name_tools and reads_back:
        assert whole.placeholder >= 1 and kt.hits == 1, "the third body was not read with the kept tools"


_TOOL = {"type": "function", "function": {"name": "write_file", "description": "Write a file. " * 100,
                                          "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}


def _body(tools: list, user: str, **extra) -> bytes:
    return json.dumps({"model": "m", "messages": [{"role": "user", "content": user}], "tools": tools,
                       **extra}).encode()


def test_tools_sent_twice_are_kept_and_then_not_decoded_again():
    kt, whole = KnownTools(), _Whole()
    tools = [_TOOL, {**_TOOL, "function": {**_TOOL["function"], "name": "read_file"}}]
    first = kt.decode(_body(tools, "a"), "team", whole)
    second = kt.decode(_body(tools, "b"), "team", whole)
    assert whole.placeholder == 0 and first["tools"] == second["tools"] == tools
    third = kt.decode(_body(tools, "c"), "team", whole)
    fourth = kt.decode(_body(tools, "d", stream=True), "team", whole)
    assert whole.placeholder == 2
    assert third["tools"] is fourth["tools"], "the kept value is shared"
    assert third == json.loads(_body(tools, "c")) and fourth == json.loads(_body(tools, "d", stream=True))
    assert list(fourth) == ["model", "messages", "tools", "stream"], "the keys' order changed"


def test_another_caller_does_not_read_with_a_callers_kept_tools():
    kt, whole = KnownTools(), _Whole()
    for user in "ab":
        kt.decode(_body([_TOOL], user), "team-a", whole)
    kt.decode(_body([_TOOL], "c"), "team-b", whole)
    assert whole.placeholder == 0
    kt.decode(_body([_TOOL], "d"), "team-a", whole)
    assert whole.placeholder == 1


def test_tools_that_cannot_be_kept_are_tried_ever_more_rarely():
    """Too short to be worth it: read alone on the 2nd, 3rd, 5th, 9th body in a row."""
    kt = KnownTools()
    tried = []
    real = known_tools._DECODER.raw_decode

    def raw_decode(text):
        tried.append(1)
        return real(text)

    with mock.patch.object(known_tools._DECODER, "raw_decode", raw_decode), \
            mock.patch.object(known_tools, "MIN_BYTES", 10), mock.patch.object(known_tools, "MAX_BYTES", 20):
        for k in range(17):
            kt.decode(_body([_TOOL], str(k)), "c", decode_body)
    assert len(tried) == 5  # bodies 2, 3, 5, 9, 17
    assert kt._kept == {}


def test_what_a_caller_keeps_is_bounded():
    kt = KnownTools()
    variants = [[{**_TOOL, "function": {**_TOOL["function"], "name": f"f{k}"}}] for k in range(6)]
    learned = []
    for tools in variants:  # each sent twice: kept
        for user in "ab":
            kt.decode(_body(tools, user), "c", decode_body)
        learned.append(kt._kept["c"][0].value)
    assert len(kt._kept["c"]) == known_tools.PER_CALLER
    assert [k.value for k in kt._kept["c"]] == variants[:1:-1], "not the newest, newest first"
    assert kt._kept_bytes == sum(len(k.raw) for k in kt._kept["c"])
    kept = [k.value for k in kt._kept["c"]]
    assert all(shared.is_shared(v) for v in kept)
    assert learned[:1:-1] == kept and not any(shared.is_shared(v) for v in learned[:2]), "values let go are still shared"
    with mock.patch.object(known_tools, "MAX_KEPT_BYTES", 1):
        for user in "ab":
            kt.decode(_body(variants[0], user), "d", decode_body)
    assert list(kt._kept) == ["d"], "the caller seen longest ago was not forgotten first"
    assert not any(shared.is_shared(v) for v in kept)
    last = kt._kept["d"][0].value
    kt.clear()  # (the server stops)
    assert kt._kept == {} and kt._kept_bytes == 0 and not shared.is_shared(last)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(tools=st.recursive(st.integers(), lambda inner: st.lists(inner, min_size=1, max_size=2), max_leaves=8),
       rest=st.recursive(st.integers(), lambda inner: st.lists(inner, min_size=1, max_size=2), max_leaves=8),
       limit=st.integers(min_value=1, max_value=8))
def test_the_depth_check_refuses_what_it_refused_without_the_kept_tools(tools, rest, limit):
    kt = KnownTools()
    tools = [tools]
    with mock.patch.object(known_tools, "MIN_BYTES", 1), mock.patch.object(known_tools, "_HEAD", 1):
        bodies = [kt.decode(json.dumps({"rest": rest, "tools": tools, "n": n}).encode(), "c", decode_body)
                  for n in range(3)]
    assert shared.is_shared(bodies[2]["tools"])
    for body in (bodies[2], json.loads(json.dumps(bodies[2]))):  # kept, and decoded whole
        try:
            check_json_depth(body, limit)
            refused = False
        except RequestError as e:
            assert e.code == "too_deeply_nested"
            refused = True
        if body is bodies[2]:
            kept_refused = refused
    assert kept_refused == refused


# ------------------------------------------------------------------------------ through the server
# Every route reads its tools from the body's `tools`: the same bytes three times from one caller,
# the third read with the kept value, give the engine the same prompt, and the kept value is as it
# was after every request.

_ROUTES = {
    "chat": ("/v1/chat/completions", lambda user: {
        "model": "qwen3", "messages": [{"role": "user", "content": user}], "max_tokens": 8,
        "tools": [_TOOL, {**_TOOL, "function": {**_TOOL["function"], "name": "read_file"}}]}),
    "messages": ("/v1/messages", lambda user: {
        "model": "qwen3", "messages": [{"role": "user", "content": user}], "max_tokens": 8,
        "tools": [{"name": "write_file", "description": "Write a file. " * 100,
                   "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}]}),
    "responses": ("/v1/responses", lambda user: {
        "model": "qwen3", "input": user, "max_output_tokens": 8,
        "tools": [{"type": "function", "name": "write_file", "description": "Write a file. " * 100,
                   "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}]}),
}


@pytest.fixture(scope="module")
def served():
    import contextlib

    from fake_engines import FakeEngine, Script, ServerThread
    from models import model_path, tokenizer

    from chatsieve.server.app import create_app
    from chatsieve.server.config import ServerConfig

    tok = tokenizer("qwen3")
    engine = FakeEngine(tok.decode, {"same tools": Script(tok.encode("Done."))})
    with contextlib.ExitStack() as stack:
        engine_url = stack.enter_context(ServerThread(engine.app)).url
        cfg = ServerConfig(model_dir=model_path("qwen3"), format="qwen3", backend_url=engine_url, warm_up=False)
        app = create_app(cfg, tokenizer=tok)
        url = stack.enter_context(ServerThread(app)).url
        yield url, engine, app.state.service


@pytest.mark.parametrize("route", sorted(_ROUTES))
def test_each_route_prompts_the_same_with_the_kept_tools_and_changes_them_not(served, route, monkeypatch):
    """... and what is derived from the tools alone (the route's own reading of them, the parser's
    schemas, each tool's tojson in the prompt) is derived on the first request that has them kept,
    not on the next."""
    import httpx

    from chatsieve import engine as engine_module
    from chatsieve import jinja_env
    from chatsieve import parser as parser_module

    derived: list[str] = []

    def counted(module, name):
        real = getattr(module, name)

        def count(value, *args, **kw):
            if shared.is_shared(value):
                derived.append(name)
            return real(value, *args, **kw)

        monkeypatch.setattr(module, name, count)

    counted(parser_module, "normalize_tools")
    counted(engine_module, "typing_schemas")
    counted(jinja_env, "_dumps")
    url, engine, service = served
    path, make = _ROUTES[route]
    raw = json.dumps(make("same tools")).encode()
    seen = len(engine.requests)
    kept_before = {id(k.value) for ks in service.known_tools._kept.values() for k in ks}
    snapshot, hits = None, service.known_tools.hits
    for n in range(4):
        derived.clear()
        r = httpx.post(url + path, content=raw, headers={"content-type": "application/json"}, timeout=60)
        if n == 2:
            assert {"normalize_tools", "typing_schemas", "_dumps"} <= set(derived)
        elif n == 3:
            assert derived == [], f"derived again from the kept tools: {derived}"
        assert r.status_code == 200, r.text
        kept = [k for ks in service.known_tools._kept.values() for k in ks if id(k.value) not in kept_before]
        if kept:
            snapshot = snapshot or copy.deepcopy(kept[0].value)
            assert kept[0].value == snapshot == make("")["tools"], "a request changed the kept tools"
    assert snapshot is not None, "the tools were not kept"
    assert service.known_tools.hits - hits == 2, "the third and fourth bodies were not read with the kept tools"
    prompts = [json.dumps(payload.get("prompt")) for _, payload in engine.requests[seen:]]
    assert len(prompts) == 4 and len(set(prompts)) == 1, "the kept tools gave another prompt"


# ------------------------------------------------------------------------------ chatsieve/shared.py


def test_what_is_derived_from_a_shared_list_is_derived_once_and_let_go_with_it():
    tools = [{"a": 1}, {"b": [2]}]
    calls = []

    def derive(value, *extra):
        calls.append(extra)
        return {"n": len(value)}, [dict(x) for x in value]

    assert shared.once(tools, "d", derive) == ({"n": 2}, [{"a": 1}, {"b": [2]}]) and len(calls) == 1
    assert shared.once(tools, "d", derive) is not shared.once(tools, "d", derive), "kept for a value not shared"
    calls.clear()
    shared.share(tools, 3)
    try:
        assert shared.depth(tools) == 3 and shared.is_shared(tools[0]) and shared.depth(tools[0]) is None
        first = shared.once(tools, "d", derive, "x")
        assert shared.once(tools, "d", derive, "x") is first and calls == [("x",)]
        counts, copies = first
        # what a derivation gives is shared in turn, and what is derived from it is kept too
        assert shared.is_shared(counts) and shared.is_shared(copies) and shared.is_shared(copies[0])
        again = shared.once(copies, "e", lambda v: [len(v)])
        assert shared.once(copies, "e", lambda v: [0]) is again
        with pytest.raises(ValueError):
            shared.once(tools, "f", lambda v: (_ for _ in ()).throw(ValueError("no")))
        assert shared.once(tools, "f", lambda v: "then") == "then", "a derivation that raised was kept"
    finally:
        shared.unshare(tools)
    assert not any(shared.is_shared(v) for v in (tools, tools[0], counts, copies, copies[0], again))
    assert shared.once(tools, "d", derive, "y") is not first


def test_the_bodys_own_tools_are_found_after_a_nested_tools_key():
    """A message's tool input with a `tools` key comes before the body's own tools (messages first,
    as Claude Code writes its bodies): learnt and read with the kept value all the same."""
    kt, whole = KnownTools(), _Whole()

    def body(user: str) -> bytes:
        return json.dumps({"model": "m", "messages": [
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "configure",
                                               "input": {"tools": ["a", "b"]}}]},
            {"role": "user", "content": user}], "tools": [_TOOL]}).encode()

    for user in "abcd":
        got = kt.decode(body(user), "c", whole)
        assert repr(got) == repr(json.loads(body(user)))
    assert whole.placeholder == 2 and kt.hits == 2
