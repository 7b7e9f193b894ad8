"""chatsieve as NVIDIA Dynamo's chat processor: the frontend renders, routes and parses with chatsieve.

    python -m chatsieve.integrations.dynamo --format qwen3 [every dynamo.frontend flag ...]

Dynamo's frontend calls a chat engine factory once per discovered model (`EntrypointArgs(
chat_engine_factory=...)`); the engine it returns gets each client's chat-completions JSON and
yields `chat.completion.chunk` dicts, which Dynamo streams, or folds into one response. Here that
engine validates the request (chatsieve.protocols.openai_chat), renders the prompt with delimiter
isolation (chatsieve.render_prompt), sends token ids to the workers through Dynamo's router
(KV-aware routing, disaggregation and migration stay Dynamo's), parses the output token ids with
the gated StreamParser and builds the chunks with the shared ChunkStream. Dynamo's own
preprocessor and Rust parsers are not used for these models.

Written against Dynamo SUPPORTED_DYNAMO (tested with TESTED_DYNAMO); importing it under another
Dynamo, or one whose hooks differ, raises ImportError naming those versions.

Decisions (docs/integrations.md, "Inside NVIDIA Dynamo"):
- the format: `--format`, else mapped from the worker's advertised `tool_call_parser` /
  `reasoning_parser` (`format_for_parsers`, tables PARSER_FORMATS / TOOL_PARSER_FORMATS), else
  config.json's `model_type` if it names a format; none: the model is refused naming `--format`;
- workers should NOT advertise a tool parser: Dynamo's non-streaming aggregator re-parses the
  content this engine returns with it, so an echoed delimiter could become a call there (streamed
  answers are not re-parsed); a warning says so at discovery;
- reasoning goes out as `reasoning_content` only (Dynamo refuses a chunk that also carries
  `reasoning`, the vLLM spelling: HTTP 500);
- `nvext` is passed to the workers whole (`extra_args.nvext`), `nvext.annotations` as the engine
  request's annotations (the mocker's replay and workers read them), and the routing hints
  (`backend_instance_id`, `prefill_worker_id`, `decode_worker_id`, `dp_rank`, `prefill_dp_rank`,
  `agent_hints.priority` / `osl`, and a request's `routing` object) as the request's `routing`;
- stop strings are cut here (the engine is sent stop token ids only), so a stop string spelled
  across tokens, or inside a tool call's arguments, is handled as in `chatsieve serve`;
- tool_choice `required` / named and `response_format` become `sampling_options.guided_decoding`
  (`grammar`: GBNF, which vLLM's and SGLang's xgrammar read; `json`: a JSON Schema, e.g. the JSON
  call list of chatsieve.call_list where a family's syntax needs a control token); with thinking
  on where that needs two engine requests, a 400 (not done here yet);
  `logit_bias` is refused (400): Dynamo's engine request has no field for it;
- the chunks of every engine item that has already arrived are handed back at once (Dynamo's
  bridge to a Python engine costs per chunk), never waiting for more.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import formats
from ..detect import AUTO, FormatNotFound, resolve
from ..events import TokenLogprob
from ..parser import StreamParser
from ..preparation import (
    check_vocabulary_bounds,
    model_context_length,
    parser_prompt,
    plan_request_constraint,
    render_request_prompt,
)
from ..protocols.openai_chat import (
    ChatRequest,
    ChunkStream,
    RequestError,
    RequestLimits,
    ToolCallFilter,
    finish_reason,
    parse_chat_request,
    usage,
)
from .versions import installed_version, release

_DISTRIBUTIONS = ("ai-dynamo", "ai-dynamo-runtime")  # whose installed version the gate reads
SUPPORTED_DYNAMO = ">=1.6,<1.7"
TESTED_DYNAMO = "1.6.1"
_SUPPORTED_RANGE = ((1, 6), (1, 7))

log = logging.getLogger("chatsieve.dynamo")


def _incompatible(reason: str) -> ImportError:
    return ImportError(
        f"chatsieve.integrations.dynamo supports NVIDIA Dynamo {SUPPORTED_DYNAMO} (tested with "
        f"{TESTED_DYNAMO}); the installed ai-dynamo {installed_version(*_DISTRIBUTIONS)} differs: {reason}. Install "
        "a supported one (pip install 'ai-dynamo==1.6.1' 'ai-dynamo-runtime==1.6.1'), or run "
        "`chatsieve serve` in front of the engine instead."
    )


try:
    from dynamo.llm import PythonAsyncEngine
    from dynamo.llm.exceptions import InvalidArgument
except ImportError as e:
    if e.name in ("dynamo", "dynamo._core", "dynamo.llm"):
        raise ImportError(
            "chatsieve.integrations.dynamo needs NVIDIA Dynamo 1.6: pip install --no-deps "
            "'ai-dynamo==1.6.1' 'ai-dynamo-runtime==1.6.1' plus their imports (see "
            "requirements/dynamo-test.txt; `pip install ai-dynamo` pulls a package that downloads from "
            "another index)"
        ) from e
    raise _incompatible(f"cannot import {e.name or e}") from e


def _check_interfaces() -> None:
    """The version and the members this adapter relies on (checked at import)."""
    installed = installed_version(*_DISTRIBUTIONS)
    low, high = _SUPPORTED_RANGE
    if installed != "unknown" and not (low <= release(installed)[:2] < high):
        raise _incompatible("a version this adapter was not written against")
    import dynamo.llm as llm

    for name in ("EntrypointArgs", "EngineType", "make_engine", "run_input", "PythonAsyncEngine"):
        if not hasattr(llm, name):
            raise _incompatible(f"dynamo.llm.{name} is missing")
    doc = getattr(llm.EntrypointArgs, "__init__", None).__doc__ or ""
    text_sig = getattr(llm.EntrypointArgs, "__text_signature__", None) or ""
    if "chat_engine_factory" not in doc + text_sig:
        raise _incompatible("EntrypointArgs takes no chat_engine_factory")
    if not (isinstance(InvalidArgument, type) and issubclass(InvalidArgument, Exception)):
        raise _incompatible("dynamo.llm.exceptions.InvalidArgument is not an exception")


_check_interfaces()


# ---------------------------------------------------------------- which format


# Dynamo's parser names (`--dyn-tool-call-parser`, `--dyn-reasoning-parser`, advertised by the
# workers in their runtime config) -> chatsieve format. A pair is looked up first, then the tool
# parser alone, then chatsieve's own names and aliases for either.
PARSER_FORMATS: dict[tuple[str | None, str | None], str] = {
    ("hermes", "qwen3"): "qwen3",
    ("qwen3", "qwen3"): "qwen3",
    ("qwen3_coder", "qwen3"): "qwen3_coder",
    ("qwen3_coder", "qwen3_coder"): "qwen3_coder",
    ("deepseek_v3", "deepseek_r1"): "deepseek_r1",
    ("kimi_k2", "kimi"): "kimi_k2_thinking",
    ("kimi_k2", "kimi_k2"): "kimi_k2_thinking",
}
TOOL_PARSER_FORMATS: dict[str, str] = {
    "hermes": "hermes",
    "qwen25": "hermes",
    "qwen3": "qwen3",
    "qwen3_coder": "qwen3_coder",
    "gemma4": "gemma4",
    "gemma-4": "gemma4",
    "harmony": "gpt_oss",
    "deepseek_v3": "deepseek_v3",
    "deepseek_v3_1": "deepseek_v31",
    "deepseek_v3_2": "deepseek_v32",
    "deepseek_v4": "deepseek_v4",
    "deepseekv4": "deepseek_v4",
    "deepseek-v4": "deepseek_v4",
    "kimi_k2": "kimi_k2",
    "kimi_k25": "kimi_k2_thinking",
    "kimi_k3": "kimi_k3",
    "kimi-k3": "kimi_k3",
    "glm45": "glm45",
    "glm47": "glm47",
    "minimax_m2": "minimax_m2",
    "minimax_m3": "minimax_m3",
    "minimax-m3": "minimax_m3",
    "llama3_json": "llama3_json",
    "pythonic": "pythonic",
    "mistral": "mistral",
    "jamba": "jamba",
    "phi4": "phi4_mini",
    "nemotron_deci": "nemotron",
    "nemotron_nano": "nemotron3",
}


def format_for_parsers(tool_call_parser: str | None, reasoning_parser: str | None) -> str | None:
    """The chatsieve format for the parser names a Dynamo worker advertises, or None."""
    if (tool_call_parser, reasoning_parser) in PARSER_FORMATS:
        return PARSER_FORMATS[tool_call_parser, reasoning_parser]
    if tool_call_parser in TOOL_PARSER_FORMATS:
        return TOOL_PARSER_FORMATS[tool_call_parser]
    for name in (tool_call_parser, reasoning_parser):
        if name:
            try:
                return formats.get(name).name
            except formats.UnknownFormat:
                continue
    return None


def _format_for_model_type(directory: Path) -> str | None:
    """The chatsieve format named by the model directory's config.json `model_type`, or None."""
    try:
        model_type = json.loads((directory / "config.json").read_text(encoding="utf-8")).get("model_type")
    except (OSError, ValueError, AttributeError):
        return None
    try:
        return formats.get(model_type).name if isinstance(model_type, str) else None
    except formats.UnknownFormat:
        return None


# ---------------------------------------------------------------- one model


@dataclass(frozen=True)
class DynamoOptions:
    """What the frontend was told: the format (None: from the workers), a tokenizer directory
    (None: the model card's), whether tool arguments stream as they arrive."""

    format: str | None = None
    model_dir: Path | None = None
    stream_arguments: bool = False
    limits: RequestLimits = RequestLimits()


def _card(mdc: Any) -> dict:
    try:
        card = json.loads(mdc.to_json_str())
    except Exception:
        return {}
    return card if isinstance(card, dict) else {}


def _runtime_config(mdc: Any) -> dict:
    try:
        config = mdc.runtime_config()
    except Exception:
        return {}
    return config if isinstance(config, dict) else {}


class ChatsieveEngineFactory:
    """The `chat_engine_factory` Dynamo calls per discovered model: a ChatsieveChatEngine on the
    model's tokenizer and chat template, in chatsieve's format for it."""

    def __init__(self, options: DynamoOptions | None = None) -> None:
        self.options = options or DynamoOptions()
        if self.options.format not in (None, AUTO):
            formats.get(self.options.format)  # fail at start, naming the known formats

    async def chat_engine_factory(self, instance_id: Any, mdc: Any, routed_engine: Any) -> Any:
        engine = await self.make_engine(mdc, routed_engine)
        return PythonAsyncEngine(engine.generate, asyncio.get_running_loop())

    async def make_engine(self, mdc: Any, routed_engine: Any) -> ChatsieveChatEngine:
        name = mdc.name()
        runtime = _runtime_config(mdc)
        tool_parser, reasoning_parser = runtime.get("tool_call_parser"), runtime.get("reasoning_parser")
        directory = Path(self.options.model_dir or mdc.local_dir())
        fmt = (
            self.options.format
            or format_for_parsers(tool_parser, reasoning_parser)
            or _format_for_model_type(directory)
        )
        if fmt is None:
            raise RuntimeError(
                f"chatsieve: no format for model {name!r}: its workers advertise tool_call_parser="
                f"{tool_parser!r}, reasoning_parser={reasoning_parser!r}, and its config.json names no "
                "chatsieve format; start the frontend with --format NAME (known: `chatsieve formats`)"
            )
        if tool_parser:
            log.warning(
                "chatsieve: the workers of model %r advertise tool_call_parser=%r: Dynamo's non-streaming "
                "aggregator re-parses the content chatsieve returns with that parser, so text that spells "
                "a tool call (an echoed tool result) can become a call in non-streaming answers. Start "
                "the workers without --dyn-tool-call-parser / --dyn-reasoning-parser and give this "
                "frontend --format %s",
                name,
                tool_parser,
                fmt,
            )
        from ..tokenizer import load_tokenizer

        try:
            tokenizer = await asyncio.to_thread(load_tokenizer, directory)
        except (OSError, ValueError) as e:
            raise RuntimeError(
                f"chatsieve: cannot load the tokenizer of model {name!r} from {directory}: {e}; "
                "pass --model-dir with the model's tokenizer files"
            ) from e
        if tokenizer.chat_template is None:
            raise RuntimeError(
                f"chatsieve: model {name!r} has no chat template in {directory} (tokenizer_config.json "
                "or chat_template.jinja); pass --model-dir with one"
            )
        if fmt == AUTO:  # the format the model's chat template writes
            try:
                fmt = await asyncio.to_thread(resolve, AUTO, tokenizer)
            except FormatNotFound as e:
                raise RuntimeError(f"chatsieve: model {name!r}: {e}") from e
            log.info("chatsieve: model %s: format auto -> %s", name, fmt)
        card = _card(mdc)
        context = card.get("context_length") or runtime.get("context_length") or model_context_length(directory)
        log.info("chatsieve: model %s, format %s, tokenizer %s, context %s", name, fmt, directory, context)
        return ChatsieveChatEngine(
            format=fmt,
            tokenizer=tokenizer,
            routed_engine=routed_engine,
            model=name,
            context_length=context if isinstance(context, int) and context > 0 else None,
            options=self.options,
        )


# routing targets Dynamo's router reads from `nvext` (as its own processors pass them)
ROUTING_KEYS = ("backend_instance_id", "decode_worker_id", "prefill_worker_id", "dp_rank", "prefill_dp_rank")


def engine_routing(request: Mapping[str, Any]) -> dict | None:
    """The routing hints of a chat request: nvext targets and agent hints, then `routing`."""
    nvext = request.get("nvext")
    routing: dict[str, Any] = {}
    if isinstance(nvext, dict):
        hints = nvext.get("agent_hints")
        if isinstance(hints, dict):
            priority = hints.get("priority")
            if isinstance(priority, int) and not isinstance(priority, bool):
                routing["priority"] = priority
                routing["priority_jump"] = float(max(priority, 0))
            osl = hints.get("osl")
            if isinstance(osl, int) and not isinstance(osl, bool) and osl >= 0:
                routing["expected_output_tokens"] = osl
        routing.update({k: nvext[k] for k in ROUTING_KEYS if nvext.get(k) is not None})
    explicit = request.get("routing")
    if isinstance(explicit, dict):
        routing.update(explicit)
    return routing or None


@dataclass
class Prepared:
    """One validated request: the engine request, the parser, the tool-call filter."""

    request: ChatRequest
    engine_request: dict
    parser: Any  # a StreamParser, or a CallListParser around one (forced calls as a JSON list)
    calls: ToolCallFilter
    prompt_tokens: int
    max_tokens: int | None


class ChatsieveChatEngine:
    """One model's chat processor: request in, engine token ids through the gated parser,
    OpenAI chunks out (the generator Dynamo's PythonAsyncEngine runs)."""

    def __init__(
        self,
        *,
        format: str,
        tokenizer: Any,
        routed_engine: Any,
        model: str,
        context_length: int | None,
        options: DynamoOptions,
    ) -> None:
        self.format = formats.get(format).name
        self.tokenizer = tokenizer
        self.routed_engine = routed_engine
        self.model = model
        self.context_length = context_length
        self.options = options
        self.stop_token_ids = sorted(tokenizer.stop_token_ids)
        self.limits = dataclasses.replace(options.limits, max_model_len=context_length)
        self.vocab_size = tokenizer.hf.get_vocab_size(with_added_tokens=True)

    # ---- request ---------------------------------------------------------------------
    def prepare(self, body: Mapping[str, Any]) -> Prepared:
        """Validate and render; RequestError (the client's 4xx) on bad input."""
        body = dict(body)
        if "chat_template_args" in body:  # Dynamo's name for chat_template_kwargs (it renames the field)
            args = body.pop("chat_template_args")
            body.setdefault("chat_template_kwargs", args)
        req = parse_chat_request(body, self.limits)
        if req.logit_bias:
            raise RequestError(
                "logit_bias cannot be passed through Dynamo (its engine request has no such field); "
                "leave it out",
                param="logit_bias",
                code="unsupported_value",
            )
        check_vocabulary_bounds(req, self.vocab_size)
        tools = req.prompt_tools
        prompt = render_request_prompt(req, tokenizer=self.tokenizer, format=self.format, context=self.context_length)
        constraint = plan_request_constraint(req, format=self.format, engine="dynamo", tokenizer=self.tokenizer)
        if constraint is not None and constraint.reasoning_end is not None:
            what = f"tool_choice {req.tool_choice.mode!r}" if constraint.calls else "response_format"
            raise RequestError(
                f"{what} with thinking on for format {self.format!r} needs two engine requests (the "
                "reasoning, then the constrained answer), which the Dynamo integration does not do yet; "
                "turn thinking off (chat_template_kwargs.enable_thinking: false)",
                param="tool_choice" if constraint.calls else "response_format",
                code="unsupported_constraint",
            )
        guided = None
        if constraint is not None:
            if constraint.kind == "grammar":
                guided = {"grammar": constraint.grammar}
            else:
                guided = {
                    "json": constraint.schema if constraint.kind == "json_schema" else {"type": "object"}
                }
        parser = StreamParser(
            self.format,
            tools=tools,
            thinking=req.thinking,
            prompt=parser_prompt(prompt, format=self.format, tokenizer=self.tokenizer),
            tokenizer=self.tokenizer,
            stop=list(req.stop) or None,
            stop_token_ids=self.stop_token_ids,
            stream_arguments=self.options.stream_arguments,
            keep_logprobs=False,  # chunks are built from the events; the parser's own message is unused
        )
        if constraint is not None and constraint.calls:  # a forced JSON call list: its content is the calls
            from ..call_list import CallListParser

            parser = CallListParser(parser, tools)
        ids = list(prompt.token_ids)
        max_tokens = req.max_tokens or (self.context_length - len(ids) if self.context_length else None)
        nvext = body.get("nvext") if isinstance(body.get("nvext"), dict) else {}
        annotations = [a for a in nvext.get("annotations") or () if isinstance(a, str)]
        engine_request: dict[str, Any] = {
            "model": self.model,
            "token_ids": ids,
            "stop_conditions": {
                "max_tokens": max_tokens,
                "stop_token_ids_hidden": self.stop_token_ids,
                "min_tokens": body.get("min_tokens"),
                "ignore_eos": body.get("ignore_eos"),
            },
            "sampling_options": {
                "temperature": req.temperature,
                "top_p": req.top_p,
                "top_k": req.top_k or None,
                "min_p": req.min_p,
                "presence_penalty": req.presence_penalty,
                "frequency_penalty": req.frequency_penalty,
                "repetition_penalty": req.repetition_penalty,
                "seed": req.seed,
                "guided_decoding": guided,
            },
            "output_options": {
                "logprobs": req.top_logprobs if req.logprobs else None,
                "skip_special_tokens": False,
            },
            "eos_token_ids": self.stop_token_ids,
            "annotations": annotations,
            "routing": engine_routing(body),
        }
        if nvext:
            engine_request["extra_args"] = {"nvext": nvext}
        return Prepared(req, engine_request, parser, req.tool_call_filter(), len(ids), max_tokens)

    # ---- the generator Dynamo runs -------------------------------------------------------
    async def generate(self, body: dict, context: Any = None) -> AsyncIterator[dict]:
        try:
            prepared = await asyncio.to_thread(self.prepare, body)
        except RequestError as e:
            # InvalidArgument keeps the message (an HttpError's is replaced by "Bad Request")
            raise InvalidArgument(e.message) from None
        req = prepared.request
        chunks = ChunkStream(
            model=req.model or self.model,
            logprobs=req.logprobs,
            top_logprobs=req.top_logprobs,
            token_bytes=self.tokenizer.token_bytes,
        )
        metrics = {"input_tokens": prepared.prompt_tokens, "output_tokens": 0, "chunk_tokens": 0}
        stream = await self.routed_engine.generate(prepared.engine_request, context=context)
        parser, calls = prepared.parser, prepared.calls
        engine_finish: str | None = None
        engine_done = False  # the engine ended the stream itself (finished or failed)
        completion = 0
        tokens = 0  # output tokens not yet attributed to a chunk (llm_metrics chunk_tokens)
        yield self._wire(chunks.first(), metrics, 0)
        try:
            async for batch in _batches(stream):
                events: list = []
                stop = False
                failure: str | None = None
                for item in batch:
                    failure, data, ended = _item_data(item)
                    if failure is not None:
                        engine_done = ended
                        break
                    if data is None:  # a comment or annotation: nothing for the client
                        continue
                    ids = list(data.get("token_ids") or ())
                    over = False
                    if prepared.max_tokens is not None and completion + len(ids) > prepared.max_tokens:
                        ids, over = ids[: max(prepared.max_tokens - completion, 0)], True
                    bad = next((i for i in ids if not (isinstance(i, int) and 0 <= i < self.vocab_size)), None)
                    if bad is not None:
                        failure = (
                            f"the engine sent token id {bad}, outside the tokenizer's vocabulary "
                            f"(0..{self.vocab_size - 1}): do the frontend and the workers serve the same model?"
                        )
                        break
                    if ids:
                        lps = self._logprobs(ids, data) if req.logprobs else None
                        if len(ids) == 1 or not parser.stop_strings:
                            events += calls.apply(parser.feed(token_ids=ids, logprobs=lps))
                        else:  # one by one: the tokens the engine sent past a stop string are not counted
                            for k, tid in enumerate(ids):
                                if parser.stopped:
                                    ids = ids[:k]
                                    break
                                one = lps[k : k + 1] if lps is not None else None
                                events += calls.apply(parser.feed(token_ids=[tid], logprobs=one))
                    completion += len(ids)
                    tokens += len(ids)
                    if data.get("finish_reason"):
                        engine_finish, engine_done, stop = str(data["finish_reason"]), True, True
                    elif over:  # the engine went past max_tokens: cut here, and stop it
                        engine_finish, stop = "length", True
                    elif parser.stopped:  # a local stop string: stopping the context cancels the engine
                        stop = True
                    if stop:
                        break
                metrics["output_tokens"] = completion
                for chunk in chunks.events(events):  # what already arrived, merged into few chunks
                    yield self._wire(chunk, metrics, tokens)
                    tokens = 0
                if failure is not None:
                    log.error("chatsieve: engine error: %s", failure)
                    yield _error_envelope(failure)
                    return
                if stop:
                    break
        finally:  # a local stop, a cut, a bad item, or the client gone: the engine request ends too
            if not engine_done and context is not None:
                context.stop_generating()
            closer = getattr(stream, "aclose", None)
            if closer is not None:
                with contextlib.suppress(Exception):
                    await closer()
        events = calls.apply(parser.finish("stop" if parser.stopped else _finish(engine_finish)))
        calls.finish()
        for d in calls.dropped:
            log.info("chatsieve: dropped call %s: %s", d.raw[:200], d.why)
        for chunk in chunks.events(events):
            yield self._wire(chunk, metrics, tokens)
            tokens = 0
        reason = finish_reason(parser.finish_reason, calls.kept)
        closing = chunks.finish(reason)[0]
        closing["usage"] = usage(prepared.prompt_tokens, completion)
        yield self._wire(closing, metrics, tokens)

    # ---- helpers -------------------------------------------------------------------------
    def _wire(self, chunk: dict, metrics: dict, tokens: int) -> dict:
        """A ChunkStream chunk as Dynamo takes it: `reasoning_content` only, and llm_metrics."""
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta")
            if isinstance(delta, dict):
                delta.pop("reasoning", None)
        chunk["llm_metrics"] = {**metrics, "chunk_tokens": tokens}
        return chunk

    def _logprobs(self, ids: Sequence[int], data: dict) -> list[TokenLogprob] | None:
        values = data.get("log_probs")
        if not isinstance(values, list) or len(values) != len(ids):
            return None
        tops = data.get("top_logprobs")
        out = []
        for k, (tid, lp) in enumerate(zip(ids, values)):
            alternatives: list[tuple[str, float]] = []
            if isinstance(tops, list) and k < len(tops) and isinstance(tops[k], list):
                for cand in tops[k]:
                    if isinstance(cand, dict) and isinstance(cand.get("logprob"), int | float):
                        text = cand.get("token")
                        if not isinstance(text, str):
                            cid = cand.get("token_id")
                            text = self.tokenizer.decode([cid]) if isinstance(cid, int) else ""
                        alternatives.append((text, float(cand["logprob"])))
            out.append(TokenLogprob(tid, self.tokenizer.decode([tid]), float(lp), tuple(alternatives)))
        return out


@dataclass(frozen=True)
class EngineFailure:
    """The engine stream raised (a worker failed, the connection broke)."""

    message: str


def _item_data(item: Any) -> tuple[str | None, dict | None, bool]:
    """(failure message, None, whether the engine ended the stream) for a failed item, else
    (None, the item's data or None, False)."""
    failed = "the inference engine failed on this request"
    if isinstance(item, EngineFailure):
        return f"{failed}: {item.message}", None, True
    if item.is_error():
        return f"{failed}: {'; '.join(item.comments() or ()) or 'no detail'}", None, True
    data = item.data()
    if data is not None and (not isinstance(data, dict) or "token_ids" not in data):
        message = data.get("message") if isinstance(data, dict) else None
        return f"{failed}: {message or 'a response without token_ids'}", None, False
    return None, data, False


_END = object()


async def _batches(stream: Any) -> AsyncIterator[list]:
    """The engine's items, each time as a list of all that has already arrived (never waiting for
    more): when the frontend falls behind the engine, several items become one set of chunks,
    which is what a Python chat engine in Dynamo pays for. An exception from the stream becomes an
    EngineFailure item (leaving the generator, Dynamo would report it as a 400 "Invalid request")."""
    queue: asyncio.Queue = asyncio.Queue()

    async def pump() -> None:
        try:
            async for item in stream:
                queue.put_nowait(item)
        except Exception as e:
            queue.put_nowait(EngineFailure(str(e) or type(e).__name__))
        finally:
            queue.put_nowait(_END)

    task = asyncio.ensure_future(pump())
    try:
        while True:
            batch = [await queue.get()]
            while not queue.empty():
                batch.append(queue.get_nowait())
            ended = _END in batch
            if ended:
                batch = batch[: batch.index(_END)]
            if batch:
                yield batch
            if ended:
                return
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


def _finish(engine_reason: str | None) -> str | None:
    """Dynamo's finish reasons (eos, stop, length, cancelled, error:...) as the parser's."""
    if engine_reason is None:
        return None
    if engine_reason == "length":
        return "length"
    return "stop"


def _error_envelope(message: str) -> dict:
    """A mid-stream error as Dynamo's annotated error event (the client gets an error event)."""
    return {"_dynamo_annotated": True, "event": "error", "comment": [message]}


# ---------------------------------------------------------------- the launcher


def _parser():
    """chatsieve's own flags of the launcher (argparse); every other flag is Dynamo's."""
    import argparse

    ap = argparse.ArgumentParser(
        prog="python -m chatsieve.integrations.dynamo",
        description="Dynamo's frontend with chatsieve as the chat processor. chatsieve's options are "
        "these; every other option is python -m dynamo.frontend's (listed after them by --help).",
        add_help=False,
    )
    ap.add_argument("--format", help="chatsieve format, or auto (the one the model's chat template writes); default: mapped from the workers' parser names")
    ap.add_argument("--model-dir", type=Path, help="tokenizer + chat template (default: the model card's)")
    ap.add_argument(
        "--stream-arguments", action="store_true", help="stream tool-call arguments as they arrive"
    )
    ap.add_argument("--chatsieve-help", action="help", help="show chatsieve's options only and exit")
    return ap


def _split_args(argv: Sequence[str]) -> tuple[DynamoOptions, list[str]]:
    """chatsieve's own flags out of a dynamo.frontend command line; the rest is Dynamo's."""
    ap = _parser()
    ours, rest = ap.parse_known_args(list(argv))
    for flag in ("--chat-processor",):
        if any(a == flag or a.startswith(flag + "=") for a in rest):
            ap.error(f"{flag} selects another chat processor; leave it out (chatsieve is the processor here)")
    if ours.format is not None:
        try:
            formats.get(ours.format)
        except formats.UnknownFormat as e:
            ap.error(str(e))
    return DynamoOptions(
        format=ours.format, model_dir=ours.model_dir, stream_arguments=ours.stream_arguments
    ), rest


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m dynamo.frontend`, every flag kept, with chatsieve's engine factory for each model."""
    options, rest = _split_args(sys.argv[1:] if argv is None else argv)
    if "-h" in rest or "--help" in rest:  # chatsieve's options first, then Dynamo's own help
        print(_parser().format_help())
        print("Dynamo's frontend options (python -m dynamo.frontend --help):\n", flush=True)
    if options.stream_arguments is False and os.environ.get("CHATSIEVE_STREAM_ARGUMENTS", "") in (
        "1",
        "true",
    ):
        options = DynamoOptions(options.format, options.model_dir, True, options.limits)
    import dynamo.frontend.main as frontend

    original = getattr(frontend, "EntrypointArgs", None)
    if original is None or not callable(getattr(frontend, "main", None)):
        raise _incompatible("dynamo.frontend.main has no EntrypointArgs / main")
    factory = ChatsieveEngineFactory(options)

    def entrypoint_args(*args: Any, **kwargs: Any) -> Any:
        kwargs["chat_engine_factory"] = factory.chat_engine_factory
        return original(*args, **kwargs)

    frontend.EntrypointArgs = entrypoint_args
    sys.argv = [sys.argv[0], *rest]
    frontend.main()
    return 0


if __name__ == "__main__":
    sys.exit(main())
