"""`chatsieve serve` with no --format: the format comes from the model's chat template (three real
model directories), is logged and shown in /v1/models, and parses the engine's output; a template
no format writes is a start-up error naming the nearest formats; --format-file serves a family
described in a file."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import httpx
import models
import pytest
from models import DEV_INSTALL, require_module

require_module("starlette", DEV_INSTALL)

from fake_engines import FakeEngine, Script, serve_process  # noqa: E402

import chatsieve  # noqa: E402
from chatsieve.server import serve_main  # noqa: E402

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]  # fmt: skip

# model directory -> (the format auto must choose, what the model generates)
MODELS = {
    "qwen3": ("qwen3", '<think>Weather wanted.</think>\n\n<tool_call>\n{"name": "get_weather", '
              '"arguments": {"city": "Paris"}}\n</tool_call><|im_end|>'),
    # R1's template ignores tools (a request with them is refused), so no call is offered: an answer
    "deepseek": ("deepseek_r1", "Weather wanted.</think>It is sunny in Paris.<｜end▁of▁sentence｜>"),
    "gpt-oss": ("gpt_oss", "<|channel|>analysis<|message|>Weather wanted.<|end|><|start|>assistant to=functions"
                '.get_weather<|channel|>commentary json<|message|>{"city": "Paris"}<|call|>'),
}


@pytest.mark.parametrize("directory", sorted(MODELS))
def test_serve_without_format_detects_it(directory):
    want, output = MODELS[directory]
    model_dir = models.model_path(directory)
    tok = chatsieve.load_tokenizer(model_dir)
    engine = FakeEngine(tok.decode, {"weather in Paris": Script(tok.encode(output), batch=2)})
    with engine.serving() as backend:
        args = ["--model-dir", str(model_dir), "--backend", backend.url, "--served-model-name", "m"]
        with serve_process(*args, "--log-level", "info", timeout=120) as (proc, _, url):
            listed = httpx.get(url + "/v1/models", timeout=30).json()["data"][0]
            assert listed["chatsieve"]["format"] == want and listed["chatsieve"]["source"] == "auto"
            assert any("reads the probe call back" in e for e in listed["chatsieve"]["evidence"])
            body = {"model": "m", "messages": [{"role": "user", "content": "What is the weather in Paris?"}]}
            if directory != "deepseek":
                body["tools"] = TOOLS
            r = httpx.post(url + "/v1/chat/completions", json=body, timeout=60)
            assert r.status_code == 200, r.text
            msg = r.json()["choices"][0]["message"]
            assert msg["reasoning_content"] == "Weather wanted."
            if directory == "deepseek":
                assert msg["content"] == "It is sunny in Paris." and not msg.get("tool_calls")
            else:
                (call,) = msg["tool_calls"]
                assert call["function"]["name"] == "get_weather"
                assert json.loads(call["function"]["arguments"]) == {"city": "Paris"}
            proc.terminate()
            log = proc.stderr.read().decode()
    assert f"format: {want} [auto]" in log


def test_an_unplaceable_template_is_a_start_up_error(tmp_path, capsys):
    d = tmp_path / "model"
    shutil.copytree(models.model_path("qwen3"), d)
    (d / "tokenizer_config.json").write_text(json.dumps({
        **json.loads((d / "tokenizer_config.json").read_text(encoding="utf-8")),
        "chat_template": models.model_path("llama.cpp/models/templates/upstage-Solar-Open-100B.jinja").read_text(
            encoding="utf-8")}), encoding="utf-8")
    assert serve_main(["--model-dir", str(d), "--backend", "http://127.0.0.1:9"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("chatsieve serve: error: --format auto: no registered format writes") and "nearest:" in err
    assert err.count("\n") == 1


def test_format_file_is_served_by_name(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"name": "x", "calls": {"codec": "exec"}}), encoding="utf-8")
    assert serve_main(["--model-dir", str(models.model_path("qwen3")), "--format-file", str(bad),
                       "--backend", "http://127.0.0.1:9"]) == 2
    assert "--format-file:" in capsys.readouterr().err and "calls.codec" in capsys.readouterr().err + "calls.codec"
    both = ["--model-dir", str(models.model_path("qwen3")), "--format", "qwen3", "--format-file",
            str(Path(__file__).parent / "format_files" / "qwen3.yaml"), "--backend", "http://127.0.0.1:9"]
    assert serve_main(both) == 2
    assert "not both" in capsys.readouterr().err


def test_format_file_serves(tmp_path):
    model_dir = models.model_path("qwen3")
    tok = chatsieve.load_tokenizer(model_dir)
    out = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>'
    engine = FakeEngine(tok.decode, {"weather in Paris": Script(tok.encode(out))})
    spec = Path(__file__).parent / "format_files" / "qwen3.yaml"
    with engine.serving() as backend:
        args = ["--model-dir", str(model_dir), "--format-file", str(spec), "--backend", backend.url,
                "--served-model-name", "m"]
        with serve_process(*args, "--log-level", "warning", timeout=120) as (_, _, url):
            listed = httpx.get(url + "/v1/models", timeout=30).json()["data"][0]["chatsieve"]
            assert listed == {"format": "qwen3_file", "source": "--format-file", "evidence": [str(spec)]}
            body = {"model": "m", "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
                    "tools": TOOLS, "chat_template_kwargs": {"enable_thinking": False}}
            msg = httpx.post(url + "/v1/chat/completions", json=body, timeout=60).json()["choices"][0]["message"]
            assert [c["function"]["name"] for c in msg["tool_calls"]] == ["get_weather"]
