"""Drives SGLang's real OpenAIServingChat with chatsieve's plugin loaded; run in the SGLang venv.

    python tests/sglang_driver.py JOBS.json RESULTS.json

SGLang's own pieces do the work: `load_plugins()` finds chatsieve through its `sglang.srt.plugins`
entry point and applies its hooks, `ServerArgs` (published with SGLang's own test override) holds
the parser flags, `OpenAIServingChat.handle_request` takes each request (streaming and not). Only
the TokenizerManager is a stand-in: it records the prompt SGLang sends to the engine and replays
the job's exact output token ids, `step` tokens per engine step (or cut at `cuts`), as SGLang's
scheduler reports them.
Each result holds the prompt ids, the SSE data chunks or the response body, or the error.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from types import SimpleNamespace
from typing import Any


def _argparse_check(argv: list[str]) -> dict:
    """SGLang's own argument parser, as `python -m sglang.launch_server` builds it."""
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    try:
        ns = parser.parse_args(argv)
    except SystemExit as e:
        return {"ok": False, "exit": e.code}
    return {"ok": True, "tool_call_parser": ns.tool_call_parser, "reasoning_parser": ns.reasoning_parser}


class StandInTokenizerManager:
    """What OpenAIServingChat reads of SGLang's TokenizerManager; generate_request replays ids."""

    def __init__(
        self, server_args: Any, tokenizer: Any, model_path: str, model_type: str, multimodal: bool = False
    ) -> None:
        from sglang.srt.runtime_context import get_context

        self.server_args = server_args
        self.tokenizer = tokenizer
        self.model_path = model_path
        self.served_model_name = "test-model"
        self.processor = None  # a text model: no multimodal processor
        self.request_logger = SimpleNamespace(log_requests=False, log_requests_level=0)
        self.model_config = SimpleNamespace(
            hf_config=SimpleNamespace(architectures=["StandInForCausalLM"], model_type=model_type),
            is_multimodal=multimodal,
            get_default_sampling_params=lambda: {},
        )
        self._context = get_context()
        self.job: dict = {}
        self.sent: list[Any] = []

    def config_value(self, name: str) -> Any:
        return self._context.config_leaf(name)

    def create_abort_task(self, _request: Any) -> None:
        return None

    async def generate_request(self, adapted_request: Any, raw_request: Any = None):
        self.sent.append(adapted_request)
        ids = list(self.job["output_ids"])
        prompt_tokens = len(adapted_request.input_ids or ())
        finish = self.job.get("finish") or {"type": "stop", "matched": None}
        incremental = bool(self.job.get("incremental"))
        base = {
            "id": "chatcmpl-stand-in",
            "prompt_tokens": prompt_tokens,
            "cached_tokens": 0,
            "weight_version": "default",
        }
        if not adapted_request.stream:
            yield {
                "text": self.tokenizer.decode(ids),
                "output_ids": ids,
                "meta_info": {**base, "finish_reason": finish, "completion_tokens": len(ids)},
                "index": 0,
            }
            return
        step = self.job.get("step") or max(1, len(ids))
        bounds = sorted(set(self.job["cuts"]) - {len(ids)}) if self.job.get("cuts") else None
        bounds = bounds or list(range(0, len(ids), step)) or [0]
        text = ""  # the text so far (SGLang's adapter route reads the ids; its text routes read this)
        for n, start in enumerate(bounds):
            end = bounds[n + 1] if n + 1 < len(bounds) else len(ids)
            last = n == len(bounds) - 1
            new = ids[start:end]
            piece = self.tokenizer.decode(new)
            text += piece
            yield {
                "text": piece if incremental else text,
                "output_ids": new if incremental else ids[:end],
                "meta_info": {**base, "finish_reason": finish if last else None, "completion_tokens": end},
                "index": 0,
            }


async def _body(response: Any) -> Any:
    """A handler's answer as data: the SSE data chunks of a stream, else the JSON body."""
    from fastapi.responses import StreamingResponse

    if isinstance(response, StreamingResponse):
        chunks = []
        async for piece in response.body_iterator:
            text = piece.decode() if isinstance(piece, bytes) else piece
            for line in text.splitlines():
                if line.startswith("data: ") and line != "data: [DONE]":
                    chunks.append(json.loads(line[len("data: ") :]))
        return {"sse": chunks}
    if hasattr(response, "model_dump"):
        dumped = response.model_dump(mode="json")
        key = (
            "error"
            if dumped.get("object") == "error" or "code" in dumped and "choices" not in dumped
            else "body"
        )
        return {key: dumped}
    status = getattr(response, "status_code", None)
    return {"error": json.loads(response.body), "status": status}


class Servers:
    """One OpenAIServingChat per (model, parser flags), each under its own published ServerArgs."""

    def __init__(self, models: dict) -> None:
        self.models = models
        self._current: tuple | None = None
        self._override = None
        self.serving = None
        self.manager: StandInTokenizerManager | None = None
        self._tokenizers: dict[str, Any] = {}

    def get(self, job: dict):
        key = (
            job["model"],
            job.get("tool_call_parser"),
            job.get("reasoning_parser"),
            bool(job.get("incremental")),
            bool(job.get("multimodal")),
        )
        if key == self._current:
            return self.serving, self.manager
        from sglang.srt.entrypoints.openai.serving_chat import OpenAIServingChat
        from sglang.srt.parser.template_manager import TemplateManager
        from sglang.srt.runtime_context import get_context
        from sglang.srt.utils.hf_transformers_utils import get_tokenizer

        if self._override is not None:
            self._override.restore()
        model = self.models[job["model"]]
        self._override = get_context().override_server_args(
            model_path=model["path"],
            tool_call_parser=job.get("tool_call_parser"),
            reasoning_parser=job.get("reasoning_parser"),
            incremental_streaming_output=bool(job.get("incremental")),
        )
        server_args = self._override.install()
        if model["path"] not in self._tokenizers:  # loading one is slow (Gemma 4's vocabulary)
            self._tokenizers[model["path"]] = get_tokenizer(model["path"])
        tokenizer = self._tokenizers[model["path"]]
        self.manager = StandInTokenizerManager(
            server_args, tokenizer, model["path"], model["model_type"], bool(job.get("multimodal"))
        )
        template_manager = TemplateManager()  # SGLang's own: the model directory's chat template
        template_manager.initialize_templates(self.manager, model["path"])
        self.serving = OpenAIServingChat(self.manager, template_manager)
        self._current = key
        return self.serving, self.manager


def _text_job(job: dict) -> dict:
    """SGLang's text-only route (its /separate_reasoning and /parse_function_call endpoints): the
    registered detectors on the job's text, whole and in `step`-character pieces."""
    from sglang.srt.entrypoints.openai.protocol import Tool
    from sglang.srt.function_call.function_call_parser import FunctionCallParser
    from sglang.srt.parser.reasoning_parser import ReasoningParser

    tools = [Tool(**t) for t in job.get("tools") or ()]
    reasoning, rest = ReasoningParser(
        model_type=job["reasoning_parser"], stream_reasoning=False
    ).parse_non_stream(job["text"])
    normal, calls = FunctionCallParser(tools, job["tool_call_parser"]).parse_non_stream(rest or "")
    streamed = FunctionCallParser(tools, job["tool_call_parser"])
    step = job.get("step") or 5
    pieces, items = [], []
    for k in range(0, len(rest or ""), step):
        text, got = streamed.parse_stream_chunk(rest[k : k + step])
        pieces.append(text)
        items += [c.model_dump() for c in got]
    return {
        "reasoning": reasoning,
        "content": normal,
        "calls": [c.model_dump() for c in calls],
        "stream_content": "".join(pieces),
        "stream_calls": items,
    }


async def _responses_job(servers: Servers, job: dict) -> dict:
    """SGLang's /v1/responses handler (OpenAIServingResponses) on the same stand-in."""
    from sglang.srt.entrypoints.openai.protocol import ResponsesRequest
    from sglang.srt.entrypoints.openai.serving_responses import OpenAIServingResponses

    chat, manager = servers.get(job)
    serving = OpenAIServingResponses(manager, chat.template_manager)
    manager.job, manager.sent = job, []
    response = await serving.create_responses(ResponsesRequest(**job["request"]), None)
    if hasattr(response, "__aiter__"):  # a stream: the SSE events' data
        events = []
        async for piece in response:
            for line in (piece.decode() if isinstance(piece, bytes) else piece).splitlines():
                if line.startswith("data: ") and line != "data: [DONE]":
                    events.append(json.loads(line[len("data: ") :]))
        return {"events": events}
    return await _body(response)


def _gate_checks() -> dict:
    """Importing the plugin under another SGLang version, or with a name it relies on gone (each
    removed for one import, then put back): what the ImportError says, or None if it imported."""
    import importlib
    import importlib.metadata as metadata

    from sglang.srt.entrypoints.openai import chat_encoding_adapters as adapters
    from sglang.srt.entrypoints.openai.serving_chat import OpenAIServingChat
    from sglang.srt.function_call.function_call_parser import FunctionCallParser

    name = "chatsieve.integrations.sglang"
    saved = sys.modules.pop(name)
    out = {}

    def attempt() -> str | None:
        try:
            importlib.import_module(name)
            return None
        except ImportError as e:
            return str(e)
        finally:
            sys.modules.pop(name, None)

    original = metadata.version
    try:
        metadata.version = lambda dist: "0.5.22" if dist == "sglang" else original(dist)
        out["version"] = attempt()
    finally:
        metadata.version = original
    for owner, attr in (
        (adapters, "select_new_output_ids"),
        (adapters, "token_output_sse_chunks"),
        (adapters, "_BUILDERS"),
        (OpenAIServingChat, "_resolve_chat_encoding_spec"),
        (FunctionCallParser, "ToolCallParserEnum"),
    ):
        value = owner.__dict__[attr]
        delattr(owner, attr)
        try:
            out[f"{getattr(owner, '__name__', owner)}.{attr}"] = attempt()
        finally:
            setattr(owner, attr, value)
    sys.modules[name] = saved
    return out


async def run(jobs: dict) -> dict:
    from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest
    from sglang.srt.plugins import load_plugins

    load_plugins()
    from sglang.srt.plugins.hook_registry import HookRegistry

    out: dict = {
        "hooks": sorted(HookRegistry._patched),
        "argparse": [_argparse_check(argv) for argv in jobs.get("argparse", [])],
        "results": {},
    }
    servers = Servers(jobs["models"])
    for job in jobs["jobs"]:
        os.environ["CHATSIEVE_STREAM_ARGUMENTS"] = "1" if job.get("stream_arguments") else ""
        result: dict = {}
        began, began_cpu = time.perf_counter(), time.process_time()
        if job.get("kind") == "text":
            out["results"][job["id"]] = _text_job(job)
            continue
        if job.get("kind") == "responses":
            try:
                result.update(await _responses_job(servers, job))
            except Exception as e:
                import traceback

                result["exception"] = f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=-6)}"
            out["results"][job["id"]] = result
            continue
        try:
            serving, manager = servers.get(job)
            manager.job, manager.sent = job, []
            serving_info = {"chat_encoding_spec": serving.chat_encoding_spec}
            request = ChatCompletionRequest(**job["request"])
            response = await serving.handle_request(request, None)
            result.update(await _body(response))
            result.update(serving_info)
            # the request as SGLang's model holds it (it normalises some fields, e.g. Python type
            # names in tool schemas): what the adapter reads
            result["wire"] = request.model_dump(exclude_unset=True, by_alias=True, mode="json")
            if manager.sent:
                result["prompt_ids"] = list(manager.sent[0].input_ids or ())
        except Exception as e:  # reported, not raised: the test names the job that failed
            import traceback

            result["exception"] = f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=-6)}"
        result["seconds"] = time.perf_counter() - began  # for the record (bench/, never asserted)
        result["cpu_seconds"] = time.process_time() - began_cpu
        out["results"][job["id"]] = result
    out["gate"] = _gate_checks()
    return out


def main() -> None:
    jobs_path, results_path = sys.argv[1], sys.argv[2]
    with open(jobs_path, encoding="utf-8") as f:
        jobs = json.load(f)
    results = asyncio.run(run(jobs))
    with open(results_path, "w", encoding="utf-8") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main()
