"""`chatsieve serve --gguf PATH` alone: the tokenizer and chat template come from the GGUF
(llama.cpp's Gemma 4 vocabulary file), in front of a llama.cpp-protocol engine."""

from __future__ import annotations

import json
import subprocess
import sys

import httpx
import models
import pytest
from models import DEV_INSTALL, require_module

require_module("starlette", DEV_INSTALL)
require_module("uvicorn", DEV_INSTALL)

from fake_engines import FakeEngine, Script, ServerThread, serve_process  # noqa: E402
from starlette.responses import JSONResponse  # noqa: E402
from test_gguf import write_gguf  # noqa: E402

from chatsieve.server import serve_main  # noqa: E402

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]


@pytest.mark.parametrize("how", ["--gguf", "/props"])
def test_serve_with_only_the_gguf(how):
    """--gguf PATH, or nothing: a local llama-server's /props names the GGUF it runs."""
    path = models.llama_cpp_models() / "ggml-vocab-gemma-4.gguf"
    tok = models.gguf_tokenizer(path)
    # what the model generates: a Gemma 4 tool call, delimiters as their own ids
    ids = [tok.single_token_id("<|tool_call>"), *tok.encode("call:get_weather{city:"),
           tok.single_token_id('<|"|>'), *tok.encode("Paris"), tok.single_token_id('<|"|>'),
           *tok.encode("}"), tok.single_token_id("<tool_call|>"), tok.single_token_id("<turn|>")]  # fmt: skip
    engine = FakeEngine(tok.decode, {"weather in Paris": Script(ids, batch=3)})

    async def props(request):
        return JSONResponse({"model_path": str(path), "n_ctx": 4096})

    engine.app.add_route("/props", props, methods=["GET"])
    with ServerThread(engine.app) as backend:
        args = ["--format", "gemma4", "--backend", backend.url, "--backend-kind", "llamacpp"]
        args += ["--gguf", str(path)] if how == "--gguf" else []
        with serve_process(*args, "--log-level", "warning", timeout=120) as (_, _, url):
            models_list = httpx.get(url + "/v1/models", timeout=30).json()
            assert [m["id"] for m in models_list["data"]] == ["ggml-vocab-gemma-4.gguf"]
            body = {
                "model": "ggml-vocab-gemma-4.gguf",
                "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
                "tools": TOOLS,
            }
            r = httpx.post(url + "/v1/chat/completions", json=body, timeout=60)
            assert r.status_code == 200, r.text
            msg = r.json()["choices"][0]["message"]
            (call,) = msg["tool_calls"]
            assert call["function"]["name"] == "get_weather"
            assert json.loads(call["function"]["arguments"]) == {"city": "Paris"}
            assert r.json()["choices"][0]["finish_reason"] == "tool_calls"
    # the prompt was rendered with the GGUF's own chat template, tools declared in it
    (route, payload), = [r for r in engine.requests if r[0] != "/props"]
    prompt = tok.decode(payload["prompt"])
    assert route == "/completion"
    assert prompt.startswith("<bos><|turn>system\n") and "<|tool>declaration:get_weather" in prompt
    assert prompt.endswith("<|turn>model\n")


def test_serve_argument_errors(tmp_path, capsys):
    base = ["--format", "gemma4", "--backend", "http://127.0.0.1:9"]
    assert serve_main(base) == 2
    assert "give --model-dir" in capsys.readouterr().err
    assert serve_main([*base, "--backend-kind", "llamacpp"]) == 2  # no llama-server answers /props
    assert "its /props names a file readable here" in capsys.readouterr().err
    assert serve_main(["--gguf", str(tmp_path / "none.gguf"), *base]) == 2
    assert "is not a file" in capsys.readouterr().err
    bert = models.llama_cpp_models() / "ggml-vocab-bert-bge.gguf"
    assert serve_main(["--gguf", str(bert), *base]) == 2
    err = capsys.readouterr().err
    assert f"cannot load the tokenizer from {bert}" in err and "tokenizer type 'bert'" in err
    bare = tmp_path / "bare.gguf"  # a vocabulary without a chat template
    write_gguf(bare, {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "gpt-2",
                      "tokenizer.ggml.tokens": ["a", "b", "ab"], "tokenizer.ggml.merges": ["a b"]})  # fmt: skip
    assert serve_main(["--gguf", str(bare), *base]) == 2
    err = capsys.readouterr().err
    assert f"the GGUF {bare} carries no chat template" in err and "give --chat-template FILE" in err


@pytest.mark.parametrize(
    ("kind", "answers", "wanted"),
    [
        ("vllm", {"/v1/models": {"data": [{"id": "m", "owned_by": "llamacpp"}]}}, "llamacpp"),
        ("vllm", {"/props": {"default_generation_settings": {}, "model_path": "/nowhere.gguf"}}, "llamacpp"),
        ("llamacpp", {"/v1/models": {"data": [{"id": "m", "owned_by": "vllm"}]}}, "vllm"),
        ("sglang", {"/v1/models": {"data": [{"id": "m", "owned_by": "vllm"}]}}, "vllm"),
        ("llamacpp", {"/v1/models": {"data": [{"id": "m", "owned_by": "sglang"}]}}, "sglang"),
    ],
)
def test_an_engine_of_another_kind_is_one_line_at_start_up(kind, answers, wanted, capsys):
    """Forgetting --backend-kind: the engine is asked what it is, and the server does not start."""
    engine = FakeEngine(str, {})
    for path, body in answers.items():
        engine.app.add_route(path, lambda request, body=body: JSONResponse(body), methods=["GET"])
    with ServerThread(engine.app) as backend:
        argv = ["--model-dir", str(models.model_path("qwen3")), "--format", "qwen3", "--backend", backend.url]
        assert serve_main([*argv, "--backend-kind", kind]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"chatsieve serve: error: the engine at {backend.url} is ") and line.endswith(
        f"give --backend-kind {wanted}"
    )


def test_a_vocabulary_mismatch_is_one_line_at_start_up(capsys):
    """The engine runs another model than the tokenizer's: one line saying what and what to do."""
    gguf = models.llama_cpp_models() / "ggml-vocab-gemma-4.gguf"
    engine = FakeEngine(str, {})
    engine.app.add_route("/props", lambda request: JSONResponse({"model_path": str(gguf)}), methods=["GET"])
    with ServerThread(engine.app) as backend:
        argv = ["--model-dir", str(models.model_path("qwen3")), "--format", "qwen3", "--backend", backend.url]
        assert serve_main([*argv, "--backend-kind", "llamacpp"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("chatsieve serve: error: refusing to serve:") and "vocabulary size differs" in line


def test_serve_without_the_server_extra_says_what_to_install(tmp_path):
    """`pip install -e .` alone, then `chatsieve serve`: one line naming the extra (a module of
    the extra hidden from the import system stands for a core-only install)."""
    code = (
        "import sys; sys.modules['anyio'] = None\n"
        "from chatsieve.server import serve_main\n"
        "sys.exit(serve_main(['--model-dir', '.', '--format', 'qwen3', '--backend', 'http://127.0.0.1:9']))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        "chatsieve serve: error: import of anyio halted; None in sys.modules: `chatsieve serve` needs the server "
        "extra; install it with pip install -e '.[server]' in a clone of chatsieve"
    ]
