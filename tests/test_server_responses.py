"""`POST /v1/responses` with the real `openai` client (`responses.create` / `.stream` /
`.retrieve` / `.delete` / `.input_items.list`) against the real app and a stand-in engine that
replays real-tokenizer ids, for six families: a call, parallel calls, text then a call,
reasoning, multi-turn by resending items and by previous_response_id, streaming = whole,
max_output_tokens -> incomplete, text.format, usage, errors.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai
import pytest
from fake_engines import FakeEngine, Script, ServerThread
from readme_recipes import readme_blocks
from test_server_agent_loop import FAMILIES as LOOP_FAMILIES
from test_server_agent_loop import Family, _tokenizer

from chatsieve import formats
from chatsieve.protocols.common import LEFT_OUT_HEADER
from chatsieve.server.app import create_app
from chatsieve.server.config import ServerConfig

MODEL = "responses-model"
TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
RESULT = "18C and sunny"
ANSWER = "It is 18C and sunny in Paris."
REASONING = "The user wants the weather; I know it."
OFF = {"effort": "none"}  # thinking off, so the scripts need no reasoning block
ON = {"effort": "high"}


@dataclass(frozen=True)
class Writer:
    """How a family's model writes reasoning, text and calls (what the stand-in engine replays)."""

    call: Callable[[int, str, dict], str]  # (index, name, arguments) -> one call's markup
    section: Callable[[str], str] = lambda calls: calls  # the calls' markup around them
    think: Callable[[str], str] = lambda r: r  # a reasoning block, thinking on
    end: str = ""  # after text
    call_end: str = ""  # after calls
    parallel: bool = True

    def out(self, *, reasoning: str | None = None, text: str = "", calls: tuple = ()) -> str:
        head = self.think(reasoning) if reasoning is not None else ""
        if not calls:
            return head + text + self.end
        body = "".join(self.call(i, n, a) for i, (n, a) in enumerate(calls))
        return head + text + self.section(body) + (self.call_end or self.end)


class HarmonyWriter(Writer):
    """gpt-oss: channels; text beside a call is a commentary preamble, an answer is final."""

    def out(self, *, reasoning: str | None = None, text: str = "", calls: tuple = ()) -> str:
        parts = [f"<|channel|>analysis<|message|>{reasoning}<|end|><|start|>assistant"] if reasoning else []
        if calls:
            if text:
                parts.append(f"<|channel|>commentary<|message|>{text}<|end|><|start|>assistant")
            parts += [self.call(i, n, a) for i, (n, a) in enumerate(calls)]
        else:
            parts.append(f"<|channel|>final<|message|>{text}<|return|>")
        return "".join(parts)


def _gemma_args(a: dict) -> str:
    return ",".join(f'{k}:<|"|>{v}<|"|>' for k, v in a.items())


def _xml_args(a: dict) -> str:
    return "".join(f"<arg_key>{k}</arg_key><arg_value>{v}</arg_value>" for k, v in a.items())


WRITERS = {
    "qwen3": Writer(
        call=lambda i, n, a: f"<tool_call>\n{json.dumps({'name': n, 'arguments': a})}\n</tool_call>",
        think=lambda r: f"<think>\n{r}\n</think>\n\n",
        end="<|im_end|>",
    ),
    "gemma4": Writer(
        call=lambda i, n, a: f"<|tool_call>call:{n}{{{_gemma_args(a)}}}<tool_call|>",
        think=lambda r: f"<|channel>thought\n{r}<channel|>",
        end="<turn|>",
    ),
    "gpt_oss": HarmonyWriter(
        call=lambda i, n, a: (
            f"<|channel|>commentary to=functions.{n} <|constrain|>json<|message|>{json.dumps(a)}<|call|>"
        ),
        parallel=False,  # <|call|> is a stop token: one call per turn
    ),
    "deepseek_v31": Writer(
        call=lambda i, n, a: f"<｜tool▁call▁begin｜>{n}<｜tool▁sep｜>{json.dumps(a)}<｜tool▁call▁end｜>",
        section=lambda c: f"<｜tool▁calls▁begin｜>{c}<｜tool▁calls▁end｜>",
        think=lambda r: f"{r}</think>",  # the prompt opened the block
        end="<｜end▁of▁sentence｜>",
    ),
    "kimi_k2": Writer(
        call=lambda i, n, a: (
            f"<|tool_call_begin|>functions.{n}:{i}<|tool_call_argument_begin|>{json.dumps(a)}<|tool_call_end|>"
        ),
        section=lambda c: f"<|tool_calls_section_begin|>{c}<|tool_calls_section_end|>",
        think=lambda r: f"<think>{r}</think>",
        end="<|im_end|>",
    ),
    "glm47": Writer(
        call=lambda i, n, a: f"<tool_call>{n}{_xml_args(a)}</tool_call>",
        think=lambda r: f"{r}</think>",
        end="<|user|>",
        call_end="<|observation|>",
    ),
}
FAMILY_ROWS = {
    **{name: LOOP_FAMILIES[name] for name in WRITERS if name in LOOP_FAMILIES},
    "deepseek_v31": Family("deepseek_v31", "deepseek", "deepseek/chat_template.v3.1.jinja", "", ""),
}
PARIS = ("get_weather", {"city": "Paris"})
LONDON = ("get_weather", {"city": "London"})
LONG = " ".join(f"word{i}" for i in range(40))
SUMMARY = "The file out.txt was written; nothing is left to do."
JSON_ANSWER = '{"city": "Paris", "temp": 18}'


def _scripts(name: str, w: Writer, encode) -> dict[str, Script]:
    plays = {
        f"[single:{name}]": w.out(calls=(PARIS,)),
        f"[agent:{name}]": w.out(calls=(PARIS,)),
        f"[parallel:{name}]": w.out(calls=(PARIS, LONDON) if w.parallel else (PARIS,)),
        f"[text-call:{name}]": w.out(text="Let me check.", calls=(PARIS,)),
        f"[reason:{name}]": w.out(reasoning=REASONING, text="Hi there."),
        f"[long:{name}]": w.out(text=LONG),
        f"[json:{name}]": w.out(text=JSON_ANSWER),
        f"{RESULT} for {name}": w.out(text=ANSWER),
    }
    # Codex's real requests (tests/data/codex): its task, then the command's output; the family's
    # default thinking holds (Codex sends no effort), so the reasoning block follows it
    thinks = formats.get(FAMILY_ROWS[name].format).default_thinking
    shell = ("exec_command", {"cmd": "echo hi > out.txt"})
    plays["Write hi to out.txt"] = w.out(reasoning="Run it." if thinks else None, calls=(shell,))
    plays["Process exited with code 0"] = w.out(reasoning="It ran." if thinks else None, text=ANSWER)
    # Codex compacts a long session itself, with an ordinary request asking for a summary
    plays["CONTEXT CHECKPOINT COMPACTION"] = w.out(reasoning="Sum up." if thinks else None, text=SUMMARY)
    if name == "gpt_oss":  # gpt-oss: the constraint covers its whole output (README, structured
        # output), so the engine writes the JSON alone, without an analysis message
        plays[f"[json:{name}]"] = f"{JSON_ANSWER}<|return|>"
    scripts = {key: Script(encode(text), batch=3) for key, text in plays.items()}
    scripts[f"[fail-mid:{name}]"] = Script(encode(w.out(text=LONG)), batch=3, fail="error_event")
    scripts[f"[fail-now:{name}]"] = Script(encode(w.out(text=LONG)), fail="status")
    return scripts


@pytest.fixture(scope="module", params=sorted(WRITERS))
def served(request, tmp_path_factory):
    name = request.param
    family = FAMILY_ROWS[name]
    tok = _tokenizer(family)
    engine = FakeEngine(tok.decode, _scripts(name, WRITERS[name], tok.encode))
    with contextlib.ExitStack() as stack:
        engine_url = stack.enter_context(ServerThread(engine.app)).url
        cfg = ServerConfig(
            model_dir=tmp_path_factory.mktemp(name),
            format=family.format,
            backend_url=engine_url,
            served_model_name=MODEL,
            warm_up=False,
            response_store=str(tmp_path_factory.mktemp("store") / "responses.db"),
        )
        url = stack.enter_context(ServerThread(create_app(cfg, tokenizer=tok))).url
        yield name, url, engine


def client(url: str, key: str = "none") -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key=key, max_retries=0, timeout=60)


def ask(c: openai.OpenAI, stream: bool, **kw):
    """One response, whole or through `responses.stream` (its accumulated final response)."""
    kw = {"model": MODEL, "tools": [TOOL], "reasoning": OFF, **kw}
    if not stream:
        return c.responses.create(**kw)
    with c.responses.stream(**kw) as s:
        events = list(s)
        final = s.get_final_response()
    seqs = [e.sequence_number for e in events]
    assert seqs == list(range(len(seqs)))
    assert events[0].type == "response.created" and events[-1].type == "response.completed"
    return final


def calls(r) -> list[tuple[str, dict]]:
    return [(o.name, json.loads(o.arguments)) for o in r.output if o.type == "function_call"]


def shape(r) -> list[dict]:
    """Output items without ids (streamed and whole must agree on the rest)."""
    out = []
    for o in r.output:
        d = o.to_dict()
        d.pop("id", None)
        d.pop("call_id", None)
        d.pop("parsed_arguments", None)  # the stream helper adds it
        for p in d.get("content") or []:
            p.pop("parsed", None)
        out.append(d)
    return out


STREAM = pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])


@STREAM
def test_single_call(served, stream):
    name, url, _ = served
    r = ask(client(url), stream, input=f"[single:{name}] Weather in Paris?")
    assert r.status == "completed" and r.id.startswith("resp_") and r.object == "response"
    (call,) = [o for o in r.output if o.type == "function_call"]
    assert (call.name, json.loads(call.arguments)) == PARIS
    assert call.status == "completed" and call.id.startswith("fc_") and call.call_id
    assert r.output_text == ""
    assert r.usage.input_tokens > 0 and r.usage.output_tokens > 0
    assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens


@STREAM
def test_parallel_calls(served, stream):
    name, url, _ = served
    r = ask(client(url), stream, input=f"[parallel:{name}] Paris and London?")
    assert calls(r) == ([PARIS, LONDON] if WRITERS[name].parallel else [PARIS])
    ids = [o.call_id for o in r.output]
    assert len(set(ids)) == len(ids)


@STREAM
def test_text_then_call(served, stream):
    name, url, _ = served
    r = ask(client(url), stream, input=f"[text-call:{name}] Weather?")
    assert [o.type for o in r.output] == ["message", "function_call"]
    assert r.output_text == "Let me check." and calls(r) == [PARIS]
    assert r.output[0].content[0].annotations == []


@STREAM
def test_reasoning_item(served, stream):
    name, url, _ = served
    r = ask(client(url), stream, input=f"[reason:{name}] Hello", reasoning=ON)
    assert [o.type for o in r.output] == ["reasoning", "message"]
    assert r.output[0].content[0].type == "reasoning_text" and r.output[0].content[0].text == REASONING
    assert r.output_text == "Hi there."
    assert 0 < r.usage.output_tokens_details.reasoning_tokens < r.usage.output_tokens


@STREAM
def test_stream_equals_whole(served, stream):
    name, url, _ = served
    c = client(url)
    for key, reasoning in (("text-call", OFF), ("reason", ON), ("parallel", OFF)):
        whole = ask(c, False, input=f"[{key}:{name}] x", reasoning=reasoning)
        streamed = ask(c, True, input=f"[{key}:{name}] x", reasoning=reasoning)
        assert shape(streamed) == shape(whole)
        assert streamed.usage == whole.usage


def _loop(c, name: str, stream: bool, chained: bool):
    first = ask(c, stream, input=f"[single:{name}] Weather in Paris?", store=chained)
    (call,) = [o for o in first.output if o.type == "function_call"]
    result = {"type": "function_call_output", "call_id": call.call_id, "output": f"{RESULT} for {name}"}
    if chained:
        return ask(c, stream, previous_response_id=first.id, input=[result])
    items = [{"role": "user", "content": f"[single:{name}] Weather in Paris?"}]
    items += [o.to_dict() for o in first.output] + [result]
    return ask(c, stream, input=items, store=False)


@STREAM
@pytest.mark.parametrize("chained", [False, True], ids=["resend", "previous_response_id"])
def test_multi_turn(served, stream, chained):
    name, url, engine = served
    final = _loop(client(url), name, stream, chained)
    assert final.output_text == ANSWER and not calls(final)
    prompt = engine.decode(engine.requests[-1][1]["prompt"])
    turn = prompt.split(f"[single:{name}]", 1)[1]
    assert "Paris" in turn and f"{RESULT} for {name}" in turn  # the call and its result went back


@STREAM
def test_max_output_tokens_is_incomplete(served, stream):
    name, url, _ = served
    kw = {"model": MODEL, "input": f"[long:{name}] talk", "max_output_tokens": 5, "reasoning": OFF}
    c = client(url)
    if stream:
        with c.responses.stream(**kw) as s:
            events = list(s)
        assert events[-1].type == "response.incomplete"
        r = events[-1].response
    else:
        r = c.responses.create(**kw)
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert r.usage.output_tokens == 5 and LONG.startswith(r.output_text.strip())


@STREAM
def test_text_format_json_schema(served, stream):
    name, url, engine = served
    schema = {"type": "object", "properties": {"city": {"type": "string"}, "temp": {"type": "integer"}}}
    fmt = {"format": {"type": "json_schema", "name": "weather", "schema": schema, "strict": True}}
    r = ask(client(url), stream, input=f"[json:{name}] as JSON", text=fmt, tools=[])
    assert json.loads(r.output_text) == {"city": "Paris", "temp": 18}
    assert engine.requests[-1][1]["structured_outputs"] == {"json": schema}  # enforced by the engine
    assert r.text.format.type == "json_schema"


def test_store_retrieve_input_items_delete(served):
    name, url, _ = served
    c = client(url)
    r = c.responses.create(model=MODEL, input=f"[text-call:{name}] Weather?", tools=[TOOL], reasoning=OFF)
    got = c.responses.retrieve(r.id)
    assert got.id == r.id and shape(got) == shape(r)
    items = c.responses.input_items.list(r.id)
    assert [i.type for i in items.data] == ["message"] and items.data[0].content[0].text.startswith(
        "[text-call"
    )
    # a second turn lists the whole conversation it was made from, newest first
    r2 = c.responses.create(
        model=MODEL, previous_response_id=r.id, input="and London?", tools=[TOOL], reasoning=OFF
    )
    listed = c.responses.input_items.list(r2.id, order="asc")
    assert [i.type for i in listed.data] == ["message", "message", "function_call", "message"]
    assert c.responses.delete(r.id) is None
    with pytest.raises(openai.NotFoundError) as info:
        c.responses.retrieve(r.id)
    assert info.value.body["code"] == "not_found" and r.id in info.value.body["message"]


def test_store_false_stores_nothing(served):
    name, url, _ = served
    c = client(url)
    r = c.responses.create(model=MODEL, input=f"[single:{name}] x", tools=[TOOL], reasoning=OFF, store=False)
    with pytest.raises(openai.NotFoundError):
        c.responses.retrieve(r.id)
    with pytest.raises(openai.NotFoundError) as info:
        c.responses.create(model=MODEL, previous_response_id=r.id, input="more", reasoning=OFF)
    assert info.value.body["param"] == "previous_response_id"


def test_errors_in_openai_shape(served):
    name, url, _ = served
    c = client(url)
    with pytest.raises(openai.BadRequestError) as info:
        c.responses.create(
            model=MODEL,
            input=[{"role": "user", "content": [{"type": "input_image", "image_url": "http://x/cat.png"}]}],
        )
    assert info.value.body["param"] == "input[0].content[0]" and "input_image" in info.value.body["message"]
    with pytest.raises(openai.NotFoundError) as info:
        c.responses.create(model="no-such-model", input="hi")
    assert info.value.body["code"] == "model_not_found"
    with pytest.raises(openai.NotFoundError):
        c.responses.retrieve("resp_unknown")
    with pytest.raises(openai.NotFoundError):
        c.responses.delete("resp_unknown")
    bad = httpx.post(url + "/v1/responses", content=b"{", headers={"content-type": "application/json"})
    assert bad.status_code == 400 and "not valid JSON" in bad.json()["error"]["message"]


def test_left_out_tools_are_named(served):
    name, url, _ = served
    body = {
        "model": MODEL,
        "input": f"[single:{name}] x",
        "reasoning": OFF,
        "tools": [TOOL, {"type": "web_search"}, {"type": "custom", "name": "apply_patch"}],
    }
    r = httpx.post(url + "/v1/responses", json=body, timeout=60)
    assert r.status_code == 200
    assert r.headers[LEFT_OUT_HEADER] == "web_search, custom:apply_patch"
    assert [t["type"] for t in r.json()["tools"]] == ["function", "web_search", "custom"]  # echoed as sent
    with httpx.stream("POST", url + "/v1/responses", json={**body, "stream": True}, timeout=60) as s:
        assert s.headers[LEFT_OUT_HEADER] == "web_search, custom:apply_patch"
        s.read()


@pytest.mark.parametrize("chained", [False, True], ids=["resend", "previous_response_id"])
def test_agents_sdk_tool_loop(served, chained):
    """The Agents SDK with its default model (Responses) runs call -> tool -> answer."""
    import agents  # openai-agents, in the dev extra
    from openai.types.shared import Reasoning

    name, url, engine = served
    agents.set_tracing_disabled(True)
    ran: list[str] = []

    @agents.function_tool
    def get_weather(city: str) -> str:
        """Weather for a city."""
        ran.append(city)
        return f"{RESULT} for {name}"

    model = agents.OpenAIResponsesModel(
        model=MODEL, openai_client=openai.AsyncOpenAI(base_url=url + "/v1", api_key="none", max_retries=0)
    )
    agent = agents.Agent(
        name="weather",
        instructions="Answer with the weather.",
        tools=[get_weather],
        model=model,
        model_settings=agents.ModelSettings(reasoning=Reasoning(effort="none"), store=chained),
    )
    result = agents.Runner.run_sync(
        agent, f"[agent:{name}] Weather in Paris?", auto_previous_response_id=chained
    )
    assert ran == ["Paris"] and result.final_output == ANSWER
    prompt = engine.decode(engine.requests[-1][1]["prompt"])
    assert f"{RESULT} for {name}" in prompt.split(f"[agent:{name}]", 1)[1]


def test_engine_failure_mid_stream_is_an_error_event_then_failed(served):
    name, url, _ = served
    c = client(url)
    with c.responses.stream(model=MODEL, input=f"[fail-mid:{name}] talk", reasoning=OFF) as s:
        events = list(s)
    kinds = [e.type for e in events]
    assert kinds[0] == "response.created" and kinds[-2:] == ["error", "response.failed"]
    assert events[-2].code == "backend_error" and "request id req-" in events[-2].message
    failed = events[-1].response
    assert failed.status == "failed" and failed.error.code == "server_error"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    with pytest.raises(openai.APIStatusError) as info:  # whole: the error body, 502
        c.responses.create(model=MODEL, input=f"[fail-now:{name}] talk", reasoning=OFF)
    assert info.value.status_code == 502 and info.value.body["code"] == "backend_error"


@pytest.mark.parametrize("turn", ["turn1", "turn2", "compaction"])
def test_codex_request_bodies(served, turn):
    """What Codex 0.169 sent (recorded), posted as it was: rendered by each family's template
    and answered as the stream Codex reads."""
    name, url, engine = served
    body = json.loads(
        (Path(__file__).parent / "data" / "codex" / f"responses_request_{turn}.json").read_text()
    )
    body["model"] = MODEL
    with httpx.stream("POST", url + "/v1/responses", json=body, timeout=60) as r:
        assert r.status_code == 200
        hosted = [t["type"] for t in body["tools"] if t["type"] not in ("function", "namespace")]
        assert r.headers.get(LEFT_OUT_HEADER) == (", ".join(hosted) or None)
        events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: ")]
    assert events[-1]["type"] == "response.completed"
    done = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    if turn == "compaction":
        assert [i["content"][0]["text"] for i in done if i["type"] == "message"] == [SUMMARY]
    elif turn == "turn1":
        (call,) = [i for i in done if i["type"] == "function_call"]
        assert call["name"] == "exec_command" and json.loads(call["arguments"]) == {
            "cmd": "echo hi > out.txt"
        }
    else:
        assert [i["content"][0]["text"] for i in done if i["type"] == "message"] == [ANSWER]
        prompt = engine.decode(engine.requests[-1][1]["prompt"])
        assert (
            "<skills_instructions>" in prompt and "You are a coding agent" in prompt
        )  # both developer messages
        assert "echo hi > out.txt" in prompt and "Process exited with code 0" in prompt
    assert events[-1]["response"]["store"] is False
    with pytest.raises(openai.NotFoundError):  # store: false
        client(url).responses.retrieve(events[-1]["response"]["id"])


def test_readme_snippet_runs_as_written(tmp_path, capsys):
    """README's Responses SDK snippet, run as written against a Qwen3 stand-in (its port only)."""
    snippet = readme_blocks("OpenAI Responses API: `POST /v1/responses`")[0]
    w, tok = WRITERS["qwen3"], _tokenizer(FAMILY_ROWS["qwen3"])
    scripts = {
        "Weather in Paris?": w.out(reasoning="Look it up.", calls=(PARIS,)),  # thinking on: no effort sent
        "<tool_response>\n18C, sunny": w.out(reasoning="Answer.", text=ANSWER),  # longer: wins
        "Hi": w.out(text="Hello!"),  # effort none: thinking off
    }
    engine = FakeEngine(tok.decode, {k: Script(tok.encode(v), batch=2) for k, v in scripts.items()})
    with ServerThread(engine.app) as eng:
        cfg = ServerConfig(
            model_dir=tmp_path,
            format="qwen3",
            backend_url=eng.url,
            served_model_name="Qwen3-8B",
            warm_up=False,
        )
        with ServerThread(create_app(cfg, tokenizer=tok)) as srv:
            assert "http://127.0.0.1:8000/v1" in snippet
            exec(
                compile(snippet.replace("http://127.0.0.1:8000/v1", srv.url + "/v1"), "docs/serving.md", "exec"), {}
            )
    assert capsys.readouterr().out == f"{ANSWER}\nHello!"


def test_tool_choice_and_parallel_tool_calls(served):
    name, url, engine = served
    c = client(url)
    if WRITERS[name].parallel:
        r = ask(c, False, input=f"[parallel:{name}] both", parallel_tool_calls=False)
        assert calls(r) == [PARIS]  # the first call only
    r = ask(c, False, input=f"[single:{name}] x", tool_choice="none")
    assert calls(r) == []  # no tools offered: the call the model wrote is not returned
    prompt = engine.decode(engine.requests[-1][1]["prompt"])
    assert "get_weather" not in prompt.split(f"[single:{name}]", 1)[0]
    r = ask(c, False, input=f"[single:{name}] x", tool_choice={"type": "function", "name": "get_weather"})
    assert calls(r) == [PARIS]
    if name != "gpt_oss":  # gpt-oss reasons first: the forcing constraint is for the answer phase
        assert engine.requests[-1][1].get("structured_outputs")  # the engine is made to call it


@STREAM
def test_output_text_logprobs(served, stream):
    name, url, _ = served
    kw = {"include": ["message.output_text.logprobs"], "top_logprobs": 2}
    r = ask(client(url), stream, input=f"[long:{name}] talk", **kw)
    (part,) = r.output[-1].content
    assert part.text == LONG and part.logprobs
    assert all(len(lp.top_logprobs) == 2 and lp.logprob == lp.top_logprobs[0].logprob for lp in part.logprobs)
    joined = b"".join(bytes(lp.bytes) for lp in part.logprobs).decode()
    assert LONG in joined  # the answer's tokens (the end-of-turn token may follow)
    assert r.top_logprobs == 2
