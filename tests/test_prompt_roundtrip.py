"""Earlier turns reach the template as the model wrote them: for every family whose format names a
chat template (shared/models or the registry copy of llama.cpp's templates), the assistant message
chatsieve parses out of the model's text, handed back in the next request, renders to that same
text, token for token where the family's tokenizer is here.

The model's text is what the family's own template writes for the turn (argument objects, the
family's call ids), up to where the tool results' framing starts: what the model was trained to
produce. Where a template cannot express a turn the case is marked xfail(strict) with the reason,
so the exception list stays true. Also: an earlier answer ends where the template ends the turn;
the probe that decides objects vs JSON strings, per template; Gemma 4's answer turn after tool
results; templates that ignore tools, have no tool role, drop calls or take one call per message;
`--chat-template`.
"""

from __future__ import annotations

import json
import lzma
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from models import chat_tokenizer, model_path, tokenizer

from chatsieve import StreamParser, formats
from chatsieve.prompt import PromptError, load_chat_template, render_prompt, render_text
from chatsieve.prompt.template import call_shape as _call_shape
from chatsieve.tool_prompt import _one_call_per_message, template_support, write_calls

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Get the weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                       "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "get_time", "description": "Get the local time",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
]  # fmt: skip

# Every family whose FormatSpec names a template in the test data: a new family is checked here
# as soon as it has one.
FAMILIES = [n for n in formats.names() if formats.get(n).template]

# the real tokenizer of each family's tokenizer_doc (None: text only)
_TOKENIZERS = {"qwen3": "qwen3", "deepseek": "deepseek", "deepseek/v4": "deepseek_v4", "gpt-oss": "gpt-oss",
               "llama3": "llama3", "glm/glm-5": "glm5", "kimi-k2": "kimi_k2", "mistral": "mistral",
               "gemma3": "gemma3"}  # fmt: skip

# Templates that render no tool definitions and whose family documents no tool prompt: the round
# trip is checked without tools (with tools the request is refused, test_ignored_tools_*).
NO_TOOLS = {"deepseek_r1", "deepseek_v3"}

# Families whose thinking is off by default, with the template variable that turns it on: their
# "thinking_call" case is a call after reasoning, in an agent loop with thinking on.
THINKING = {"apertus": ("enable_thinking", True), "cohere_command": ("enable_thinking", True),
            "deepseek_v31": ("thinking", True), "deepseek_v32": ("thinking", True),
            "deepseek_v4": ("enable_thinking", True), "gemma4": ("enable_thinking", True),
            "granite": ("thinking", True), "minicpm5": ("enable_thinking", True),
            "minimax_m3": ("thinking_mode", "enabled")}  # fmt: skip

# (family, case) -> why the template cannot write that turn as the model did
_V32 = ("DeepSeek V3.2's template writes thinking-off history as `</think>` but ends the generation prompt with "
        "`<think></think>`: its history is not what follows its own prompt")
_DROPS_THOUGHT = ("{}'s template drops an earlier turn's reasoning and the `{}` its generation prompt opens "
                  "the turn with: its history is not what follows its own prompt")
EXCEPTIONS = {
    ("apriel", "call"): _DROPS_THOUGHT.format("Apriel 1.6", "Here are my reasoning steps:"),
    ("apriel", "parallel"): _DROPS_THOUGHT.format("Apriel 1.6", "Here are my reasoning steps:"),
    ("apriel", "text_and_call"): _DROPS_THOUGHT.format("Apriel 1.6", "Here are my reasoning steps:"),
    ("nemotron", "call"): _DROPS_THOUGHT.format("Nemotron Nano v2", "<think>"),
    ("nemotron", "parallel"): _DROPS_THOUGHT.format("Nemotron Nano v2", "<think>"),
    ("nemotron", "text_and_call"): _DROPS_THOUGHT.format("Nemotron Nano v2", "<think>"),
    ("gigachat3", "parallel"): "GigaChat 3 writes one call per turn (history: one call-and-result after another)",
    ("functionary_v31", "text_and_call"): "Functionary v3.1's prompt asks for a reply that is ONLY the call; "
    "`<function=` is plain text, read as a call only at the reply's start (an echoed one inside an answer stays text)",
    ("gemma4", "text_and_call"): "Gemma 4's template writes a call message's text after the tool results",
    ("gemma3", "text_and_call"): "Gemma 3's documented format has no text beside a call list",
    ("llama3_json", "parallel"): "Llama 3 writes one call per message (its template refuses more; history: one "
    "call-and-result after another)",
    ("gpt_oss", "parallel"): "gpt-oss writes one call per generation (`<|call|>` ends it; history: one "
    "call-and-result after another)",
    ("deepseek_r1", "text_and_call"): "DeepSeek R1 output starts in reasoning and its template drops earlier "
    "reasoning: text before a call cannot be told from reasoning",
    ("deepseek_v31", "thinking_call"): "DeepSeek V3.1 calls tools in non-thinking mode only (model card: "
    "\"Toolcall is supported in non-thinking mode\"): its history writes a call turn as non-thinking (`</think>`)",
    ("deepseek_v32", "call"): _V32,
    ("deepseek_v32", "parallel"): _V32,
    ("deepseek_v32", "text_and_call"): _V32,
}


def _template(spec, *, exact: bool = False) -> str:
    path = model_path(spec.template, exact=exact)
    if path.name.startswith("tokenizer_config"):
        raw = lzma.open(path).read() if path.suffix == ".xz" else path.read_bytes()
        return json.loads(raw)["chat_template"]
    return path.read_text(encoding="utf-8")


def _tokenizer(spec):
    if spec.tokenizer_doc == "gemma4":
        return chat_tokenizer("gemma4")
    if spec.tokenizer_doc and spec.tokenizer_doc not in _TOKENIZERS:
        raise AssertionError(f"{spec.name}: add its tokenizer {spec.tokenizer_doc!r} to _TOKENIZERS (else text mode)")
    name = _TOKENIZERS.get(spec.tokenizer_doc)
    return tokenizer(name) if name else None


def _variables(spec, tok) -> dict:
    if tok is not None:
        return {}
    return {"bos_token": "<s>", "eos_token": "</s>"}


def _model_turn(spec, case: str, shape) -> dict:
    """The assistant turn as the family writes it (argument objects where the template takes them)."""
    def call(i: int, name: str, args: dict) -> dict:
        cid = f"functions.{name}:{i}" if spec.name.startswith("kimi") else f"abcDEF12{i}"
        given = args if shape.objects else json.dumps(args, separators=(",", ":"))
        return {"id": cid, "type": "function", "function": {"name": name, "arguments": given}}

    calls = [call(0, "get_weather", {"city": "Paris", "days": 2})]
    if case == "parallel":
        calls.append(call(1, "get_time", {"city": "Paris"}))
    turn = {"role": "assistant", "content": "Let me check." if case == "text_and_call" else "", "tool_calls": calls}
    if spec.reasoning_open and (spec.default_thinking or case == "thinking_call"):
        turn["reasoning_content"] = "The user wants the weather; I call the tool."
    return turn


def _results(turn: dict) -> list[dict]:
    return [{"role": "tool", "tool_call_id": c["id"], "name": c["function"]["name"], "content": f"result {i}"}
            for i, c in enumerate(turn["tool_calls"])]


CASES = ("call", "parallel", "text_and_call", "thinking_call")


def _cases():
    for family in FAMILIES:
        for case in CASES:
            if case == "thinking_call" and family not in THINKING:
                continue
            reason = EXCEPTIONS.get((family, case))
            marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
            yield pytest.param(family, case, marks=marks, id=f"{family}-{case}")


@pytest.mark.parametrize(("family", "case"), _cases())
def test_returned_message_renders_as_the_model_wrote_it(family, case):
    spec = formats.get(family)
    source = _template(spec, exact=(family, case) in EXCEPTIONS)  # an exception is a fact of that very file
    tok = _tokenizer(spec)
    tools = None if family in NO_TOOLS else TOOLS
    variables = _variables(spec, tok)
    thinking = None
    if case == "thinking_call":
        var, on = THINKING[family]
        variables, thinking = {**variables, var: on}, True
    shape = _call_shape(source)
    base = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather in Paris?"}]
    turn = _model_turn(spec, case, shape)

    def render(messages, add_generation_prompt=True):
        kw = {"template": source, "tools": tools, "format": family, "add_generation_prompt": add_generation_prompt}
        if tok is None:
            return render_text(messages, **kw, **variables), None
        p = render_prompt(messages, tokenizer=tok, **kw, **variables)
        return p.text, p.token_ids

    prompt_text, prompt_ids = render(base)
    full_text, full_ids = render([*base, turn, *_results(turn)])
    assert full_text.startswith(prompt_text), "the template writes history differently from its generation prompt"
    # The model's text: what follows the prompt in the template's own rendering of the turn, up to
    # where the tool results' framing begins (Apertus writes the results inside the model's turn).
    alone, _ = render([*base, turn], add_generation_prompt=False)
    written = full_text[len(prompt_text) : len(os.path.commonprefix([alone, full_text]))]
    parser = StreamParser(family, tools=tools or TOOLS, prompt=prompt_text, tokenizer=tok, thinking=thinking)
    if tok is not None:
        assert full_ids[: len(prompt_ids)] == prompt_ids
        ids = full_ids[len(prompt_ids):]
        n = next(n for n in range(len(ids) + 1) if len(tok.decode(ids[:n])) >= len(written))
        parser.feed(token_ids=ids[:n])  # the model's own tokens, gated
    else:
        parser.feed(written)
    parser.finish("stop")
    msg = parser.message
    assert [c.name for c in msg.tool_calls] == [c["function"]["name"] for c in turn["tool_calls"]]
    returned = {"role": "assistant", "content": msg.content or "",
                "tool_calls": [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                               for c in msg.tool_calls]}  # fmt: skip
    if msg.reasoning:
        returned["reasoning_content"] = msg.reasoning
    results = [{**r, "tool_call_id": c.id} for r, c in zip(_results(turn), msg.tool_calls, strict=True)]
    again_text, again_ids = render([*base, returned, *results])
    assert again_text == full_text
    assert again_ids == full_ids


@pytest.mark.parametrize("family", FAMILIES)
def test_an_earlier_answer_ends_where_the_template_ends_the_turn(family):
    """An answer as the template writes it in history, read from its first character to where the
    next message's own framing starts: exactly the answer, the family's end of turn read as one
    (no marker left in the content). Thinking off: templates drop an earlier answer's reasoning."""
    spec = formats.get(family)
    tok = _tokenizer(spec)
    answer = "It is sunny in Paris."
    conv = [{"role": "user", "content": "Weather in Paris?"}, {"role": "assistant", "content": answer}]

    def render(*after: dict) -> str:
        return render_text([*conv, *after], tokenizer=tok, template=_template(spec), format=family,
                           add_generation_prompt=bool(after), **_variables(spec, tok))

    text = render({"role": "user", "content": "Thanks."})
    # The turn ends where this rendering parts from the turn rendered last, or from a next message
    # of another role (whichever agrees longer; a template may render the last turn differently);
    # where neither agrees past the answer, at the next message's text (its framing included:
    # the family's end of turn must come first).
    others = [render()]
    try:
        others.append(render({"role": "system", "content": "Thanks."}))
    except PromptError:
        pass
    at = text.index(answer)
    agreed = max(len(os.path.commonprefix([text, o])) for o in others)
    end = min(agreed, text.index("Thanks."))
    tail = text[at + len(answer) : end]
    if tail.rfind("<") > tail.rfind(">"):  # they parted inside the next role's tag: cut before it
        end = at + len(answer) + tail.rfind("<")
    if end <= at + len(answer):
        end = text.index("Thanks.")
    parser = StreamParser(family, thinking=False, prompt=text[:at])
    parser.feed(text[at:end])
    parser.finish("stop")
    assert (parser.message.reasoning, parser.message.content) == (None, answer), text[at:end]
    if tok is None:
        return
    # token mode: the same span as the model's own ids, its end of turn gated by id
    ids = render_prompt([*conv, {"role": "user", "content": "Thanks."}], tokenizer=tok, template=_template(spec),
                        format=family, **_variables(spec, tok)).token_ids
    start = next(k for k in range(len(ids)) if len(tok.decode(ids[:k])) >= at)
    assert tok.decode(ids[:start]) == text[:at], "the answer does not start at a token boundary"
    stop = next(k for k in range(start, len(ids) + 1) if len(tok.decode(ids[:k])) >= end)
    parser = StreamParser(family, thinking=False, prompt=text[:at], tokenizer=tok)
    parser.feed(token_ids=ids[start:stop])
    parser.finish("stop")
    assert (parser.message.reasoning, parser.message.content) == (None, answer), tok.decode(ids[start:stop])


@pytest.mark.parametrize("family", sorted(THINKING))
def test_the_thinking_variable_switches_the_template(family):
    spec = formats.get(family)
    tok = _tokenizer(spec)
    var, on = THINKING[family]
    msgs = [{"role": "user", "content": "q"}]
    kw = {"tokenizer": tok, "template": _template(spec), "format": family, **_variables(spec, tok)}
    assert not spec.default_thinking and spec.reasoning_open
    assert render_text(msgs, **kw, **{var: on}) != render_text(msgs, **kw)


def test_the_round_trip_list_is_known():
    """FAMILIES is derived from the registry; every exception names a family and case checked
    here (an exception cannot outlive its family), and every template's probe is pinned below."""
    assert {"qwen3", "gemma4", "gpt_oss", "glm47", "kimi_k2", "deepseek_v31", "gemma3", "mistral", "apertus",
            "apriel", "functionary_v31", "gigachat3", "granite", "minimax_m3", "nemotron"} <= set(FAMILIES)
    assert {f for f, _ in EXCEPTIONS} <= set(FAMILIES) and {c for _, c in EXCEPTIONS} <= set(CASES)
    assert NO_TOOLS <= set(FAMILIES) and set(THINKING) <= set(FAMILIES)
    assert {formats.get(f).template for f in FAMILIES} <= set(SHAPES)


# -- the probe, per template ------------------------------------------------------------------

# template -> (arguments as objects, null content for a call without text, calls rendered)
SHAPES = {
    "deepseek/chat_template.r1.jinja": (False, False, True),  # concatenates the string
    "deepseek/chat_template.v3.jinja": (False, True, True),  # ... and renders calls only under null content
    "deepseek/chat_template.v3.1.jinja": (False, False, True),
    "deepseek/chat_template.v3.2.jinja": (True, False, True),
    "gemma4/chat_template.jinja": (True, False, True),  # its own {k:<|"|>v<|"|>} from an object
    "gemma4/chat_template.interleaved.jinja": (True, False, True),
    "glm/chat_template.glm-4.6.jinja": (True, False, True),
    "glm/chat_template.glm-4.7-flash.jinja": (True, False, True),
    "gpt-oss/chat_template.jinja": (True, False, True),  # tojson: a string would be encoded twice
    "kimi-k2/chat_template.kimi-k2.jinja": (True, False, True),
    "kimi-k2/chat_template.kimi-k2-instruct.jinja": (True, False, True),
    "kimi-k2/chat_template.kimi-k2-thinking.jinja": (True, False, True),
    "llama3/chat_template.llama-3.1.jinja": (True, False, True),
    "llama3/chat_template.llama-3.2.jinja": (True, False, True),
    "mistral/chat_template.mistral-nemo-2407.jinja": (True, False, True),
    "mistral/chat_template.mistral-small-3.2-2506.jinja": (True, False, True),
    "mistral/chat_template.ministral-3-reasoning-2512.jinja": (True, False, True),
    "qwen3/chat_template.jinja": (True, False, True),  # tojson of an object: the model's `{"k": "v"}`
    "qwen3/chat_template.qwen3-coder.jinja": (True, False, True),
    "gemma3/tokenizer_config.json.xz": (False, False, False),  # no calls, no tool role
}
# the newer families' templates (llama.cpp's models/templates)
_LLAMA_CPP = "llama.cpp/models/templates/"
SHAPES.update({_LLAMA_CPP + name: shape for name, shape in {
    "Apertus-8B-Instruct.jinja": (True, False, True),  # `arguments|tojson`
    "Apriel-1.6-15b-Thinker-fixed.jinja": (True, False, True),
    "CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja": (True, False, True),
    "deepseek-ai-DeepSeek-V4.jinja": (True, False, True),
    "meetkai-functionary-medium-v3.1.jinja": (True, False, True),
    "meetkai-functionary-medium-v3.2.jinja": (False, False, True),  # concatenates the string
    "GigaChat3-10B-A1.8B.jinja": (True, False, True),
    "ibm-granite-granite-3.3-2B-Instruct.jinja": (False, False, False),  # renders content only
    "ibm-granite-granite-4.0.jinja": (True, False, True),
    "Qwen-Qwen2.5-7B-Instruct.jinja": (True, False, True),
    "Kimi-K3.jinja": (True, False, True),
    "LFM2.5-8B-A1B.jinja": (True, False, True),
    "openbmb-MiniCPM5-1B.jinja": (True, False, True),
    "MiniMax-M2.jinja": (True, False, True),  # its own XML from an object
    "MiniMax-M3.jinja": (True, False, True),
    "NVIDIA-Nemotron-Nano-v2.jinja": (True, False, True),
    "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja": (True, False, True),
    "ByteDance-Seed-OSS.jinja": (True, False, True),
    "StepFun3.5-Flash.jinja": (True, False, True),
    "inclusionai-ling-3.0-flash.jinja": (True, False, True),
    "poolside-Laguna-S-2.1.jinja": (True, False, True),
    "Qwen3.5-4B.jinja": (True, False, True),
    "tencent-Hy3.jinja": (True, False, True),
    "muse-glimmer.jinja": (True, False, True),  # refuses a call whose arguments are a string
    # the later edits of first-version templates (chatsieve.testdata.LATER_EDITS)
    "Qwen3-Coder.jinja": (True, False, True),
    "moonshotai-Kimi-K2.jinja": (True, False, True),
    "Kimi-K2-Instruct.jinja": (True, False, True),
    "Kimi-K2-Thinking.jinja": (True, False, True),
    "deepseek-ai-DeepSeek-V3.1.jinja": (True, False, True),  # its first version passes the JSON string
}.items()})


@pytest.mark.parametrize("rel", sorted(SHAPES))
def test_call_shape_per_template(rel):
    path = model_path(rel, exact=True)
    if path.name.startswith("tokenizer_config"):
        source = json.loads(lzma.open(path).read())["chat_template"]
    else:
        source = path.read_text(encoding="utf-8")
    shape = _call_shape(source)
    assert (shape.objects, shape.null_content, shape.renders) == SHAPES[rel]


def test_gpt_oss_and_gemma4_history_is_their_own_syntax_not_a_json_string():
    call = {"role": "assistant", "content": "", "tool_calls": [
        {"id": "abcDEF123", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}]}
    conv = [{"role": "user", "content": "Weather?"}, call, {"role": "tool", "tool_call_id": "abcDEF123", "content": "sunny"}]
    gpt = render_text(conv, template=_template(formats.get("gpt_oss")), tools=TOOLS, format="gpt_oss")
    assert '<|message|>{"city": "Paris"}<|call|>' in gpt and '\\"city' not in gpt
    gemma = render_text(conv, template=_template(formats.get("gemma4")), tools=TOOLS, format="gemma4",
                        bos_token="<bos>")
    assert '<|tool_call>call:get_weather{city:<|"|>Paris<|"|>}<tool_call|>' in gemma


def test_an_object_sent_for_a_string_template_becomes_its_json():
    conv = [{"role": "user", "content": "q"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"}]  # fmt: skip
    text = render_text(conv, template=_template(formats.get("deepseek_v31")), bos_token="", eos_token="")
    assert '<｜tool▁sep｜>{"city": "Paris"}<｜tool▁call▁end｜>' in text


# -- Gemma 4: what follows tool results ---------------------------------------------------------


def _gemma4_conversation(text: str) -> list[dict]:
    return [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": text, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    ]  # fmt: skip


@pytest.mark.parametrize("thinking", [False, True])
def test_gemma4_answers_inside_its_turn_after_tool_results(thinking):
    source = _template(formats.get("gemma4"))
    tok = chat_tokenizer("gemma4")
    # calls without text: the model continues its own turn right after the results (template rule)
    p = render_prompt(_gemma4_conversation(""), tokenizer=tok, template=source, tools=TOOLS, format="gemma4",
                      enable_thinking=thinking)
    assert p.text.endswith("<tool_response|>")
    # calls with text: the template writes the text after the results and closes the turn; the
    # model's answer then gets a model turn, as after any closed turn
    p = render_prompt(_gemma4_conversation("Let me check."), tokenizer=tok, template=source, tools=TOOLS,
                      format="gemma4", enable_thinking=thinking)
    assert p.text.endswith("<tool_response|>Let me check.<turn|>\n<|turn>model\n")
    assert p.token_ids[-2:] == [tok.single_token_id("<|turn>"), *tok.encode("model\n")][-2:]
    kept = render_text(_gemma4_conversation("Let me check."), template=source, tools=TOOLS, format="gemma4",
                       bos_token="<bos>", keep_empty_thinking=True, enable_thinking=thinking)
    assert kept.endswith("<|turn>model\n" + ("" if thinking else "<|channel>thought\n<channel|>"))


# -- templates that ignore tools, or have no tool role -------------------------------------------


def test_ignored_tools_are_detected_per_template():
    assert not template_support(_template(formats.get("deepseek_v31"))).tools
    assert not template_support(_template(formats.get("gemma3"))).tools
    assert template_support(_template(formats.get("qwen3"))).tools
    assert template_support(_template(formats.get("deepseek_v31"))).results
    assert not template_support(_template(formats.get("gemma3"))).results


def test_deepseek_v31_gets_its_documented_tool_prompt_with_control_tokens_kept():
    spec = formats.get("deepseek_v31")
    tok = tokenizer("deepseek")
    p = render_prompt([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather?"}],
                      tokenizer=tok, template=_template(spec), tools=TOOLS, format="deepseek_v31")
    # the model card's ToolCall section, word for word: `{system prompt}\n\n{tool_description}<｜User｜>`
    blocks = "".join(f"### {t['function']['name']}\nDescription: {t['function']['description']}\n\n"
                     f"Parameters: {json.dumps(t['function']['parameters'])}\n\n" for t in TOOLS)
    card = ("## Tools\nYou have access to the following tools:\n\n" + blocks +
            "IMPORTANT: ALWAYS adhere to this exact format for tool use:\n<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>"
            "tool_call_name<｜tool▁sep｜>tool_call_arguments<｜tool▁call▁end｜>{additional_tool_calls}<｜tool▁calls▁end｜>\n\n"
            "Where:\n- `tool_call_name` must be an exact match to one of the available tools\n"
            "- `tool_call_arguments` must be valid JSON that strictly follows the tool's Parameters Schema\n"
            "- For multiple tool calls, chain them directly without separators or spaces")
    assert p.text.startswith(f"<｜begin▁of▁sentence｜>Be brief.\n\n{card}<｜User｜>Weather?<｜Assistant｜>"), p.text
    # the documented format's own control tokens are the model's tokens, not text
    assert tok.single_token_id("<｜tool▁sep｜>") in p.token_ids
    assert p.isolated_spans == []
    # without tools the template's own rendering is untouched
    plain = render_text([{"role": "user", "content": "Weather?"}], template=_template(spec), format="deepseek_v31",
                        bos_token="", eos_token="")
    assert "## Tools" not in plain


def test_a_tool_name_with_a_delimiter_is_still_isolated_in_the_injected_prompt():
    tok = tokenizer("deepseek")
    tools = [{"type": "function", "function": {"name": "f", "description": "x<｜tool▁sep｜>y", "parameters": {}}}]
    p = render_prompt([{"role": "user", "content": "q"}], tokenizer=tok, template=_template(formats.get("deepseek_v31")),
                      tools=tools, format="deepseek_v31")
    assert len(p.isolated_spans) == 1
    s, e = p.isolated_spans[0]
    assert tok.decode(p.token_ids[s:e]) == "<｜tool▁sep｜>"


@pytest.mark.parametrize("family", ["deepseek_r1", "deepseek_v3"])
def test_ignored_tools_without_a_documented_prompt_are_refused(family):
    spec = formats.get(family)
    with pytest.raises(PromptError, match="ignores the tool definitions.*--chat-template PATH"):
        render_text([{"role": "user", "content": "q"}], template=_template(spec), tools=TOOLS, format=family,
                    bos_token="", eos_token="")
    # without a format (a library call) transformers' behaviour stays: the template decides
    render_text([{"role": "user", "content": "q"}], template=_template(spec), tools=TOOLS, bos_token="", eos_token="")


def test_gemma3_renders_calls_and_results_as_its_guide_describes():
    tok = tokenizer("gemma3")
    conv = [{"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "get_weather",
                                                              "arguments": '{"city": "Paris", "days": 2}'}},
                {"id": "c2", "type": "function", "function": {"name": "get_time", "arguments": '{"city": "Paris"}'}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
            {"role": "tool", "tool_call_id": "c2", "content": "noon"},
            {"role": "user", "content": "And tomorrow?"}]  # fmt: skip
    p = render_prompt(conv, tokenizer=tok, tools=TOOLS, format="gemma3")
    assert p.text.startswith("<bos><start_of_turn>user\nYou have access to functions.")
    assert '"name": "get_weather"' in p.text
    assert ('<start_of_turn>model\n[get_weather(city="Paris", days=2), get_time(city="Paris")]<end_of_turn>\n'
            "<start_of_turn>user\n```tool_output\nsunny\n```\n```tool_output\nnoon\n```\n\nAnd tomorrow?<end_of_turn>\n"
            "<start_of_turn>model\n") in p.text
    # the template itself refuses a tool role: without the family it is the template's error
    with pytest.raises(PromptError, match="alternate"):
        render_prompt(conv, tokenizer=tok, tools=TOOLS)


def test_granite_writes_earlier_calls_as_its_tool_call_list():
    """Granite 3.3's template renders only content: an earlier call is written as the model writes
    it (`<|tool_call|>[...]`, IBM's format) instead of vanishing; results keep the `tool` role."""
    conv = [{"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
                {"id": "c2", "type": "function", "function": {"name": "get_time", "arguments": '{"city": "Paris"}'}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
            {"role": "tool", "tool_call_id": "c2", "content": "noon"}]  # fmt: skip
    source = _template(formats.get("granite"))
    text = render_text(conv, template=source, tools=TOOLS, format="granite")
    assert ('<|start_of_role|>assistant<|end_of_role|><|tool_call|>[{"name": "get_weather", "arguments": '
            '{"city": "Paris"}}, {"name": "get_time", "arguments": {"city": "Paris"}}]<|end_of_text|>\n'
            "<|start_of_role|>tool<|end_of_role|>sunny<|end_of_text|>\n") in text
    # without the family the template's own rendering stays: the calls are gone
    assert "<|tool_call|>[" not in render_text(conv, template=source, tools=TOOLS)


def test_a_template_that_drops_calls_without_a_documented_syntax_is_refused():
    source = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    conv = [{"role": "user", "content": "q"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"}]  # fmt: skip
    with pytest.raises(PromptError, match="ignores the earlier tool calls.*--chat-template PATH"):
        render_text(conv, template=source, format="hermes")


@pytest.mark.parametrize("family", ["gpt_oss", "gigachat3", "llama3_json"])
def test_parallel_calls_for_a_one_call_template_are_one_call_and_result_after_another(family):
    """gpt-oss' and GigaChat 3's templates render only a message's first call (Llama 3's refuses
    more): several calls are written as the model writes them, one call then its result, in turn;
    no call and no result is dropped, and each result follows its own call (matched by id)."""
    spec = formats.get(family)
    source, tok = _template(spec), _tokenizer(spec)
    shape = _call_shape(source)
    assert not template_support(source).parallel
    turn = _model_turn(spec, "parallel", shape)
    results = _results(turn)[::-1]  # sent in the other order: matched by tool_call_id
    conv = [{"role": "user", "content": "Weather in Paris?"}, turn, *results]
    text = render_text(conv, tokenizer=tok, template=source, tools=TOOLS, format=family, **_variables(spec, tok))
    one = [render_text([{"role": "user", "content": "Weather in Paris?"}, {**turn, "tool_calls": [c]}, r],
                       tokenizer=tok, template=source, tools=TOOLS, format=family, **_variables(spec, tok))
           for c, r in zip(turn["tool_calls"], _results(turn), strict=True)]
    at = [text.index('"Paris", "days": 2'), text.index("result 0"), text.index('{"city": "Paris"}'),
          text.index("result 1")]
    assert at == sorted(at), text
    # the first call and its result exactly as the template writes a one-call turn
    head = one[0][: one[0].index("result 0") + len("result 0")]
    assert text.startswith(head)


def test_deepseek_v3_keeps_the_calls_of_a_message_with_text():
    """DeepSeek V3's template renders a message's calls only under null content: with text they
    vanished; now they follow the text in the template's own call syntax, as R1's template writes them."""
    conv = [{"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": "Let me check.", "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"}]  # fmt: skip
    text = render_text(conv, template=_template(formats.get("deepseek_v3")), format="deepseek_v3",
                       bos_token="", eos_token="")
    assert ('<｜Assistant｜>Let me check.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n'
            '```json\n{"city": "Paris"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜>') in text
    r1 = render_text(conv, template=_template(formats.get("deepseek_r1")), bos_token="", eos_token="")
    assert 'Let me check.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather' in r1
    # a message without text keeps the template's own rendering
    bare = [conv[0], {**conv[1], "content": None}, conv[2]]
    assert render_text(bare, template=_template(formats.get("deepseek_v3")), format="deepseek_v3", bos_token="",
                       eos_token="") == render_text(bare, template=_template(formats.get("deepseek_v3")),
                                                    bos_token="", eos_token="")


@settings(max_examples=200, deadline=None)
@given(n=st.integers(2, 5), order=st.randoms(use_true_random=False), by_id=st.booleans(), text=st.booleans())
def test_one_call_per_message_loses_nothing_and_pairs_each_result_with_its_call(n, order, by_id, text):
    calls = [{"id": f"c{i}", "type": "function", "function": {"name": f"f{i}", "arguments": "{}"}} for i in range(n)]
    results = [{"role": "tool", "content": f"r{i}", **({"tool_call_id": f"c{i}"} if by_id else {})} for i in range(n)]
    if by_id:
        order.shuffle(results)
    msgs = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "t" if text else "", "tool_calls": calls},
            *results, {"role": "user", "content": "next"}]
    out = _one_call_per_message(msgs)
    assistants = [m for m in out if m["role"] == "assistant"]
    assert [m["tool_calls"] for m in assistants] == [[c] for c in calls]
    assert [m["content"] for m in assistants] == ["t" if text else ""] + [""] * (n - 1)
    assert sorted(m["content"] for m in out if m["role"] == "tool") == sorted(r["content"] for r in results)
    for k, m in enumerate(out):  # each result right after its own call (or an earlier result of it)
        if m["role"] == "tool":
            owner = next(p for p in reversed(out[:k]) if p["role"] == "assistant")
            assert m["content"] == "r" + owner["tool_calls"][0]["id"][1:]
    assert out[0] == msgs[0] and out[-1] == msgs[-1]


def test_write_calls_pythonic_literals():
    calls = [{"function": {"name": "f", "arguments": '{"s": "a\\"b", "t": true, "n": null, "x": [1.5, {"k": "v"}]}'}}]
    assert write_calls("pythonic", calls) == '[f(s="a\\"b", t=True, n=None, x=[1.5, {"k": "v"}])]'


# -- --chat-template -----------------------------------------------------------------------------


def test_load_chat_template_checks_the_file(tmp_path):
    good = tmp_path / "t.jinja"
    good.write_text("{% for m in messages %}{{ m.content }}{% endfor %}", encoding="utf-8")
    assert load_chat_template(good).startswith("{% for")
    with pytest.raises(PromptError, match="cannot read"):
        load_chat_template(tmp_path / "missing.jinja")
    bad = tmp_path / "bad.jinja"
    bad.write_text("{% for m in messages %}", encoding="utf-8")
    with pytest.raises(PromptError, match="does not render"):
        load_chat_template(bad)
    (tmp_path / "empty.jinja").write_text("  \n", encoding="utf-8")
    with pytest.raises(PromptError, match="empty"):
        load_chat_template(tmp_path / "empty.jinja")


def test_serve_checks_chat_template_at_start_up(tmp_path, capsys):
    from chatsieve.server import serve_main

    model_dir = model_path("qwen3")
    bad = tmp_path / "bad.jinja"
    bad.write_text("{% if %}", encoding="utf-8")
    for path, why in ((tmp_path / "missing.jinja", "cannot read"), (bad, "does not render")):
        code = serve_main(["--model-dir", str(model_dir), "--format", "qwen3", "--backend", "http://127.0.0.1:9",
                           "--chat-template", str(path)])
        assert code == 2
        err = capsys.readouterr().err
        assert err.startswith("chatsieve serve: error: --chat-template:") and why in err


def test_the_server_renders_with_chat_template(tmp_path):
    """--chat-template replaces the model's template, here for DeepSeek V3 (which ignores tools):
    with it, a request with tools is served instead of refused."""
    from fake_engines import FakeEngine, Script, ServerThread
    from starlette.testclient import TestClient

    from chatsieve.server.app import create_app
    from chatsieve.server.config import ServerConfig

    tok = tokenizer("deepseek")
    custom = tmp_path / "tools.jinja"
    custom.write_text(
        "{{ bos_token }}{% for t in tools or [] %}TOOL {{ t.function.name }}\n{% endfor %}"
        "{% for m in messages %}<｜User｜>{{ m.content }}{% endfor %}<｜Assistant｜>", encoding="utf-8")
    engine = FakeEngine(tok.decode, {"TOOL get_weather": Script(tok.encode("Sunny.<｜end▁of▁sentence｜>"))})
    body = {"messages": [{"role": "user", "content": "Weather?"}], "tools": TOOLS[:1]}
    with ServerThread(engine.app) as eng:
        for template, status in ((None, 400), (custom, 200)):
            cfg = ServerConfig(model_dir=tmp_path, format="deepseek_v3", backend_url=eng.url, warm_up=False,
                               served_model_name="m", chat_template=template)  # fmt: skip
            with TestClient(create_app(cfg, tokenizer=tok), base_url="http://127.0.0.1") as http:
                r = http.post("/v1/chat/completions", json=body)
            assert r.status_code == status, r.text
            if status == 400:
                assert "ignores the tool definitions" in r.json()["error"]["message"]
            else:
                assert r.json()["choices"][0]["message"]["content"] == "Sunny."
    assert ServerConfig.from_json(cfg.to_json()).chat_template == custom
