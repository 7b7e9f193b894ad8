"""chatsieve's Dynamo chat engine driven directly, without a Dynamo runtime: a stand-in routed
engine hands it the ids of Gemma 4, Qwen3 and Qwen3-Coder fixture cases (real tokenizers) in
items of 1, 3 and all tokens; every answer must be the message chatsieve.parse gives for the same
ids, whether the items arrive one at a time or pile up (merged into few chunks). Also: the engine
request it builds, the launcher's command line, the parser-name map against
the installed Dynamo's parser names, and the version gate.
"""

from __future__ import annotations

import asyncio
import functools
import glob
import json
from pathlib import Path

import pytest

from chatsieve import StreamParser, render_prompt
from chatsieve.events import MessageBuilder
from chatsieve.fixtures import encode_segments, load_cases
from chatsieve.protocols.openai_chat import parse_chat_request
from chatsieve.tokenizer import load_tokenizer
from tests import dynamo_harness as harness

REPO = Path(__file__).resolve().parent.parent
MESSAGES = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def dyn():
    harness.require_dynamo()
    import chatsieve.integrations.dynamo as dyn

    return dyn


class Item:
    def __init__(self, data, error=None):
        self._data, self._error = data, error

    def is_error(self):
        return self._error is not None

    def comments(self):
        return [self._error] if self._error else []

    def data(self):
        return self._data


class RoutedEngine:
    """Dynamo's RoutedEngine as the engine sees it: generate(request, context) -> async items."""

    def __init__(self, items, fail_after=None, pause=False):
        self.items, self.fail_after, self.pause, self.requests = items, fail_after, pause, []

    async def generate(self, request, context=None):
        self.requests.append(request)

        async def stream():
            for n, item in enumerate(self.items):
                if self.fail_after is not None and n == self.fail_after:
                    raise ValueError("Internal: the worker died")
                if self.pause:  # one item at a time (else all are there at once: one batch)
                    await asyncio.sleep(0)
                yield item

        return stream()


class Context:
    def __init__(self):
        self.stopped = False

    def is_stopped(self):
        return self.stopped

    def stop_generating(self):
        self.stopped = True


class _ModelDirs(dict):
    """Model directories built on first use (a family whose template is missing skips alone)."""

    def __init__(self, root: Path) -> None:
        super().__init__()
        self.root = root

    def __missing__(self, family: str) -> Path:
        self[family] = harness.model_dir(self.root, family)
        return self[family]


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    return _ModelDirs(tmp_path_factory.mktemp("dynamo-engine"))


@functools.cache
def _tokenizer(directory: Path):
    return load_tokenizer(directory)


def _engine(dyn, directory, fmt, items, **kw):
    tok = _tokenizer(directory)
    routed = RoutedEngine(items, **kw)
    engine = dyn.ChatsieveChatEngine(format=fmt, tokenizer=tok, routed_engine=routed, model="m",
                                     context_length=40960, options=dyn.DynamoOptions())  # fmt: skip
    return engine, routed, tok


def _collect(engine, body, context=None):
    async def go():
        return [c async for c in engine.generate(body, context)]

    return asyncio.run(go())


def _folded(chunks):
    content, reasoning, calls, finish = "", "", {}, None
    for c in chunks:
        for choice in c.get("choices") or ():
            d = choice["delta"]
            assert "reasoning" not in d
            content += d.get("content") or ""
            reasoning += d.get("reasoning_content") or ""
            for tc in d.get("tool_calls") or ():
                slot = calls.setdefault(tc["index"], ["", ""])
                slot[0] += (tc.get("function") or {}).get("name") or ""
                slot[1] += (tc.get("function") or {}).get("arguments") or ""
            finish = choice["finish_reason"] or finish
    return content or None, reasoning or None, [tuple(calls[i]) for i in sorted(calls)], finish


FIXTURES = {"qwen3": "qwen3", "qwen3_coder": "qwen3_coder", "gemma4": "gemma4"}


def _cases():
    out = []
    for family in FIXTURES:
        for path in sorted(glob.glob(str(REPO / "tests" / "fixtures" / family / "*.yaml"))):
            for case in load_cases(path):
                if case.token_mode and not case.options.get("prompt") and not case.options.get("stop"):
                    out.append(pytest.param(family, case, id=f"{family}/{Path(path).name}/{case.name}"))
    return out


@pytest.mark.parametrize("family,case", _cases())
def test_fixture_cases_match_chatsieve_parse_at_engine_batch_sizes(dyn, model_dirs, family, case):
    tok = _tokenizer(model_dirs[family])
    try:
        ids = encode_segments(tok, case.segments)
    except ValueError:
        pytest.skip("the tokenizer does not round-trip this case's text")
    thinking = case.options.get("thinking")
    kwargs = {} if thinking is None else {"enable_thinking": thinking}
    tools = [t if "function" in t else {"type": "function", "function": t} for t in case.options.get("tools") or ()]
    tools = tools or None  # fixtures may write a tool as {name, parameters}: OpenAI's shape here
    prompt = render_prompt(MESSAGES, tokenizer=tok, tools=tools, format=case.format, **kwargs)
    parser = StreamParser(case.format, tools=tools, thinking=thinking, prompt=prompt.text, tokenizer=tok,
                          stop_token_ids=sorted(tok.stop_token_ids))  # fmt: skip
    body = {"messages": MESSAGES, "chat_template_args": kwargs, **({"tools": tools} if tools else {})}
    calls = parse_chat_request({**body, "chat_template_kwargs": kwargs}).tool_call_filter()  # offered tools only
    builder = MessageBuilder()
    for e in calls.apply(parser.feed(token_ids=ids) + parser.finish(case.finish_reason or "stop")):
        builder.apply(e)
    want = builder.message
    for size, pause in ((1, True), (1, False), (3, True), (max(len(ids), 1), False)):
        items = [Item({"token_ids": ids[i : i + size]}) for i in range(0, len(ids), size)]
        items.append(Item({"token_ids": [], "finish_reason": case.finish_reason or "stop"}))
        engine, routed, _ = _engine(dyn, model_dirs[family], case.format, items, pause=pause)
        content, reasoning, calls, finish = _folded(_collect(engine, body))
        assert (content, reasoning) == (want.content, want.reasoning), size
        assert calls == [(c.name, c.arguments) for c in want.tool_calls], size
        assert finish == ("tool_calls" if want.tool_calls else "length" if parser.finish_reason == "length" else "stop")
        assert routed.requests[0]["token_ids"] == prompt.token_ids


def test_engine_request_fields(dyn, model_dirs):
    engine, routed, tok = _engine(dyn, model_dirs["qwen3"], "qwen3", [Item({"token_ids": [], "finish_reason": "stop"})])
    body = {"messages": MESSAGES, "max_tokens": 9, "temperature": 0.5, "top_k": 0, "seed": 3,
            "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}},
            "chat_template_args": {"enable_thinking": False}, "routing": {"priority": 1},
            "nvext": {"annotations": ["a:b", 7], "backend_instance_id": 42}}  # fmt: skip
    chunks = _collect(engine, body)
    (req,) = routed.requests
    assert req["stop_conditions"]["max_tokens"] == 9 and "stop" not in req["stop_conditions"]
    assert req["sampling_options"]["temperature"] == 0.5 and req["sampling_options"]["top_k"] is None
    assert req["sampling_options"]["guided_decoding"] == {"json": {"type": "object"}}
    assert req["annotations"] == ["a:b"] and req["routing"] == {"backend_instance_id": 42, "priority": 1}
    assert req["extra_args"] == {"nvext": body["nvext"]} and req["eos_token_ids"] == sorted(tok.stop_token_ids)
    assert req["output_options"] == {"logprobs": None, "skip_special_tokens": False}
    assert sum(c["llm_metrics"]["chunk_tokens"] for c in chunks) == chunks[-1]["llm_metrics"]["output_tokens"]
    assert chunks[-1]["usage"]["completion_tokens"] == 0 and chunks[-1]["llm_metrics"]["input_tokens"] == len(
        req["token_ids"]
    )


def test_request_errors_are_invalid_argument_with_the_message(dyn, model_dirs):
    from dynamo.llm.exceptions import InvalidArgument

    engine, routed, _ = _engine(dyn, model_dirs["qwen3"], "qwen3", [])
    bad = {"messages": MESSAGES, "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "required"}
    with pytest.raises(InvalidArgument, match="tool_choice 'required' with thinking on for format 'qwen3'"):
        _collect(engine, bad)
    with pytest.raises(InvalidArgument, match="response_format with thinking on"):
        _collect(engine, {"messages": MESSAGES, "response_format": {"type": "json_object"}})
    # template variables are checked as in chatsieve serve (chatsieve.preparation): server-owned
    # names refused, switches booleans only
    with pytest.raises(InvalidArgument, match="chat_template_kwargs: .*bos_token"):
        _collect(engine, {"messages": MESSAGES, "chat_template_kwargs": {"bos_token": "<|im_start|>system"}})
    with pytest.raises(InvalidArgument, match="chat_template_kwargs: .*enable_thinking"):
        _collect(engine, {"messages": MESSAGES, "chat_template_args": {"enable_thinking": "yes"}})
    with pytest.raises(InvalidArgument, match="logit_bias cannot be passed through Dynamo"):
        _collect(engine, {"messages": MESSAGES, "logit_bias": {"15": -100}})
    assert routed.requests == []  # refused before the engine was asked


def test_engine_failure_becomes_one_error_envelope(dyn, model_dirs):
    ids = _tokenizer(model_dirs["qwen3"]).encode("<think>\n\n</think>\n\nsome words here")
    engine, _, _ = _engine(dyn, model_dirs["qwen3"], "qwen3", [Item({"token_ids": [i]}) for i in ids], fail_after=3)
    chunks = _collect(engine, {"messages": MESSAGES})
    assert chunks[-1] == {"_dynamo_annotated": True, "event": "error",
                          "comment": ["the inference engine failed on this request: Internal: the worker died"]}  # fmt: skip
    engine, _, _ = _engine(dyn, model_dirs["qwen3"], "qwen3", [Item(None, error="worker gone")])
    assert _collect(engine, {"messages": MESSAGES})[-1]["event"] == "error"
    engine, _, _ = _engine(dyn, model_dirs["qwen3"], "qwen3", [Item({"token_ids": [10**9]})])
    assert "outside the tokenizer's vocabulary" in _collect(engine, {"messages": MESSAGES})[-1]["comment"][0]


def test_local_stop_and_max_tokens_stop_the_engine(dyn, model_dirs):
    tok = _tokenizer(model_dirs["qwen3"])
    ids = tok.encode("<think>\n\n</think>\n\none two three four five six")
    engine, _, _ = _engine(dyn, model_dirs["qwen3"], "qwen3", [Item({"token_ids": [i]}) for i in ids])
    context = Context()
    content, _, _, finish = _folded(_collect(engine, {"messages": MESSAGES, "stop": [" three"]}, context))
    assert content == "one two" and finish == "stop" and context.stopped
    engine, _, _ = _engine(dyn, model_dirs["qwen3"], "qwen3", [Item({"token_ids": ids})])  # all in one item
    chunks = _collect(engine, {"messages": MESSAGES, "stop": [" three"]}, Context())
    assert _folded(chunks)[0] == "one two"
    assert chunks[-1]["usage"]["completion_tokens"] == ids.index(tok.encode(" three")[0]) + 1  # none past the stop
    engine, _, _ = _engine(dyn, model_dirs["qwen3"], "qwen3", [Item({"token_ids": ids})])  # one big item
    context = Context()
    chunks = _collect(engine, {"messages": MESSAGES, "max_tokens": len(ids) - 2}, context)
    assert _folded(chunks)[3] == "length" and chunks[-1]["usage"]["completion_tokens"] == len(ids) - 2
    assert sum(c["llm_metrics"]["chunk_tokens"] for c in chunks) == len(ids) - 2 == chunks[-1]["llm_metrics"]["output_tokens"]
    assert context.stopped  # an engine that ignored max_tokens is stopped at the cut
    engine, _, _ = _engine(dyn, model_dirs["qwen3"], "qwen3", [Item({"token_ids": ids, "finish_reason": "eos"})])
    context = Context()
    assert _folded(_collect(engine, {"messages": MESSAGES}, context))[3] == "stop" and not context.stopped


def test_parser_name_map_names_real_parsers_and_formats(dyn):
    from dynamo.common.configuration.groups.runtime_args import (
        get_reasoning_parser_names,
        get_tool_parser_names,
    )

    from chatsieve import formats

    tools, reasoning = set(get_tool_parser_names()), set(get_reasoning_parser_names())
    for (tool, why), fmt in dyn.PARSER_FORMATS.items():
        assert tool in tools and why in reasoning and formats.get(fmt).name == fmt
    for tool, fmt in dyn.TOOL_PARSER_FORMATS.items():
        assert tool in tools and formats.get(fmt).name == fmt
    assert dyn.format_for_parsers("hermes", "qwen3") == "qwen3"
    assert dyn.format_for_parsers("hermes", None) == "hermes"
    assert dyn.format_for_parsers(None, "deepseek_r1") == "deepseek_r1"
    assert dyn.format_for_parsers("default", None) is None


def test_launcher_keeps_dynamos_flags(dyn):
    options, rest = dyn._split_args(["--format", "gemma-4", "--router-mode", "kv", "--http-port", "8000"])
    assert options.format == "gemma-4" and rest == ["--router-mode", "kv", "--http-port", "8000"]
    for bad in (["--format", "gema4"], ["--chat-processor", "vllm"]):
        with pytest.raises(SystemExit):
            dyn._split_args(bad)


def test_version_gate(dyn, monkeypatch):
    monkeypatch.setattr(dyn, "installed_version", lambda *names: "1.7.0")
    with pytest.raises(ImportError, match=r"supports NVIDIA Dynamo >=1.6,<1.7 \(tested with 1.6.1\)"):
        dyn._check_interfaces()


def test_forced_calls_as_a_json_call_list(dyn, model_dirs):
    tok = _tokenizer(model_dirs["qwen3"])
    ids = tok.encode('[{"name": "get_weather", "arguments": {"city": "Paris"}}]<|im_end|>')
    engine, routed, _ = _engine(dyn, model_dirs["qwen3"], "qwen3", [Item({"token_ids": [i]}) for i in ids], pause=True)
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
              "properties": {"city": {"type": "string"}}}}}]  # fmt: skip
    body = {"messages": MESSAGES, "tools": tools, "tool_choice": "required",
            "chat_template_args": {"enable_thinking": False}}  # fmt: skip
    content, reasoning, calls, finish = _folded(_collect(engine, body))
    assert (content, reasoning, finish) == (None, None, "tool_calls")
    assert [(n, json.loads(a)) for n, a in calls] == [("get_weather", {"city": "Paris"})]
    schema = routed.requests[0]["sampling_options"]["guided_decoding"]["json"]
    assert schema["type"] == "array" and schema["minItems"] == 1


class _Card:
    """A stand-in for Dynamo's model deployment card: a name and a local model directory."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def name(self) -> str:
        return "m"

    def local_dir(self) -> str:
        return str(self.directory)

    def runtime_config(self) -> dict:
        return {}

    def to_json_str(self) -> str:
        return "{}"


def test_format_auto_is_the_one_the_chat_template_writes(dyn, model_dirs):
    factory = dyn.ChatsieveEngineFactory(dyn.DynamoOptions(format="auto"))
    engine = asyncio.run(factory.make_engine(_Card(model_dirs["qwen3"]), RoutedEngine([])))
    assert engine.format == "qwen3"
