"""render_prompt / render_text against transformers' apply_chat_template on the real templates.

Also: the Jinja environment, Gemma 4's thinking-off prompt, truncation, errors, `chatsieve render`.
"""

from __future__ import annotations

import functools
import json

import jinja2
import pytest
import transformers
from hypothesis import given, settings
from hypothesis import strategies as st
from models import chat_tokenizer, model_path

from chatsieve import prefix_cache
from chatsieve.jinja_env import _JSON_CACHE, _to_json
from chatsieve.messages import normalize_messages
from chatsieve.prompt import (
    GEMMA4_EMPTY_THOUGHT,
    Prompt,
    PromptError,
    render_main,
    render_prompt,
    render_text,
)
from chatsieve.prompt.template import call_shape as _call_shape
from chatsieve.tokenizer import Tokenizer

# -- real tokenizers, loaded once -------------------------------------------------------------

_CONFIG_TOKENS = ("bos_token", "eos_token", "unk_token", "pad_token")


def tokenizer(family: str) -> Tokenizer:
    return chat_tokenizer(family)


def _tokens_of(tok: Tokenizer) -> dict[str, str]:
    out = {}
    for name in _CONFIG_TOKENS:
        v = tok.config.get(name)
        v = v.get("content") if isinstance(v, dict) else v
        if isinstance(v, str):
            out[name] = v
    return out


@functools.cache
def hf_tokenizer(family: str):
    """transformers' fast tokenizer over the same `tokenizers` object (offline)."""
    tok = tokenizer(family)
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok.hf, model_max_length=tok.model_max_length or int(1e30), **_tokens_of(tok)
    )


@functools.cache
def template(rel: str) -> str:
    return model_path(rel).read_text(encoding="utf-8")


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the weather for a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]


def conversation(args_as_string: bool, parts: bool, call_content: str | None = "") -> list[dict]:
    args = json.dumps({"city": "Paris"}) if args_as_string else {"city": "Paris"}
    user = (
        [{"type": "text", "text": "What is the weather in "}, {"type": "text", "text": "Paris?"}]
        if parts
        else "What is the weather in Paris?"
    )
    return [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": user},
        {
            "role": "assistant",
            "content": call_content,
            "tool_calls": [
                {
                    "id": "abcDEF123",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": args},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "abcDEF123", "name": "get_weather", "content": '{"sky": "sunny"}'},
        {"role": "assistant", "content": "It is sunny in Paris."},
        {"role": "user", "content": "Thanks! And tomorrow?"},
    ]


# template -> tokenizer family (None: the family has no tokenizer here; text only)
TEMPLATES = {
    "qwen3/chat_template.jinja": "qwen3",
    "qwen3/chat_template.qwen3-coder.jinja": "qwen3",
    "gemma4/chat_template.jinja": "gemma4",
    "gemma4/chat_template.interleaved.jinja": "gemma4",
    "deepseek/chat_template.r1.jinja": "deepseek",
    "deepseek/chat_template.v3.jinja": "deepseek",
    "deepseek/chat_template.v3.1.jinja": "deepseek",
    "deepseek/chat_template.v3.2.jinja": "deepseek",
    "llama3/chat_template.llama-3.1.jinja": "llama3",
    "llama3/chat_template.llama-3.2.jinja": "llama3",
    "gpt-oss/chat_template.jinja": "gpt-oss",
    "glm/chat_template.glm-4.6.jinja": None,
    "glm/chat_template.glm-4.7-flash.jinja": None,
    "mistral/chat_template.mistral-nemo-2407.jinja": None,
    "mistral/chat_template.mistral-small-3.2-2506.jinja": None,
    "mistral/chat_template.ministral-3-reasoning-2512.jinja": None,
    "kimi-k2/chat_template.kimi-k2.jinja": None,
    "kimi-k2/chat_template.kimi-k2-instruct.jinja": None,
    "kimi-k2/chat_template.kimi-k2-thinking.jinja": None,
}
# Kimi K2 Instruct/Thinking call list.append: transformers' immutable sandbox refuses them; we
# render them in the mutable sandbox and compare with transformers switched to that sandbox.
MUTATING = {"kimi-k2/chat_template.kimi-k2-instruct.jinja", "kimi-k2/chat_template.kimi-k2-thinking.jinja"}
TEXT_ONLY_TOKENS = {"bos_token": "<s>", "eos_token": "</s>"}  # for templates without a tokenizer here

VARIANTS = [(False, False, ""), (True, False, ""), (False, True, ""), (True, True, ""), (False, False, None)]


@pytest.fixture
def mutable_transformers_sandbox(monkeypatch):
    from jinja2.sandbox import SandboxedEnvironment
    from transformers.utils import chat_template_utils as ctu

    monkeypatch.setattr(ctu, "ImmutableSandboxedEnvironment", SandboxedEnvironment)
    ctu._compile_jinja_template.cache_clear()
    yield
    ctu._compile_jinja_template.cache_clear()


def _reference(hf, conv, tpl, *, tokenize, **kw):
    if any(m.get("content", "") is None for m in conv):
        # transformers drops null fields, so a template that renders a call only under null
        # content (DeepSeek V3) never shows it there: render with transformers' own Jinja setup.
        from transformers.utils.chat_template_utils import _compile_jinja_template

        values = {**{k: v for k, v in _tokens_of_hf(hf).items()}, **kw}
        text = _compile_jinja_template(tpl).render(messages=conv, tools=TOOLS, add_generation_prompt=True, **values)
        return hf(text, add_special_tokens=False)["input_ids"] if tokenize else text
    try:
        out = hf.apply_chat_template(
            conv, tools=TOOLS, chat_template=tpl, tokenize=tokenize, add_generation_prompt=True, **kw
        )
    except Exception as e:  # transformers refuses: we must refuse too
        return e
    return out["input_ids"] if tokenize else out


def _tokens_of_hf(hf) -> dict[str, str]:
    return {name: getattr(hf, name) for name in _CONFIG_TOKENS if isinstance(getattr(hf, name, None), str)}


@pytest.mark.parametrize("rel", sorted(TEMPLATES))
def test_matches_transformers(rel, request):
    if rel in MUTATING:
        request.getfixturevalue("mutable_transformers_sandbox")
    family = TEMPLATES[rel]
    tpl = template(rel)
    hf = hf_tokenizer(family or "qwen3")
    compared = 0
    for variant in VARIANTS:
        conv = conversation(*variant)
        extra = {} if family else TEXT_ONLY_TOKENS
        # What chatsieve documents: transformers' rendering of the normalised conversation (text
        # parts joined, null content as "", arguments as objects for templates that need them).
        # A call message without text gets null content where the template renders calls only then.
        shape = _call_shape(tpl)
        normal = normalize_messages(conv, arguments_as_objects=shape.objects)
        if shape.null_content:
            normal = [{**m, "content": None} if m.get("tool_calls") and m["content"] == "" else m for m in normal]
        ref_text = _reference(hf, normal, tpl, tokenize=False, **extra)
        if isinstance(ref_text, Exception):
            with pytest.raises(PromptError):
                render_text(
                    conv, template=tpl, tools=TOOLS, tokenizer=tokenizer(family) if family else None, **extra
                )
            continue
        compared += 1
        if family is None:
            assert render_text(conv, template=tpl, tools=TOOLS, **extra) == ref_text
            continue
        ref_ids = _reference(hf, normal, tpl, tokenize=True)
        for isolate in (False, True):  # no delimiter in this content: isolation changes nothing
            p = render_prompt(
                conv, tokenizer=tokenizer(family), template=tpl, tools=TOOLS, isolate_markers=isolate
            )
            assert p.text == ref_text
            assert p.token_ids == ref_ids
            assert p.isolated_spans == []
    assert compared >= 1, f"{rel}: transformers rendered none of the conversations"


def test_default_template_from_tokenizer_directory():
    conv = conversation(False, False)
    p = render_prompt(conv, tokenizer=tokenizer("qwen3"), tools=TOOLS, enable_thinking=False)
    ref = hf_tokenizer("qwen3").apply_chat_template(
        conv,
        tools=TOOLS,
        chat_template=template("qwen3/chat_template.jinja"),
        add_generation_prompt=True,
        enable_thinking=False,
    )
    assert p.token_ids == ref["input_ids"]
    assert p.text.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    # a directory path works too, and a template file path
    p2 = render_prompt(
        conv,
        tokenizer=str(model_path("qwen3")),
        tools=TOOLS,
        enable_thinking=False,
        template=str(model_path("qwen3/chat_template.jinja")),
    )
    assert p2 == p


def test_documents_and_extra_variables_reach_the_template():
    tpl = (
        "{% for d in documents %}[{{ d.title }}: {{ d.text }}]{% endfor %}"
        "{{ bos_token }}|{{ eos_token }}|{{ flavour }}|{{ add_generation_prompt }}"
    )
    docs = [{"title": "A", "text": "alpha"}, {"title": "B", "text": "beta"}]
    text = render_text(
        [{"role": "user", "content": "x"}],
        tokenizer=tokenizer("llama3"),
        template=tpl,
        documents=docs,
        flavour="mint",
    )
    ref = hf_tokenizer("llama3").apply_chat_template(
        [{"role": "user", "content": "x"}],
        chat_template=tpl,
        documents=docs,
        flavour="mint",
        tokenize=False,
        add_generation_prompt=True,
    )
    assert text == ref == "[A: alpha][B: beta]<|begin_of_text|>|<|end_of_text|>|mint|True"


# -- the Jinja environment --------------------------------------------------------------------


def _text(tpl: str, messages=None, **kw) -> str:
    return render_text(messages or [{"role": "user", "content": "hé <b>"}], template=tpl, **kw)


def test_tojson_like_transformers():
    msgs = [{"role": "user", "content": "hé <b>", "z": 1, "a": [1, 2]}]
    assert (
        _text("{{ messages[0] | tojson }}", msgs)
        == '{"role": "user", "content": "hé <b>", "z": 1, "a": [1, 2]}'
    )
    assert _text("{{ messages[0] | tojson(sort_keys=True, separators=(',', ':')) }}", msgs) == (
        '{"a":[1,2],"content":"hé <b>","role":"user","z":1}'
    )
    assert _text("{{ messages[0].a | tojson(indent=2) }}", msgs) == "[\n  1,\n  2\n]"
    assert _text("{{ messages[0].content | tojson(ensure_ascii=True) }}", msgs) == '"h\\u00e9 <b>"'


# JSON's values, and the few a request's JSON can hold that JSON text cannot say alike (NaN, the
# infinities, integers beyond 64 bits, lone surrogates)
_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.sampled_from(["", "null", "\ud800"])
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
    max_leaves=10,
)
_TOJSON_OPTIONS = st.fixed_dictionaries({}, optional={
    "indent": st.sampled_from([None, 2, "  "]), "sort_keys": st.booleans(), "ensure_ascii": st.booleans(),
    "separators": st.sampled_from([None, (",", ":"), (", ", ": ")]),
})


@settings(max_examples=300, deadline=None)
@given(values=st.lists(_JSON_VALUES, min_size=1, max_size=5), options=_TOJSON_OPTIONS)
def test_tojson_writes_what_json_dumps_writes_the_first_time_and_again(values, options):
    """tojson's output of an object or array seen before comes from a cache keyed by its content:
    every value, written again (after the others), is still json.dumps's."""
    for value in values + values:
        assert _to_json(value, **options) == json.dumps(value, **{"ensure_ascii": False, **options})


@pytest.mark.parametrize(("first", "then", "expected"), [
    ({"a": None}, {"a": float("nan")}, '{"a": NaN}'),  # orjson spells NaN null: never cached
    ([None], [float("inf")], "[Infinity]"),
    ({"a": 1}, {"a": 1.0}, '{"a": 1.0}'),
    ({"a": 1}, {"a": True}, '{"a": true}'),
    ({"a": [1, 2]}, {"a": (1, 2)}, '{"a": [1, 2]}'),
    ({"a": 2**64}, {"a": 2**64}, '{"a": 18446744073709551616}'),
])
def test_tojson_keeps_values_apart_that_one_spelling_could_join(first, then, expected):
    assert _to_json(first) == json.dumps(first, ensure_ascii=False)
    assert _to_json(then) == expected


def test_tojson_caches_a_tool():
    tool = {"type": "function", "function": {"name": "write_file", "parameters": {"type": "object"}}}
    _to_json(tool)
    assert json.dumps(tool) in _JSON_CACHE.values()
    assert _text("{{ tools[0] | tojson }}", tools=[dict(tool)]) == json.dumps(tool)


def test_tojson_caches_per_caller():
    """The cache is partitioned as the prefix cache is: one caller's tools are never another's hit."""
    tool = {"type": "function", "function": {"name": "per_caller_probe"}}
    for caller in ("key-a", "key-b", "key-a"):
        with prefix_cache.partition(caller):
            assert _to_json(tool) == json.dumps(tool)
    assert sorted(k[-1] for k in _JSON_CACHE if json.loads(k[0]) == tool) == ["key-a", "key-b"]


def test_raise_exception_becomes_prompt_error_with_the_template_message():
    with pytest.raises(PromptError, match="Only user and assistant roles are supported!"):
        _text("{{ raise_exception('Only user and assistant roles are supported!') }}")


def test_globals_and_block_options():
    assert len(_text("{{ strftime_now('%Y-%m-%d') }}")) == 10
    assert _text("{% set d = dict(a=1) %}{{ d.a }}") == "1"
    assert _text("{% for i in range(5) %}{% if i == 2 %}{% break %}{% endif %}{{ i }}{% endfor %}") == "01"
    # trim_blocks / lstrip_blocks
    assert _text("  {% if true %}\nx\n  {% endif %}\ny") == "x\ny"
    # {% generation %} (transformers' assistant-mask tag) renders its body
    assert _text("{% generation %}G{% endgeneration %}") == "G"
    with pytest.raises(PromptError):
        _text("{% set ns = namespace(_x=1) %}{{ ns._x }}")


def test_sandbox_refuses_unsafe_code():
    with pytest.raises(PromptError):
        _text("{{ messages.__class__.__mro__ }}{{ ''.__class__.__subclasses__() }}")


def _stock_sandbox(mutable: bool) -> type:
    from jinja2.sandbox import ImmutableSandboxedEnvironment, SandboxedEnvironment

    return SandboxedEnvironment if mutable else ImmutableSandboxedEnvironment


def _text_or_refusal(env, source: str, **values) -> str:
    """`source` rendered with `values`, or what refused it (the sandbox; a method's repr or
    `str.format_map` read as a call)."""
    try:
        return env.from_string(source).render(**values)
    except jinja2.exceptions.SecurityError as e:
        return f"refused: {e}"
    except (TypeError, ValueError) as e:
        return f"failed: {type(e).__name__}"


_ATTRIBUTE_NAMES = st.one_of(
    st.sampled_from(sorted(n for n in dir(dict) if not n.startswith("_")) + ["__class__", "__len__", "_x"]),
    st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True),
)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(present=st.lists(_ATTRIBUTE_NAMES, max_size=4), name=_ATTRIBUTE_NAMES, mutable=st.booleans())
def test_attribute_reads_on_dicts_are_the_stock_sandboxs(present, name, mutable):
    """`d.name` in a template, with `d` a plain dict or a subclass: the same text (the item, a
    method, undefined, or a security error) as jinja2's own sandbox gives, in both sandboxes."""
    from chatsieve.jinja_env import _environment

    class Sub(dict):
        pass

    source = "{{ d.NAME is defined }}|{{ d.NAME }}|{{ d.NAME | default('-') }}".replace("NAME", name)
    ours, stock = _environment(mutable), _stock_sandbox(mutable)()
    for d in ({k: f"v-{k}" for k in present}, Sub({k: f"v-{k}" for k in present})):
        assert _text_or_refusal(ours, source, d=d) == _text_or_refusal(stock, source, d=d), (name, present, type(d))


_VALUES = ["text", 3, 2.5, True, None, (1, 2), b"by", [1, 2], {"a": 1}]
_METHOD_NAMES = st.one_of(
    st.sampled_from(sorted({n for v in _VALUES for n in dir(v)} | {"mro", "_x", "format", "format_map"})),
    st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True),
)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(name=_METHOD_NAMES, which=st.integers(0, len(_VALUES) - 1), sub=st.booleans(), mutable=st.booleans())
def test_attribute_reads_on_builtin_data_are_the_stock_sandboxs(name, which, sub, mutable):
    """`x.name` in a template, with `x` a str, number, None, tuple, bytes, list or dict (or a
    subclass), asked twice (the second answer a kept one): the same text (the attribute, undefined,
    or a security error) as jinja2's own sandbox gives, in both sandboxes."""
    from chatsieve.jinja_env import _environment

    value = _VALUES[which]
    if sub and type(value) not in (bool, type(None)):  # (neither can be subclassed)
        value = type("Sub", (type(value),), {})(value)
    source = "{{ x.NAME is defined }}|{{ x.NAME }}".replace("NAME", name)
    ours, stock = _environment(mutable), _stock_sandbox(mutable)()
    first = _text_or_refusal(ours, source, x=value)
    assert first == _text_or_refusal(stock, source, x=value) == _text_or_refusal(ours, source, x=value), \
        (name, value, mutable)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(name=_METHOD_NAMES, mutable=st.booleans())
def test_attribute_reads_on_loops_and_namespaces_are_the_stock_sandboxs(name, mutable):
    """`loop.name` and `ns.name` (chatsieve's namespace), asked twice: the answer jinja2's own
    check gives for the same object and name."""
    from chatsieve.jinja_env import _environment

    env = _environment(mutable)
    stock = _stock_sandbox(mutable)
    objects = [env.globals["namespace"](a=1)]
    env.from_string("{% for i in [1] %}{{ grab(loop) }}{% endfor %}").render(grab=objects.append)
    assert [type(o).__name__ for o in objects] == ["_SafeNamespace", "LoopContext"]
    for obj in objects:
        want = stock.is_safe_attribute(env, obj, name, None)
        assert env.is_safe_attribute(obj, name, None) == want == env.is_safe_attribute(obj, name, None)


def test_mutating_templates_render_in_the_mutable_sandbox():
    tpl = "{% set xs = [] %}{% for m in messages %}{% do_nothing %}{% endfor %}"
    with pytest.raises(PromptError, match="syntax"):
        _text(tpl)
    tpl = "{% set xs = [] %}{% for m in messages %}{{ xs.append(m.content) or '' }}{% endfor %}{{ xs | join(',') }}"
    msgs = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    assert _text(tpl, msgs) == "a,b"
    assert msgs == [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]  # untouched


def test_messages_are_normalised_like_transformers():
    # None values are dropped, except content, which becomes "" (OpenAI sends content: null beside
    # tool_calls, and templates read message.content); reasoning fields are aliased
    tpl = (
        "{{ messages[0].content is defined }}|{{ messages[0].thinking }}|{{ messages[0].reasoning_content }}"
        "|{{ messages[0].refusal is defined }}"
    )
    msgs = [{"role": "assistant", "content": None, "reasoning": "r", "refusal": None}]
    ref = hf_tokenizer("qwen3").apply_chat_template(
        [{**msgs[0], "content": ""}], chat_template=tpl, tokenize=False
    )
    assert _text(tpl, msgs, add_generation_prompt=False) == ref == "True|r|r|False"


def test_errors_are_prompt_errors():
    with pytest.raises(PromptError, match="empty conversation"):
        render_text([], template="x")
    with pytest.raises(PromptError, match="no chat template"):
        render_text([{"role": "user", "content": "x"}])
    with pytest.raises(PromptError, match="not found"):
        render_text([{"role": "user", "content": "x"}], template="/nonexistent/template.jinja")
    with pytest.raises(PromptError, match="syntax"):
        render_text([{"role": "user", "content": "x"}], template="{% if %}")
    with pytest.raises(PromptError, match="unknown format 'gema4'"):
        render_text([{"role": "user", "content": "x"}], template="x", format="gema4")
    with pytest.raises(PromptError, match="needs a tokenizer"):
        render_prompt([{"role": "user", "content": "x"}], tokenizer=None, template="x")
    assert issubclass(PromptError, ValueError)


# -- Gemma 4 thinking off ---------------------------------------------------------------------

GEMMA_CONV = [{"role": "user", "content": "Hi"}]


def test_gemma4_thinking_off_drops_the_empty_thought_channel():
    tok, tpl = tokenizer("gemma4"), template("gemma4/chat_template.jinja")
    plain = render_prompt(GEMMA_CONV, tokenizer=tok, template=tpl)  # no format: exactly the template
    dropped = render_prompt(GEMMA_CONV, tokenizer=tok, template=tpl, format="gemma4")
    kept = render_prompt(GEMMA_CONV, tokenizer=tok, template=tpl, format="gemma4", keep_empty_thinking=True)
    assert plain.text == kept.text == "<bos><|turn>user\nHi<turn|>\n<|turn>model\n" + GEMMA4_EMPTY_THOUGHT
    assert dropped.text == "<bos><|turn>user\nHi<turn|>\n<|turn>model\n"
    assert plain.token_ids == kept.token_ids
    assert dropped.token_ids == tok.encode(dropped.text)
    assert kept.token_ids[: len(dropped.token_ids)] == dropped.token_ids
    assert [tok.id_to_token(i) for i in kept.token_ids[len(dropped.token_ids) :]] == [
        "<|channel>",
        "thought",
        "\n",
        "<channel|>",
    ]
    off = render_prompt(GEMMA_CONV, tokenizer=tok, template=tpl, format="gemma4", enable_thinking=False)
    assert off.text == dropped.text
    # thinking on: the template injects nothing, and nothing is removed
    on = render_prompt(GEMMA_CONV, tokenizer=tok, template=tpl, format="gemma4", enable_thinking=True)
    assert on.text == "<bos><|turn>system\n<|think|>\n<turn|>\n<|turn>user\nHi<turn|>\n<|turn>model\n"
    assert render_text(GEMMA_CONV, tokenizer=tok, template=tpl, format="gemma4") == dropped.text


# -- truncation and tokenizer controls --------------------------------------------------------


def test_truncation_matches_transformers_on_both_sides():
    conv = conversation(False, False)
    tok, hf = tokenizer("qwen3"), hf_tokenizer("qwen3")
    tpl = template("qwen3/chat_template.jinja")
    full = render_prompt(conv, tokenizer=tok, template=tpl)
    for side in ("right", "left"):
        hf.truncation_side = side
        ref = hf.apply_chat_template(
            conv, chat_template=tpl, add_generation_prompt=True, truncation=True, max_length=20
        )["input_ids"]
        t = Tokenizer(tok.hf, config={**tok.config, "truncation_side": side})
        p = render_prompt(conv, tokenizer=t, template=tpl, truncation=True, max_length=20)
        assert p.token_ids == ref
        assert p.text == full.text
    hf.truncation_side = "right"
    # no truncation unless asked; default limit is the tokenizer's model_max_length
    assert render_prompt(conv, tokenizer=tok, template=tpl, max_length=5).token_ids == full.token_ids
    small = Tokenizer(tok.hf, config={**tok.config, "model_max_length": 7})
    assert render_prompt(conv, tokenizer=small, template=tpl, truncation=True).token_ids == full.token_ids[:7]


def test_truncation_clips_isolated_spans():
    tok = tokenizer("qwen3")
    tpl = "{{ messages[0].content }}"
    conv = [{"role": "user", "content": "a <tool_call> b <tool_call>"}]
    full = render_prompt(conv, tokenizer=tok, template=tpl, markers=["<tool_call>"])
    assert len(full.isolated_spans) == 2
    (s1, e1), (s2, e2) = full.isolated_spans
    cut = render_prompt(
        conv, tokenizer=tok, template=tpl, markers=["<tool_call>"], truncation=True, max_length=s1 + 2
    )
    assert cut.token_ids == full.token_ids[: s1 + 2]
    assert cut.isolated_spans == [(s1, s1 + 2)]
    t = Tokenizer(tok.hf, config={**tok.config, "truncation_side": "left"})
    left = render_prompt(
        conv,
        tokenizer=t,
        template=tpl,
        markers=["<tool_call>"],
        truncation=True,
        max_length=len(full.token_ids) - s2,
    )
    assert left.token_ids == full.token_ids[s2:]
    assert left.isolated_spans == [(0, e2 - s2)]


@pytest.mark.parametrize(
    "option",
    [
        {"padding": True},
        {"padding": "max_length"},
        {"return_tensors": "np"},
        {"tokenizer_kwargs": {"add_special_tokens": True}},
    ],
)
def test_piecewise_impossible_options_are_rejected(option):
    with pytest.raises(PromptError, match="cannot be reproduced piecewise"):
        render_prompt(
            [{"role": "user", "content": "x"}], tokenizer=tokenizer("qwen3"), template="x", **option
        )
    # empty tokenizer_kwargs / falsy padding are fine
    render_prompt(
        [{"role": "user", "content": "x"}],
        tokenizer=tokenizer("qwen3"),
        template="x",
        padding=False,
        tokenizer_kwargs={},
    )


def test_prompt_is_a_frozen_value():
    p = render_prompt([{"role": "user", "content": "x"}], tokenizer=tokenizer("qwen3"), template="{{ 'x' }}")
    assert p == Prompt(text="x", token_ids=tokenizer("qwen3").encode("x"), isolated_spans=[])
    with pytest.raises(AttributeError):
        p.text = "y"  # type: ignore[misc]


# -- chatsieve render -------------------------------------------------------------------------


def test_render_main_prints_text_and_ids(tmp_path, capsys):
    conv = conversation(False, False)
    (tmp_path / "m.json").write_text(json.dumps(conv))
    (tmp_path / "t.json").write_text(json.dumps(TOOLS))
    rc = render_main(
        [
            "--model-dir",
            str(model_path("qwen3")),
            "--format",
            "qwen3",
            "--tools",
            str(tmp_path / "t.json"),
            "--thinking",
            "off",
            str(tmp_path / "m.json"),
        ]
    )
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    expected = render_prompt(
        conv, tokenizer=tokenizer("qwen3"), tools=TOOLS, format="qwen3", enable_thinking=False
    )
    assert out["text"] == expected.text
    assert out["token_ids"] == expected.token_ids
    # {"messages": ..., "tools": ...} in one file
    (tmp_path / "both.json").write_text(json.dumps({"messages": conv, "tools": TOOLS}))
    assert (
        render_main(
            ["--model-dir", str(model_path("qwen3")), "--thinking", "off", str(tmp_path / "both.json")]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out)["token_ids"] == expected.token_ids


@pytest.mark.parametrize("case", ["missing-file", "bad-json", "bad-dir", "template-error"])
def test_render_main_errors_exit_2_with_one_line(tmp_path, capsys, case):
    msgs = tmp_path / "m.json"
    msgs.write_text(json.dumps([{"role": "user", "content": "x"}]))
    args = ["--model-dir", str(model_path("qwen3")), str(msgs)]
    if case == "missing-file":
        args[-1] = str(tmp_path / "nope.json")
    elif case == "bad-json":
        msgs.write_text("{not json")
    elif case == "bad-dir":
        args[1] = str(tmp_path / "no-model")
    else:
        msgs.write_text(
            json.dumps(
                [
                    {"role": "user", "content": "x"},
                    {"role": "user", "content": "y"},
                    {"role": "bogus", "content": "z"},
                ]
            )
        )
        (tmp_path / "t.jinja").write_text("{{ raise_exception('bad role') }}")
        args[:0] = ["--template", str(tmp_path / "t.jinja")]
    assert render_main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("chatsieve render: ") and err.count("\n") == 1


def test_jinja_errors_are_wrapped_not_leaked():
    with pytest.raises(PromptError) as info:
        _text("{{ messages[0].content.nope() }}")
    assert not isinstance(info.value, jinja2.TemplateError)


def test_message_objects_and_tool_validation():
    import dataclasses

    @dataclasses.dataclass
    class Msg:
        role: str
        content: str

    assert _text("{{ messages[0].role }}:{{ messages[0].content }}", [Msg("user", "hi")]) == "user:hi"
    with pytest.raises(PromptError, match="tools must be a list of OpenAI tool dicts"):
        _text("x", tools=[len])
    with pytest.raises(PromptError, match="messages must be a list"):
        render_text("hello", template="x")
