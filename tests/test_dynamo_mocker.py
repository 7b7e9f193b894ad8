"""chatsieve inside NVIDIA Dynamo, two processes: `python -m dynamo.mocker` as the worker and the
docs/integrations.md's launcher (`python -m chatsieve.integrations.dynamo --format qwen3 ... --router-mode kv`) as
the frontend, on file discovery and TCP inside a private network namespace.

The mocker replays exact token ids (real Qwen3 tokenizer) from a Mooncake trace, picked per request
by the annotation `output_replay_id:KEY` that the client sends in `nvext.annotations` and chatsieve
passes on; its KV events feed the frontend's KV router. Answers, streamed and not, must be the
message chatsieve's StreamParser gives for the same ids and prompt.
"""

from __future__ import annotations

import json
import sys

import pytest

from chatsieve import StreamParser, render_prompt
from chatsieve.fixtures import encode_segments
from chatsieve.tokenizer import load_tokenizer
from tests import dynamo_harness as harness
from tests.readme_recipes import command, readme_blocks
from tests.test_dynamo import ECHO, MESSAGES, TOOLS, _fold, _message, _whole

RECIPE = "Inside NVIDIA Dynamo: chatsieve as the frontend's chat processor"  # docs/integrations.md
REPLAYS = {
    "call": [('<think>\nI need the weather.\n</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": '
              '{"city": "Paris"}}\n</tool_call><|im_end|>', False)],
    "echo": [("<think>\nThe file says:\n</think>\n\nThe tool returned ", False), (ECHO, True), ("<|im_end|>", False)],
    "plain": [("<think>\n\n</think>\n\nBonjour, Kraków ☔ — done.<|im_end|>", False)],
}  # fmt: skip


@pytest.fixture(scope="module")
def mocker_run(tmp_path_factory):
    harness.require_dynamo()
    harness.require_netns()
    tmp = tmp_path_factory.mktemp("dynamo-mocker")
    directory = harness.model_dir(tmp / "models", "qwen3")
    tok = load_tokenizer(directory)
    ids = {key: encode_segments(tok, segments) for key, segments in REPLAYS.items()}
    trace = tmp / "trace.jsonl"
    with trace.open("w", encoding="utf-8") as f:
        for n, (key, out) in enumerate(ids.items()):
            line = {"timestamp": n, "input_length": 64, "output_length": len(out), "hash_ids": [n + 1],
                    "output_token_ids": out, "request_id": key}  # fmt: skip
            f.write(json.dumps(line) + "\n")
    (port,) = harness.free_ports(1)
    common = ["--discovery-backend", "file", "--request-plane", "tcp", "--event-plane", "zmq"]
    mocker = [sys.executable, "-m", "dynamo.mocker", "--model-path", str(directory), "--model-name", "qwen3",
              "--response-replay-trace-path", str(trace), "--speedup-ratio", "100", *common]  # fmt: skip
    launcher = command(readme_blocks(RECIPE)[0], "python -m chatsieve.integrations.dynamo")
    assert launcher == ["--format", "qwen3", "--router-mode", "kv", "--http-port", "8000"]  # as the docs write it
    frontend = [sys.executable, "-m", "chatsieve.integrations.dynamo", *launcher[:-2],
                "--http-host", "127.0.0.1", "--http-port", str(port), *common]  # fmt: skip
    requests, index = [], {}
    for key in ids:
        for stream in (False, True):
            index[(key, stream)] = len(requests)
            body = {"model": "qwen3", "messages": MESSAGES, "tools": TOOLS, "stream": stream,
                    "nvext": {"annotations": [f"output_replay_id:{key}"]}}  # fmt: skip
            if stream:
                body["stream_options"] = {"include_usage": True}
            requests.append({"port": "chatsieve", "body": body})
    env = {"DYN_FILE_KV": str(tmp / "discovery"), "DYN_LOG": "warn,dynamo_llm::kv_router=info"}
    out = harness.run_scenario(tmp, [mocker, frontend], {"chatsieve": port}, {"chatsieve": ["qwen3"]}, requests,
                               tmp / "no-worker-log.jsonl", env=env)  # fmt: skip
    results = {k: out["results"][i] for k, i in index.items()}
    return {"results": results, "ids": ids, "tok": tok, "app_log": out["app_log"]}


def _want(tok, ids):
    prompt = render_prompt(MESSAGES, tokenizer=tok, tools=TOOLS, format="qwen3")
    parser = StreamParser("qwen3", tools=TOOLS, prompt=prompt.text, tokenizer=tok, stop_token_ids=sorted(tok.stop_token_ids))
    parser.feed(token_ids=ids)
    parser.finish("stop")
    return parser.message, len(prompt.token_ids)


@pytest.mark.parametrize("key", sorted(REPLAYS))
def test_mocker_replay_through_the_kv_router_matches_chatsieve_parse(mocker_run, key):
    want, prompt_tokens = _want(mocker_run["tok"], mocker_run["ids"][key])
    answers = []
    for stream in (False, True):
        result = mocker_run["results"][(key, stream)]
        assert result["ok"], result
        got = _fold(result["chunks"]) if stream else _whole(result["completion"])
        assert {k: got[k] for k in ("content", "reasoning", "calls")} == _message(want)
        assert got["usage"]["prompt_tokens"] == prompt_tokens
        answers.append(got)
    assert answers[0] == answers[1]


def test_mocker_echoed_call_stays_text(mocker_run):
    for stream in (False, True):
        got = _fold(mocker_run["results"][("echo", stream)]["chunks"]) if stream else _whole(
            mocker_run["results"][("echo", stream)]["completion"]
        )
        assert got["calls"] == [] and ECHO in got["content"]


def test_requests_went_through_the_kv_router(mocker_run):
    log = mocker_run["app_log"]
    assert "kv_router.route_request" in log and "router_mode=RoundRobin" not in log, log[-2000:]
