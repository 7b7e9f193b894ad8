"""Agent frameworks against the real server: openai-agents, pydantic-ai, langchain (its structured
output and langgraph's create_agent), litellm, instructor and the `llm` CLI run tool loops and
structured output (with tools, forced calls, thinking on) for qwen3, gemma4 and gpt_oss, on the
vLLM and llama.cpp protocols, with no framework-side workaround.

The fake engine replays what the model would write and honours the constraint it is sent
(`Script.constrained`: a request without the constraint, or whose output it forbids, is
refused), so a forced call or a schema that does not reach the engine fails the test. Pinned
versions: requirements/frameworks-test.txt and frameworks-nodeps-test.txt.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import functools
import importlib
import json
import sys
from pathlib import Path

import pytest
from fake_engines import FakeEngine, Script, ServerThread
from models import missing
from test_server_agent_loop import FAMILIES, _tokenizer

from chatsieve.server.app import create_app
from chatsieve.server.config import ServerConfig


def _missing(module: str, e: Exception):
    """Skip with the reason -- except under CI, where .ci/run installs the frameworks."""
    missing(f"{module} is a test dependency ({e}): pip install -r requirements/frameworks-test.txt")


_OPENAI_AGENTS: dict[str, object] = {}  # openai-agents' modules, once loaded


def _is_agents(name: str) -> bool:
    return name == "agents" or name.startswith("agents.")


def _exit_hook() -> None:
    sys.modules.update(_OPENAI_AGENTS)
    shutdown = getattr(_OPENAI_AGENTS.get("agents.tracing.setup"), "_shutdown_global_trace_provider", None)
    if shutdown is not None:
        shutdown()


@contextlib.contextmanager
def openai_agents():
    """openai-agents' `agents` package, in sys.modules only inside the block.

    tests/agents.py (the coding-agent finder) has the same module name and sits first on the
    path, so the package is imported with the tests directory off the path, and the two swap
    places for the block (openai-agents imports parts of itself lazily, by its name)."""
    theirs = {k: v for k, v in sys.modules.items() if _is_agents(k)}
    for k in theirs:
        del sys.modules[k]
    try:
        if _OPENAI_AGENTS:
            sys.modules.update(_OPENAI_AGENTS)
        else:
            here = Path(__file__).resolve().parent
            saved_path = sys.path[:]
            sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != here]
            try:
                importlib.import_module("agents.run")
            except ImportError as e:
                _missing("openai-agents", e)
            finally:
                sys.path[:] = saved_path
        yield sys.modules["agents"]
    finally:
        _OPENAI_AGENTS.update({k: v for k, v in sys.modules.items() if _is_agents(k)})
        # its exit hook imports parts of it by name: it runs with the package swapped back in
        shutdown = getattr(sys.modules.get("agents.tracing.setup"), "_shutdown_global_trace_provider", None)
        if shutdown is not None:
            atexit.unregister(shutdown)
        atexit.unregister(_exit_hook)
        atexit.register(_exit_hook)
        for k in [k for k in sys.modules if _is_agents(k)]:
            del sys.modules[k]
        sys.modules.update(theirs)


try:
    import pydantic_ai  # noqa: F401
except ImportError as e:
    _missing("pydantic-ai", e)
import pydantic  # noqa: E402
from pydantic import BaseModel  # noqa: E402

# litellm's own stream types, built on first use, warn about pydantic's ReadOnly support
pytestmark = pytest.mark.filterwarnings("ignore:Item .* is using the `ReadOnly` qualifier:UserWarning")

MODEL = "fw-model"
# The fake engine plays the script of the longest key its prompt holds: a turn's reasoning (the
# second phase's key) is 100 * (turn + 1) characters, the tool result (turn 2's key) 150, so each
# request picks its own script even when a client sends earlier reasoning back.
RESULT = ("18C and sunny in Paris, says the weather service " * 4)[:150]
ANSWER_TEXT = "It is 18C and sunny in Paris."
WEATHER_JSON = {"city": "Paris", "temp": 18}


class Weather(BaseModel):
    city: str
    temp: int


# ---------------------------------------------------------------- what each family writes

_END = {"qwen3": "<|im_end|>", "gemma4": "<turn|>", "gpt_oss": "<|return|>"}


def _think(family: str, text: str, thinking: bool = False) -> str:
    """The reasoning block a family writes first (Gemma 4 only with thinking turned on)."""
    if family == "gemma4":
        return f"<|channel>thought\n{text}<channel|>" if thinking else ""
    return {"qwen3": f"<think>\n{text}\n</think>\n\n",
            "gpt_oss": f"<|channel|>analysis<|message|>{text}<|end|><|start|>assistant"}[family]


def _own_call(family: str, name: str, args: dict) -> str:
    a = json.dumps(args)
    if family == "qwen3":
        return f'<tool_call>\n{{"name": "{name}", "arguments": {a}}}\n</tool_call><|im_end|>'
    if family == "gemma4":
        inner = ",".join(f'{k}:<|"|>{v}<|"|>' if isinstance(v, str) else f"{k}:{v}" for k, v in args.items())
        return f"<|tool_call>call:{name}{{{inner}}}<tool_call|><turn|>"
    return f"<|channel|>commentary to=functions.{name} <|constrain|>json<|message|>{a}<|call|>"


def _own_answer(family: str, text: str) -> str:
    if family == "gpt_oss":
        return f"<|channel|>final<|message|>{text}<|return|>"
    return text + _END[family]


class Turn:
    """One model turn: `key` (a string its prompt holds, unique), the reasoning, and the output;
    `how`: "free" (no constraint), "grammar" (one constrained request, own syntax or JSON with the
    reasoning), "thought-json" (one grammar: the reasoning, then the JSON call list), "json" (one
    JSON-constrained request, no reasoning) or "two" (reasoning, then JSON)."""

    def __init__(self, key: str, reasoning: str, own: str, constrained_json: str | None, how: str,
                 index: int = 0, thinking: bool = False) -> None:
        reasoning = (reasoning + " " + "." * 300)[: 100 * (index + 1)]  # see RESULT
        self.key, self.reasoning, self.own, self.json, self.how = key, reasoning, own, constrained_json, how
        self.thinking = thinking

    def scripts(self, family: str, tok) -> dict[str, Script]:
        think = _think(family, self.reasoning, self.thinking)
        if self.how == "free":
            return {self.key: Script(tok.encode(think + self.own), batch=3)}
        if self.how == "grammar":
            return {self.key: Script(tok.encode(think + self.own), batch=3, constrained=True)}
        if self.how == "json":
            return {self.key: Script(tok.encode(self.json + _END[family]), batch=3, constrained=True)}
        if self.how == "thought-json":  # one grammar: the reasoning, then the JSON call list
            return {self.key: Script(tok.encode(think + self.json + _END[family]), batch=3, constrained=True)}
        # two phases: the reasoning up to its end token, then the JSON from a prompt that holds it
        end = {"qwen3": "</think>", "gemma4": "<channel|>"}.get(family, "<|end|>")
        first = think[: think.index(end) + len(end)]
        return {self.key: Script(tok.encode(first), batch=3, unconstrained=True),
                self.reasoning: Script(tok.encode(self.json + _END[family]), batch=3, constrained=True)}


def _how(family: str, engine: str, own_grammar: bool, thinking: bool = False) -> str:
    """The path a constrained turn takes (docs/serving.md, "Engine-enforced structure"); Gemma 4
    thinks only when asked to."""
    if family == "gpt_oss" or (family == "gemma4" and not thinking):  # gpt-oss: over the whole output
        return "json"
    if engine == "llamacpp":
        return "grammar" if own_grammar else ("thought-json" if thinking else "json")
    return "two"


def _call_turn(key: str, reasoning: str, family: str, how: str, name: str, args: dict, index: int = 0) -> Turn:
    """A turn whose output is one call: the family's own syntax, or the JSON call list."""
    return Turn(key, reasoning, _own_call(family, name, args), json.dumps([{"name": name, "arguments": args}]),
                how, index)


def _weather_turn(key: str, reasoning: str, family: str, how: str, index: int = 0) -> Turn:
    """A turn whose output is WEATHER_JSON as the answer's content."""
    return Turn(key, reasoning, json.dumps(WEATHER_JSON) + _END[family], json.dumps(WEATHER_JSON), how, index)


def _weather_loop(key: str, family: str, how: str) -> list[Turn]:
    """A constrained tool loop: a get_weather call, then (prompt holding RESULT) the typed answer."""
    return [_call_turn(key, "First the tool.", family, how, "get_weather", {"city": "Paris"}),
            _weather_turn(RESULT, "Now the typed answer.", family, how, 1)]


# One stand-in engine and server per (family, protocol) for the module, each test playing its
# own scripts on them: starting and stopping the two uvicorn servers costs more than most tests.
_RUNNING: dict[tuple[str, str], tuple[str, FakeEngine]] = {}
_RUNNING_STACK = contextlib.ExitStack()


@pytest.fixture(scope="module", autouse=True)
def _stop_servers():
    yield
    _RUNNING_STACK.close()
    _RUNNING.clear()


@contextlib.contextmanager
def _server(family: str, engine_kind: str, turns: list[Turn], tmp_path):
    """(the server's /v1 URL, the stand-in engine), playing `turns` and with no requests yet."""
    tok = _tokenizer(FAMILIES[family])
    if (family, engine_kind) not in _RUNNING:
        engine = FakeEngine(tok.decode)
        url = _RUNNING_STACK.enter_context(ServerThread(engine.app)).url
        cfg = ServerConfig(model_dir=tmp_path, format=family, backend_url=url, backend_kind=engine_kind,
                           served_model_name=MODEL, warm_up=False, check_engine_model=False)  # fmt: skip
        server = _RUNNING_STACK.enter_context(ServerThread(create_app(cfg, tokenizer=tok)))
        _RUNNING[family, engine_kind] = (server.url + "/v1", engine)
    url, engine = _RUNNING[family, engine_kind]
    engine.scripts = {}
    for t in turns:
        engine.scripts.update(t.scripts(family, tok))
    engine.requests = []
    yield url, engine


CASES = [(f, e) for f in ("qwen3", "gemma4", "gpt_oss") for e in ("vllm", "llamacpp")]
IDS = [f"{f}-{e}" for f, e in CASES]


def _get_weather_tool():
    def get_weather(city: str) -> str:
        """Get the weather for a city."""
        return RESULT if city == "Paris" else "unknown city"

    return get_weather


# ---------------------------------------------------------------- openai-agents


def _agents_model(agents, url: str):
    from openai import AsyncOpenAI

    agents.set_tracing_disabled(True)
    return agents.OpenAIChatCompletionsModel(
        model=MODEL, openai_client=AsyncOpenAI(base_url=url, api_key="x", max_retries=0))


@pytest.mark.parametrize(("family", "engine_kind"), CASES, ids=IDS)
def test_openai_agents_tool_loop(family, engine_kind, tmp_path):
    turns = [Turn("[agents-loop]", "I need the weather tool.", _own_call(family, "get_weather", {"city": "Paris"}),
                  None, "free"),
             Turn(RESULT, "The tool answered.", _own_answer(family, ANSWER_TEXT), None, "free", 1)]
    with _server(family, engine_kind, turns, tmp_path) as (url, engine), openai_agents() as agents:
        agent = agents.Agent(name="w", instructions="Be brief.", model=_agents_model(agents, url),
                             tools=[agents.function_tool(_get_weather_tool())])
        result = agents.Runner.run_sync(agent, "[agents-loop] What is the weather in Paris?")
        assert result.final_output == ANSWER_TEXT
        # the second request carried the call the model made and the tool's result
        assert len(engine.requests) == 2
        prompt = engine.decode(engine.requests[1][1]["prompt"])
        assert RESULT in prompt and "Paris" in prompt.split("[agents-loop]", 1)[1]


@pytest.mark.parametrize(("family", "engine_kind"), CASES, ids=IDS)
def test_openai_agents_output_type_with_tools(family, engine_kind, tmp_path):
    """output_type with a tool: response_format json_schema and tools together; the model calls the
    tool first, then answers in the schema (thinking on for qwen3)."""
    turns = _weather_loop("[agents-typed]", family, _how(family, engine_kind, own_grammar=family == "qwen3"))
    with _server(family, engine_kind, turns, tmp_path) as (url, engine), openai_agents() as agents:
        agent = agents.Agent(name="w", instructions="Be brief.", model=_agents_model(agents, url),
                             tools=[agents.function_tool(_get_weather_tool())], output_type=Weather)
        result = agents.Runner.run_sync(agent, "[agents-typed] Weather in Paris?")
        assert result.final_output == Weather(**WEATHER_JSON)
        assert any(RESULT in engine.decode(r[1]["prompt"]) for r in engine.requests)


# ---------------------------------------------------------------- pydantic-ai


def _pydantic_model(url: str):
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    return OpenAIChatModel(MODEL, provider=OpenAIProvider(base_url=url, api_key="x"))


def _run(agent, prompt: str):
    return asyncio.run(agent.run(prompt))


@pytest.mark.parametrize(("family", "engine_kind"), CASES, ids=IDS)
def test_pydantic_ai_tool_output_is_a_forced_call(family, engine_kind, tmp_path):
    """pydantic-ai's default output mode: the output is a tool (`final_result`) and tool_choice is
    `required`: a forced call after a tool loop."""
    from pydantic_ai import Agent

    how = _how(family, engine_kind, own_grammar=family == "qwen3")
    final = {"city": "Paris", "temp": 18}
    turns = [_call_turn("[pai-loop]", "I call the weather tool.", family, how, "get_weather", {"city": "Paris"}),
             _call_turn(RESULT, "I give the final result.", family, how, "final_result", final, 1)]
    with _server(family, engine_kind, turns, tmp_path) as (url, engine):
        agent = Agent(_pydantic_model(url), output_type=Weather, tools=[_get_weather_tool()])
        result = _run(agent, "[pai-loop] Weather in Paris?")
        assert result.output == Weather(**final)
        sent = [r[1] for r in engine.requests]
        assert any(RESULT in engine.decode(p["prompt"]) for p in sent)


@pytest.mark.parametrize(("family", "engine_kind"), CASES, ids=IDS)
def test_pydantic_ai_native_output(family, engine_kind, tmp_path):
    """NativeOutput: response_format json_schema without tools, thinking on by default."""
    from pydantic_ai import Agent, NativeOutput

    how = _how(family, engine_kind, own_grammar=True)
    turns = [_weather_turn("[pai-native]", "A JSON answer is wanted.", family, how)]
    with _server(family, engine_kind, turns, tmp_path) as (url, engine):
        agent = Agent(_pydantic_model(url), output_type=NativeOutput(Weather))
        result = _run(agent, "[pai-native] Weather in Paris as JSON")
        assert result.output == Weather(**WEATHER_JSON)


# ---------------------------------------------------------------- langchain-openai


def _langchain(url: str):
    try:
        from langchain_openai import ChatOpenAI
    except ImportError as e:
        _missing("langchain-openai", e)
    return ChatOpenAI(model=MODEL, base_url=url, api_key="x", max_retries=0, temperature=0)


@pytest.mark.parametrize(("family", "engine_kind"), CASES, ids=IDS)
def test_langchain_structured_output_by_function_calling(family, engine_kind, tmp_path):
    """with_structured_output(method="function_calling"): a named tool_choice, the forced call."""
    how = _how(family, engine_kind, own_grammar=family == "qwen3")
    turns = [_call_turn("[lc-fn]", "The schema is a tool to call.", family, how, "Weather", WEATHER_JSON)]
    with _server(family, engine_kind, turns, tmp_path) as (url, engine):
        llm = _langchain(url).with_structured_output(Weather, method="function_calling")
        assert llm.invoke("[lc-fn] Weather in Paris?") == Weather(**WEATHER_JSON)


@pytest.mark.parametrize(("family", "engine_kind"), CASES, ids=IDS)
def test_langchain_structured_output_by_json_schema(family, engine_kind, tmp_path):
    """with_structured_output(method="json_schema"): response_format, thinking on by default."""
    how = _how(family, engine_kind, own_grammar=True)
    turns = [_weather_turn("[lc-json]", "JSON it is.", family, how)]
    with _server(family, engine_kind, turns, tmp_path) as (url, engine):
        llm = _langchain(url).with_structured_output(Weather, method="json_schema")
        assert llm.invoke("[lc-json] Weather in Paris as JSON") == Weather(**WEATHER_JSON)


# ---------------------------------------------------------------- langgraph (langchain's create_agent)


def _create_agent():
    try:
        from langchain.agents import create_agent
    except ImportError as e:
        _missing("langchain (langgraph)", e)
    return create_agent


@pytest.mark.parametrize(("family", "engine_kind"), CASES, ids=IDS)
def test_langgraph_agent_tool_strategy(family, engine_kind, tmp_path):
    """create_agent(response_format=Weather) on a model without a known profile: the schema becomes a
    tool and every turn is tool_choice `required` -- a forced get_weather call, its result, then a
    forced `Weather` call that is the structured response."""
    create_agent = _create_agent()
    how = _how(family, engine_kind, own_grammar=family == "qwen3")
    turns = [_call_turn("[lg-tool]", "I call the weather tool.", family, how, "get_weather", {"city": "Paris"}),
             _call_turn(RESULT, "Now the structured response.", family, how, "Weather", WEATHER_JSON, 1)]
    with _server(family, engine_kind, turns, tmp_path) as (url, engine):
        agent = create_agent(_langchain(url), tools=[_get_weather_tool()], response_format=Weather)
        state = agent.invoke({"messages": [{"role": "user", "content": "[lg-tool] Weather in Paris?"}]})
        assert state["structured_response"] == Weather(**WEATHER_JSON)
        assert len(engine.requests) == (4 if how == "two" else 2)


@pytest.mark.parametrize(("family", "engine_kind"), CASES, ids=IDS)
def test_langgraph_agent_provider_strategy(family, engine_kind, tmp_path):
    """create_agent(response_format=ProviderStrategy(Weather)): tools and response_format json_schema
    together; the model calls the tool, then answers in the schema."""
    create_agent = _create_agent()
    from langchain.agents.structured_output import ProviderStrategy

    turns = _weather_loop("[lg-native]", family, _how(family, engine_kind, own_grammar=family == "qwen3"))
    with _server(family, engine_kind, turns, tmp_path) as (url, engine):
        agent = create_agent(_langchain(url), tools=[_get_weather_tool()], response_format=ProviderStrategy(Weather))
        state = agent.invoke({"messages": [{"role": "user", "content": "[lg-native] Weather in Paris?"}]})
        assert state["structured_response"] == Weather(**WEATHER_JSON)
        assert [m.type for m in state["messages"]][-3:] == ["ai", "tool", "ai"]


# ---------------------------------------------------------------- litellm


def _litellm(monkeypatch):
    # its model cost map is fetched from GitHub at import unless told to use the bundled copy
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    try:
        import litellm
    except ImportError as e:
        _missing("litellm", e)
    return litellm


WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


@pytest.mark.parametrize(("family", "engine_kind"), CASES, ids=IDS)
def test_litellm_tool_loop(family, engine_kind, tmp_path, monkeypatch):
    """litellm.completion with tools and tool_choice="required" (a forced call), the tool's result sent
    back, then tools with response_format a pydantic model: the typed answer."""
    litellm = _litellm(monkeypatch)
    turns = _weather_loop("[litellm-loop]", family, _how(family, engine_kind, own_grammar=family == "qwen3"))
    with _server(family, engine_kind, turns, tmp_path) as (url, engine):
        common = {"model": f"openai/{MODEL}", "api_base": url, "api_key": "x", "tools": [WEATHER_TOOL]}
        messages = [{"role": "user", "content": "[litellm-loop] Weather in Paris?"}]
        first = litellm.completion(messages=messages, tool_choice="required", **common).choices[0].message
        (call,) = first.tool_calls
        assert (call.function.name, json.loads(call.function.arguments)) == ("get_weather", {"city": "Paris"})
        result = _get_weather_tool()(**json.loads(call.function.arguments))
        messages += [first.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": call.id, "content": result}]
        final = litellm.completion(messages=messages, response_format=Weather, **common).choices[0].message
        assert not final.tool_calls
        assert Weather.model_validate_json(final.content) == Weather(**WEATHER_JSON)


@pytest.mark.parametrize(("family", "engine_kind"), CASES, ids=IDS)
def test_litellm_streamed_forced_call(family, engine_kind, tmp_path, monkeypatch):
    """stream=True with tool_choice="required": litellm's own stream assembly gets the one call."""
    litellm = _litellm(monkeypatch)
    how = _how(family, engine_kind, own_grammar=family == "qwen3")
    turns = [_call_turn("[litellm-stream]", "I call the tool.", family, how, "get_weather", {"city": "Paris"})]
    with _server(family, engine_kind, turns, tmp_path) as (url, engine):
        messages = [{"role": "user", "content": "[litellm-stream] Weather in Paris?"}]
        chunks = list(litellm.completion(model=f"openai/{MODEL}", api_base=url, api_key="x", messages=messages,
                                         tools=[WEATHER_TOOL], tool_choice="required", stream=True))
        message = litellm.stream_chunk_builder(chunks, messages=messages).choices[0].message
        (call,) = message.tool_calls
        assert (call.function.name, json.loads(call.function.arguments)) == ("get_weather", {"city": "Paris"})


@pytest.mark.parametrize(("family", "engine_kind"), CASES, ids=IDS)
def test_litellm_response_format(family, engine_kind, tmp_path, monkeypatch):
    """response_format a pydantic model, no tools (thinking on by default for qwen3)."""
    litellm = _litellm(monkeypatch)
    how = _how(family, engine_kind, own_grammar=True)
    with _server(family, engine_kind, [_weather_turn("[litellm-json]", "JSON it is.", family, how)],
                 tmp_path) as (url, engine):
        reply = litellm.completion(model=f"openai/{MODEL}", api_base=url, api_key="x", response_format=Weather,
                                   messages=[{"role": "user", "content": "[litellm-json] Weather in Paris?"}])
        assert Weather.model_validate_json(reply.choices[0].message.content) == Weather(**WEATHER_JSON)


@pytest.mark.parametrize("engine_kind", ["vllm", "llamacpp"])
def test_litellm_response_format_gemma4_thinking(engine_kind, tmp_path, monkeypatch):
    """Gemma 4 with thinking turned on (chat_template_kwargs): its thought first, then the JSON."""
    litellm = _litellm(monkeypatch)
    how = _how("gemma4", engine_kind, own_grammar=True, thinking=True)
    turn = Turn("[litellm-g4-think]", "Paris, 18C.", json.dumps(WEATHER_JSON) + _END["gemma4"],
                json.dumps(WEATHER_JSON), how, thinking=True)
    with _server("gemma4", engine_kind, [turn], tmp_path) as (url, engine):
        reply = litellm.completion(model=f"openai/{MODEL}", api_base=url, api_key="x", response_format=Weather,
                                   messages=[{"role": "user", "content": "[litellm-g4-think] Weather in Paris?"}],
                                   extra_body={"chat_template_kwargs": {"enable_thinking": True}})
        message = reply.choices[0].message
        assert Weather.model_validate_json(message.content) == Weather(**WEATHER_JSON)
        assert message.reasoning_content.strip() == turn.reasoning.strip()
        assert len(engine.requests) == (2 if how == "two" else 1)


# ---------------------------------------------------------------- instructor

# The validation error instructor sends back as the tool's result (turn 2's key; see RESULT)
REASK = ("the city name must be capitalised as on a map, for example Paris or Lyon " * 3)[:150]


class CapitalisedWeather(Weather):
    @pydantic.field_validator("city")
    @classmethod
    def _capitalised(cls, city: str) -> str:
        if city[:1] != city[:1].upper():
            raise ValueError(REASK)
        return city


def _instructor(url: str, mode_name: str):
    try:
        import instructor
    except ImportError as e:
        _missing("instructor", e)
    from openai import OpenAI

    return instructor.from_openai(OpenAI(base_url=url, api_key="x", max_retries=0),
                                  mode=getattr(instructor.Mode, mode_name))


@pytest.mark.parametrize(("family", "engine_kind"), CASES, ids=IDS)
def test_instructor_tools_mode_reask_loop(family, engine_kind, tmp_path):
    """Mode.TOOLS: a named tool_choice (the forced call); the first call fails validation, instructor
    sends the call back with the error as its tool result, and the second call is the answer."""
    how = _how(family, engine_kind, own_grammar=family == "qwen3")
    turns = [_call_turn("[instr-tools]", "Extract the weather.", family, how, "CapitalisedWeather",
                        {"city": "paris", "temp": 18}),
             _call_turn(REASK, "Capitalise the city.", family, how, "CapitalisedWeather", WEATHER_JSON, 1)]
    with _server(family, engine_kind, turns, tmp_path) as (url, engine):
        client = _instructor(url, "TOOLS")
        got = client.chat.completions.create(model=MODEL, response_model=CapitalisedWeather, max_retries=2,
                                             messages=[{"role": "user", "content": "[instr-tools] Paris, 18C"}])
        assert got.model_dump() == WEATHER_JSON  # instructor returns a subclass of its own
        # the retry's prompt shows the first call as the model wrote it, then the error as its result
        retry = engine.decode(engine.requests[-1][1]["prompt"]).split("[instr-tools]", 1)[1]
        assert "paris" in retry and REASK in retry and retry.index("paris") < retry.index(REASK)


@pytest.mark.parametrize(("family", "engine_kind"), CASES, ids=IDS)
def test_instructor_json_schema_mode(family, engine_kind, tmp_path):
    """Mode.JSON_SCHEMA: response_format json_schema (thinking on by default for qwen3)."""
    how = _how(family, engine_kind, own_grammar=True)
    with _server(family, engine_kind, [_weather_turn("[instr-json]", "JSON it is.", family, how)],
                 tmp_path) as (url, engine):
        got = _instructor(url, "JSON_SCHEMA").chat.completions.create(
            model=MODEL, response_model=Weather, max_retries=0,
            messages=[{"role": "user", "content": "[instr-json] Paris, 18C"}])
        assert got.model_dump() == WEATHER_JSON


# ---------------------------------------------------------------- the `llm` CLI
# Its command line run in-process (click's CliRunner, as llm's own tests do: a process of its own
# costs seconds of start-up per run). llm 0.36 drops `--schema` from the turn after a tool result
# (its chain rebuilds the prompt without it), so `--functions` with `--schema` is not a case here.


@pytest.fixture(scope="module")
def llm_home(tmp_path_factory):
    """One llm user directory for the module: llm migrates its logs database into a new one on
    every run, even with --no-log (seconds each)."""
    return tmp_path_factory.mktemp("llm-home")


def _llm_cli(home, monkeypatch, url: str, *argv: str) -> str:
    """`llm -m fw ARGV` with the server as an extra OpenAI-compatible model (tools and schemas on);
    returns what it printed."""
    try:
        from click.testing import CliRunner
        from llm.cli import cli
    except ImportError as e:
        _missing("llm", e)
    (home / "extra-openai-models.yaml").write_text(
        f"- model_id: fw\n  model_name: {MODEL}\n  api_base: {url}\n  supports_tools: true\n"
        "  supports_schema: true\n")
    monkeypatch.setenv("LLM_USER_PATH", str(home))
    monkeypatch.setenv("OPENAI_API_KEY", "x")
    done = CliRunner().invoke(cli, ["-m", "fw", "--no-log", *argv], catch_exceptions=False)
    assert done.exit_code == 0, done.output
    return done.stdout


LLM_FUNCTIONS = f'''
def get_weather(city: str) -> str:
    """Get the weather for a city."""
    return {RESULT!r} if city == "Paris" else "unknown city"
'''


@pytest.mark.parametrize(("family", "engine_kind"), CASES, ids=IDS)
def test_llm_cli_tool_loop(family, engine_kind, tmp_path, llm_home, monkeypatch):
    """`llm --functions`: the model calls the tool, llm runs it and sends the result back, and the
    answer is printed (streamed)."""
    turns = [Turn("[llm-loop]", "I need the weather tool.", _own_call(family, "get_weather", {"city": "Paris"}),
                  None, "free"),
             Turn(RESULT, "The tool answered.", _own_answer(family, ANSWER_TEXT), None, "free", 1)]
    with _server(family, engine_kind, turns, tmp_path) as (url, engine):
        out = _llm_cli(llm_home, monkeypatch, url, "--functions", LLM_FUNCTIONS, "[llm-loop] Weather in Paris?")
        assert out.strip() == ANSWER_TEXT
        assert len(engine.requests) == 2 and RESULT in engine.decode(engine.requests[1][1]["prompt"])


@pytest.mark.parametrize(("family", "engine_kind"), CASES, ids=IDS)
def test_llm_cli_schema(family, engine_kind, tmp_path, llm_home, monkeypatch):
    """`llm --schema`: response_format json_schema, streamed (thinking on by default for qwen3)."""
    how = _how(family, engine_kind, own_grammar=True)
    with _server(family, engine_kind, [_weather_turn("[llm-json]", "JSON it is.", family, how)],
                 tmp_path) as (url, engine):
        out = _llm_cli(llm_home, monkeypatch, url, "--schema", "city, temp int", "[llm-json] Weather in Paris?")
        assert json.loads(out) == WEATHER_JSON


@pytest.mark.parametrize(("family", "engine_kind"), CASES, ids=IDS)
def test_instructor_tools_mode_streamed_partials(family, engine_kind, tmp_path):
    """create_partial in Mode.TOOLS: the forced call streamed, its arguments read as they come."""
    how = _how(family, engine_kind, own_grammar=family == "qwen3")
    # instructor names the tool after its partial model
    turns = [_call_turn("[instr-partial]", "Extract the weather.", family, how, "PartialWeather", WEATHER_JSON)]
    with _server(family, engine_kind, turns, tmp_path) as (url, engine):
        partials = list(_instructor(url, "TOOLS").chat.completions.create_partial(
            model=MODEL, response_model=Weather, max_retries=0,
            messages=[{"role": "user", "content": "[instr-partial] Paris, 18C"}]))
        assert partials and partials[-1].model_dump() == WEATHER_JSON
        assert all(r[1]["stream"] for r in engine.requests)


@pytest.mark.parametrize("engine_kind", ["vllm", "llamacpp"])
def test_instructor_tools_mode_gemma4_thinking(engine_kind, tmp_path):
    """A forced call with Gemma 4's thinking turned on: on vLLM the thought, then the JSON call list
    (two phases); on llama.cpp, which has no grammar for Gemma 4's own calls, one grammar of the
    thought (its markers by token id) and then the JSON call list."""
    how = _how("gemma4", engine_kind, own_grammar=False, thinking=True)
    turn = Turn("[instr-g4-think]", "Paris, 18C.", _own_call("gemma4", "Weather", WEATHER_JSON),
                json.dumps([{"name": "Weather", "arguments": WEATHER_JSON}]), how, thinking=True)
    with _server("gemma4", engine_kind, [turn], tmp_path) as (url, engine):
        create = functools.partial(
            _instructor(url, "TOOLS").chat.completions.create, model=MODEL, response_model=Weather,
            max_retries=0, messages=[{"role": "user", "content": "[instr-g4-think] Paris, 18C"}],
            extra_body={"chat_template_kwargs": {"enable_thinking": True}})
        assert create().model_dump() == WEATHER_JSON
        assert len(engine.requests) == (2 if engine_kind == "vllm" else 1)
