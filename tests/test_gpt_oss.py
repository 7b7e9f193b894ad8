"""gpt-oss (harmony) beyond the fixtures: the real chat template's rendering parses
back, every marker is gated by its o200k id, calls stream from the header on, and
token-mode fuzzing with the real tokenizer."""

from __future__ import annotations

import json

import models
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chatsieve import StreamParser, formats, parse
from chatsieve.events import ToolCallArgsDelta, ToolCallEnd, ToolCallStart
from chatsieve.fixtures import encode_spelled, normalized
from chatsieve.formats.gpt_oss import GPT_OSS, MAX_HEADER
from chatsieve.jinja_env import render_template
from chatsieve.parser import resolve_delimiters

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather.", "parameters": {
        "type": "object", "properties": {"location": {"type": "string"}, "days": {"type": "integer"}}}}},
]  # fmt: skip
IDS = {
    "<|start|>": 200006, "<|channel|>": 200005, "<|message|>": 200008, "<|end|>": 200007,
    "<|call|>": 200012, "<|return|>": 200002, "<|constrain|>": 200003, "<|endoftext|>": 199999,
}  # fmt: skip


@pytest.fixture(scope="module")
def tok():
    return models.tokenizer("gpt-oss")


def test_registered_under_its_names():
    for name in ("gpt_oss", "gpt-oss", "harmony", "GPT-OSS"):
        assert formats.get(name) is GPT_OSS
    assert GPT_OSS.template == "gpt-oss/chat_template.jinja"


def test_every_marker_is_gated_by_its_o200k_id(tok):
    gates = resolve_delimiters(GPT_OSS, tok)
    assert all(tid is not None for tid in gates.values()), gates
    for marker, tid in IDS.items():
        assert gates[marker] == tid


def _render(messages, **kw) -> str:
    source = (models.models_dir() / GPT_OSS.template).read_text(encoding="utf-8")
    return render_template(
        source, {"messages": messages, "tools": TOOLS, "bos_token": "", "eos_token": "", **kw}
    )


@pytest.mark.parametrize("size", [1, 4, 10_000])
def test_the_templates_rendering_of_a_call_parses_back(tok, size):
    """What the real template renders for an assistant turn with a call (after the
    generation prompt `<|start|>assistant`) is what the model emits."""
    args = {"location": "東京", "days": 2}
    messages = [
        {"role": "user", "content": "Weather in Tokyo?"},
        {"role": "assistant", "thinking": "Need the weather.",
         "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": args}}]},
    ]  # fmt: skip
    rendered = _render(messages, add_generation_prompt=False)
    prompt = _render(messages[:1], add_generation_prompt=True)
    assert prompt.endswith("<|start|>assistant")
    output = rendered[len(prompt) :]
    assert output.startswith(
        "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant to=functions.get_weather"
    )
    ids = tok.encode(output)
    for stream in (False, True):
        p = StreamParser("gpt_oss", tools=TOOLS, tokenizer=tok, prompt=prompt, stream_arguments=stream)
        for k in range(0, len(ids), size):
            p.feed(token_ids=ids[k : k + size])
        p.finish()
        msg = p.message
        assert msg.reasoning == "Need the weather."
        assert msg.content is None
        assert [(c.name, json.loads(c.arguments)) for c in msg.tool_calls] == [("get_weather", args)]
        assert msg.finish_reason == "tool_calls"
        assert not msg.diagnostics


def test_a_final_turn_rendered_by_the_template_parses_back(tok):
    messages = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "thinking": "Greet.", "content": "Hello!"},
    ]
    rendered = _render(messages, add_generation_prompt=False)
    prompt = _render(messages[:1], add_generation_prompt=True)
    msg = parse(token_ids=tok.encode(rendered[len(prompt) :]), format="gpt_oss", tokenizer=tok, prompt=prompt)
    assert (msg.reasoning, msg.content, msg.tool_calls, msg.diagnostics) == ("Greet.", "Hello!", [], [])


def test_a_call_starts_once_its_header_is_complete_and_streams_valid_prefixes():
    head = "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
    body = '{"location": "Par is", "days": 12}'
    p = StreamParser("gpt_oss", tools=TOOLS, stream_arguments=True)
    events = p.feed(head)
    assert [type(e) for e in events] == [ToolCallStart]
    assert events[0].name == "get_weather"
    final = json.dumps(json.loads(body), separators=(",", ":"))
    seen = ""
    for c in body:
        for e in p.feed(c):
            assert isinstance(e, ToolCallArgsDelta)
            seen += e.json_text
            assert final.startswith(seen)
    events = p.feed("<|call|>") + p.finish()
    assert isinstance(events[-1], ToolCallEnd) and not events[-1].incomplete
    assert p.message.tool_calls[0].arguments == final == seen


def test_several_calls_in_one_delta(tok):
    call = '<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{{"days": {}}}<|call|>'
    text = "".join(call.format(i) for i in range(3))
    for stream in (False, True):
        p = StreamParser("gpt_oss", tools=TOOLS, tokenizer=tok, stream_arguments=stream)
        events = p.feed(token_ids=tok.encode(text))
        starts = [e for e in events if isinstance(e, ToolCallStart)]
        ends = [e for e in events if isinstance(e, ToolCallEnd)]
        assert [s.index for s in starts] == [0, 1, 2] and len(ends) == 3
        p.finish()
        assert [json.loads(c.arguments) for c in p.message.tool_calls] == [{"days": i} for i in range(3)]


def test_a_header_is_bounded():
    """A header that never ends is not accumulated without bound."""
    p = StreamParser("gpt_oss", tools=TOOLS)
    p.feed("<|start|>assistant<|channel|>")
    for _ in range(5000):
        p.feed("x" * 7)
    engine = p._engine
    assert sum(map(len, engine._hraw)) <= MAX_HEADER + 64
    p.feed("<|start|>assistant<|channel|>final<|message|>ok")
    p.finish()
    assert p.message.content == "ok"
    assert len(p.message.diagnostics) == 1


WORDS = [
    "assistant", " to=functions.f", "to=functions.f", " to=python", "to=container.exec", "analysis", "final",
    "commentary", " json", "code", " ", "\n", '{"a": 1}', "{", "}", '"', ":", "1", "x", "你好", "🙂", "functions.",
]  # fmt: skip
F_TOOLS = [{"name": "f", "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}}]


def _items():
    markers = st.sampled_from(GPT_OSS.delimiters).map(lambda m: (m, True))
    words = st.sampled_from(WORDS).map(lambda w: (w, False))
    return st.lists(st.one_of(markers, words, words), max_size=40)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_token_mode_fuzz(tok, data):
    """Random harmony-like token streams: never raise, no marker text shown, any
    token batching gives the same message, spelled markers never act."""
    items = data.draw(_items(), label="items")
    spelled = data.draw(st.booleans(), label="markers spelled")
    stream = data.draw(st.booleans(), label="stream_arguments")
    ids: list[int] = []
    for t, is_marker in items:
        ids += [tok.single_token_id(t)] if is_marker and not spelled else encode_spelled(tok, t)
    results = []
    for size in (1, data.draw(st.sampled_from([2, 3, 7]), label="size"), max(len(ids), 1)):
        p = StreamParser("gpt_oss", tools=F_TOOLS, tokenizer=tok, stream_arguments=stream)
        for k in range(0, len(ids), size):
            p.feed(token_ids=ids[k : k + size])
        p.finish()
        results.append(normalized(p.message))
    assert results[0] == results[1] == results[2]
    msg = results[0]
    if spelled:  # nothing acts: one message, all content, no call
        assert msg["tool_calls"] == [] and msg["reasoning"] is None
    else:
        for field in ("content", "reasoning"):
            for m in GPT_OSS.delimiters:
                assert m not in (msg[field] or "")


def _prompt(tok, messages, **kw):
    from chatsieve import render_prompt

    return render_prompt(messages, tokenizer=tok, template=models.model_path("gpt-oss/chat_template.jinja"),
                         tools=TOOLS, format="gpt_oss", **kw)  # fmt: skip


PREAMBLE_TURN = {
    "role": "assistant", "reasoning_content": "Need the weather.", "content": "Let me check.",
    "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"days": 2}'}}],
}  # fmt: skip
RESULT = {"role": "tool", "tool_call_id": "c1", "content": "sunny"}


def test_a_preamble_turn_renders_as_the_model_wrote_it_and_parses_back(tok):
    """Analysis, a commentary preamble (Codex's system prompt asks for them), then the call: the
    template alone refuses text beside reasoning, or takes the text for the analysis."""
    ask = [{"role": "user", "content": "Weather?"}]
    prompt = _prompt(tok, ask)
    full = _prompt(tok, [*ask, PREAMBLE_TURN, RESULT])
    assert full.token_ids[: len(prompt.token_ids)] == prompt.token_ids
    written = full.text[len(prompt.text) : full.text.index("<|call|>") + len("<|call|>")]
    assert written == (
        "<|channel|>analysis<|message|>Need the weather.<|end|>"
        "<|start|>assistant<|channel|>commentary<|message|>Let me check.<|end|>"
        '<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{"days": 2}<|call|>'
    )
    msg = parse(token_ids=tok.encode(written), format="gpt_oss", tokenizer=tok, prompt=prompt.text, tools=TOOLS)
    assert (msg.reasoning, msg.content, [c.name for c in msg.tool_calls]) == (
        "Need the weather.", "Let me check.", ["get_weather"])  # fmt: skip
    # the result header still names the function
    assert "<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>" in full.text


def test_a_preamble_stays_once_the_analysis_is_dropped(tok):
    """After a final answer the template drops earlier analysis (chain of thought is not kept); the
    preamble is text the user saw, and stays."""
    final = {"role": "assistant", "content": "Sunny."}
    text = _prompt(tok, [{"role": "user", "content": "Weather?"}, PREAMBLE_TURN, RESULT, final,
                         {"role": "user", "content": "Thanks"}]).text  # fmt: skip
    assert "Need the weather." not in text
    assert "<|start|>assistant<|channel|>commentary<|message|>Let me check.<|end|><|start|>assistant to=" in text


def test_a_late_system_message_is_a_developer_message_where_it_arrived(tok):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather?"},
                {"role": "system", "content": "# Environment\ncwd: /work"}]  # fmt: skip
    text = _prompt(tok, messages).text
    assert text.index("Be brief.") < text.index("# Tools") < text.index("<|start|>user<|message|>Weather?<|end|>")
    assert text.endswith("<|start|>user<|message|>Weather?<|end|>"
                         "<|start|>developer<|message|># Environment\ncwd: /work<|end|><|start|>assistant")  # fmt: skip


def test_delimiters_in_a_preamble_or_a_late_system_message_stay_text(tok):
    turn = {**PREAMBLE_TURN, "content": "Let me <|call|> check <|end|>."}
    messages = [{"role": "user", "content": "Weather?"}, {"role": "system", "content": "note <|start|>"}, turn, RESULT]
    p = _prompt(tok, messages)
    plain = _prompt(tok, messages, isolate_markers=False)
    assert p.text == plain.text and len(p.isolated_spans) == 3
    assert p.token_ids.count(IDS["<|call|>"]) == 1 and p.token_ids.count(IDS["<|start|>"]) == plain.token_ids.count(
        IDS["<|start|>"]) - 1  # fmt: skip


@pytest.mark.parametrize("description", [None, "absent"])
def test_a_tool_without_a_description_is_declared_not_refused(tok, description):
    """gpt-oss's template writes `"// " + tool.description`, so a tool without one (an MCP
    server's may have none) made every request of a session a 400. It gets an empty description,
    in a copy: the caller's tools stay as they were, and a described tool renders as before."""
    from chatsieve.prompt import render_prompt

    bare = {"name": "fetch_page", "parameters": {"type": "object", "properties": {"url": {"type": "string"}}}}
    if description is None:
        bare["description"] = None
    tools = [TOOLS[0], {"type": "function", "function": bare}]
    given = json.loads(json.dumps(tools))
    ask = [{"role": "user", "content": "Fetch it."}]
    got = render_prompt(ask, tokenizer=tok, tools=tools, format="gpt_oss")
    assert tools == given
    assert "// Weather.\ntype get_weather = " in got.text and "\n// \ntype fetch_page = (_: {\nurl?: string,\n}) => any;" in got.text
    spelled = {**bare, "description": ""}
    assert got.token_ids == render_prompt(ask, tokenizer=tok, tools=[TOOLS[0], {"type": "function", "function": spelled}],
                                          format="gpt_oss").token_ids


def test_every_template_takes_a_tool_without_a_description():
    """Every chat template of the test data (llama.cpp's copies too) renders a tool without a
    description: those that refuse one otherwise (gpt-oss's, ...) get an empty description; the
    others get the tools as they were sent (Qwen3 prints a tool's JSON, where an added description
    would show)."""
    from chatsieve.prompt import PromptError
    from chatsieve.prompt.template import render_chat_template
    from chatsieve.tool_prompt import described_tools, template_support

    bare = [{"type": "function", "function": {"name": "fetch_page", "parameters": {
        "type": "object", "properties": {"url": {"type": "string"}}}}}]  # fmt: skip
    described = [{"type": "function", "function": {**bare[0]["function"], "description": "Fetch a page."}}]
    user = [{"role": "user", "content": "q"}]
    variables = {"bos_token": "", "eos_token": ""}
    paths = [*models.models_dir().rglob("*.jinja"), *(models.llama_cpp_models() / "templates").glob("*.jinja")]
    needing = []
    for path in sorted(set(paths)):
        source = path.read_text(encoding="utf-8")
        try:
            render_chat_template(source, user, described, None, True, variables)
        except PromptError:
            continue  # refuses this conversation whatever the tool: not this test's concern
        given = described_tools(source, bare)
        if template_support(source).needs_description:
            needing.append(path.as_posix())
            assert given is not bare and given[0]["function"]["description"] == ""
        else:
            assert given is bare, path
        render_chat_template(source, user, given, None, True, variables)  # no refusal
    assert any(p.endswith("gpt-oss/chat_template.jinja") for p in needing), needing
