"""Runs requests against tests/dynamo_app.py with the `openai` client, inside the same network
namespace (see tests/dynamo_harness.py), and prints what came back as JSON.

    python tests/dynamo_scenario.py SCENARIO.json

SCENARIO: {"apps": [argv of each process of the deployment], "ports": {NAME: port}, "models": {NAME: [model names]},
"requests": [{"port": NAME, "body": {...}, "cancel_after": n}], "log": PATH, "timeout": s}.
`cancel_after` closes a stream after n chunks (a client that goes away). Output: {"results":
[{"ok": true, "completion": {...}} | {"ok": true, "chunks": [...]} | {"ok": false, "status",
"error"}], "worker_log": [...], "app_log": "..."}.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request


def _wait(ports: dict, models: dict, app: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    pending = dict(ports)
    while pending:
        if app.poll() is not None:
            raise RuntimeError(f"the Dynamo deployment exited with status {app.returncode}")
        for name, port in list(pending.items()):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2) as r:
                    listed = {m["id"] for m in json.load(r)["data"]}
                if set(models[name]) <= listed:
                    del pending[name]
            except OSError:
                pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"the Dynamo frontends did not list their models within {timeout}s: {pending}")
        time.sleep(0.2)


def _run(client, spec: dict) -> dict:
    import openai

    body = dict(spec["body"])
    extra = {k: body.pop(k) for k in list(body) if k not in _OPENAI_ARGS}
    try:
        if body.get("stream"):
            chunks = []
            stream = client.chat.completions.create(**body, extra_body=extra or None)
            for chunk in stream:
                chunks.append(chunk.model_dump(exclude_unset=True))
                if spec.get("cancel_after") is not None and len(chunks) >= spec["cancel_after"]:
                    stream.close()
                    time.sleep(0.5)  # let the frontend see the disconnect before the next request
                    break
            return {"ok": True, "chunks": chunks}
        completion = client.chat.completions.create(**body, extra_body=extra or None)
        return {"ok": True, "completion": completion.model_dump(exclude_unset=True)}
    except openai.APIStatusError as e:
        return {"ok": False, "status": e.status_code, "error": _body(e)}
    except openai.APIError as e:  # an error event inside a stream
        return {"ok": False, "status": None, "error": str(e), "chunks": locals().get("chunks")}


_OPENAI_ARGS = {
    "messages", "model", "stream", "tools", "tool_choice", "max_tokens", "max_completion_tokens", "temperature",
    "top_p", "stop", "seed", "logprobs", "top_logprobs", "stream_options", "parallel_tool_calls",
    "response_format", "presence_penalty", "frequency_penalty", "n", "reasoning_effort",
}  # fmt: skip


def _body(e) -> object:
    try:
        return e.response.json()
    except Exception:
        return e.response.text


def main(path: str) -> None:
    import openai

    with open(path, encoding="utf-8") as f:
        scenario = json.load(f)
    log = open(scenario["app_log"], "w", encoding="utf-8")
    apps = [subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT) for argv in scenario["apps"]]
    try:
        for app in apps:
            _wait(scenario["ports"], scenario["models"], app, scenario.get("timeout", 60))
        clients = {
            name: openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0, timeout=60)
            for name, port in scenario["ports"].items()
        }
        results = [_run(clients[spec["port"]], spec) for spec in scenario["requests"]]
        time.sleep(0.3)  # the worker logs a cancelled stream as it unwinds
    finally:
        for app in apps:
            app.terminate()
        for app in apps:
            try:
                app.wait(10)
            except subprocess.TimeoutExpired:
                app.kill()
                app.wait()
        log.close()
    worker_log = []
    try:
        with open(scenario["log"], encoding="utf-8") as f:
            worker_log = [json.loads(line) for line in f if line.strip()]
    except OSError:
        pass
    json.dump({"results": results, "worker_log": worker_log}, sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1])
