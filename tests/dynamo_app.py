"""A one-process Dynamo deployment for tests: a fixture worker and two frontends (run it inside
`unshare -n`, see tests/dynamo_harness.py).

    python tests/dynamo_app.py CONFIG.json

CONFIG: {"models": [{"name", "path", "format", "tool_call_parser", "reasoning_parser"}],
"replays": {KEY: {"ids": [...], "finish": "stop" | "length" | null, "delay": seconds,
"error_after": n}}, "chatsieve_port", "native_port", "log": PATH}. Both frontends share one
DistributedRuntime (`mem` discovery, TCP on 127.0.0.1) and the worker: the first runs chatsieve's
chat engine factory, the second Dynamo's own Rust preprocessor and parsers (the worker's
advertised tool_call_parser / reasoning_parser), so the same ids go through both.

The worker replays the ids of the replay named by the request's annotation `replay:KEY`
(`nvext.annotations`), one token per item, and logs each request it gets (and whether it was
cancelled) as a JSON line to CONFIG["log"].
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

for _var in ("DYN_TCP_RPC_HOST", "DYN_TCP_RESPONSE_STREAM_HOST", "DYN_EVENT_PLANE_HOST", "DYN_HTTP_RPC_HOST"):
    os.environ.setdefault(_var, "127.0.0.1")
os.environ.setdefault("DYN_SELF_HOST_METADATA", "0")

import uvloop  # noqa: E402
from dynamo.llm import (  # noqa: E402
    EngineType,
    EntrypointArgs,
    ModelInput,
    ModelRuntimeConfig,
    ModelType,
    WorkerType,
    make_engine,
    register_model,
    run_input,
)
from dynamo.runtime import DistributedRuntime  # noqa: E402

from chatsieve.integrations.dynamo import ChatsieveEngineFactory, DynamoOptions  # noqa: E402


class Worker:
    def __init__(self, replays: dict, log_path: str) -> None:
        self.replays = replays
        self.log_path = log_path

    def _log(self, record: dict) -> None:
        with open(self.log_path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")

    async def generate(self, request: dict, context=None):
        key = next(
            (a.split(":", 1)[1] for a in request.get("annotations") or () if a.startswith("replay:")), None
        )
        record = {"key": key, "request": request, "cancelled": False, "sent": 0}
        replay = self.replays.get(key)
        if replay is None:
            record["error"] = "unknown replay"
            self._log(record)
            yield {"status": "error", "message": f"no replay named {key!r}"}
            return
        ids = replay["ids"]
        try:
            for i, tid in enumerate(ids):
                if context is not None and context.is_stopped():
                    record["cancelled"] = True
                    return
                if replay.get("error_after") is not None and i == replay["error_after"]:
                    raise RuntimeError("fixture worker: injected failure")
                if replay.get("delay"):
                    await asyncio.sleep(replay["delay"])
                last = i == len(ids) - 1
                out: dict = {"token_ids": [tid]}
                if last and replay.get("finish"):
                    out["finish_reason"] = replay["finish"]
                record["sent"] = i + 1
                yield out
            if not ids and replay.get("finish"):
                yield {"token_ids": [], "finish_reason": replay["finish"]}
        except (asyncio.CancelledError, GeneratorExit):
            record["cancelled"] = True
            raise
        finally:
            if context is not None and context.is_stopped():
                record["cancelled"] = True
            self._log(record)


async def main(config_path: str) -> None:
    with open(config_path, encoding="utf-8") as f:
        config = json.load(f)
    loop = asyncio.get_running_loop()
    runtime = DistributedRuntime(loop, "mem", "tcp")
    worker = Worker(config["replays"], config["log"])
    serving = []
    for i, model in enumerate(config["models"]):
        endpoint = runtime.endpoint(f"test.worker{i}.generate")
        rc = ModelRuntimeConfig()
        if model.get("tool_call_parser"):
            rc.tool_call_parser = model["tool_call_parser"]
        if model.get("reasoning_parser"):
            rc.reasoning_parser = model["reasoning_parser"]
        await register_model(
            ModelInput.Tokens,
            ModelType.Chat,
            endpoint,
            model["path"],
            model["name"],
            worker_type=WorkerType.Aggregated,
            runtime_config=rc,
        )
        serving.append(asyncio.ensure_future(endpoint.serve_endpoint(worker.generate)))
    factory = ChatsieveEngineFactory(DynamoOptions(format=config.get("format")))
    frontends = []
    for port, chat_engine_factory in (
        (config["chatsieve_port"], factory.chat_engine_factory),
        (config.get("native_port"), None),
    ):
        if port is None:
            continue
        args = EntrypointArgs(
            EngineType.Dynamic, http_host="127.0.0.1", http_port=port, chat_engine_factory=chat_engine_factory
        )
        engine = await make_engine(runtime, args)
        frontends.append(asyncio.ensure_future(run_input(runtime, "http", engine)))
    await asyncio.gather(*serving, *frontends)


if __name__ == "__main__":
    uvloop.run(main(sys.argv[1]))
