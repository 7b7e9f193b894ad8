"""Engine clients: send the prompt's token ids, stream back generated token ids and logprobs.

One reader per wire protocol (sans-I/O: a decoded SSE event in, a TokenBatch out) and one
`Backend` that does the HTTP over a shared keep-alive pool (`client.EngineHTTP`).

Wire formats (checked against the engines' docs and sources):

- ``vllm``: ``POST {URL}/v1/completions`` with ``prompt`` = token ids, ``return_token_ids``
  (vLLM >= 0.10.2), ``skip_special_tokens: false``, ``stop_token_ids``; each chunk's
  ``choices[0].token_ids`` holds that chunk's new ids; logprobs in ``choices[0].logprobs``
  (``token_logprobs``, ``top_logprobs`` keyed ``token_id:N`` thanks to
  ``return_tokens_as_token_ids``); ``finish_reason`` on the last chunk; ``data: [DONE]``. With
  ``stream_options.include_usage`` a chunk with ``choices: []`` carries the usage before
  ``[DONE]``: ``prompt_tokens_details.cached_tokens`` (the prompt tokens its prefix cache served)
  when vLLM runs with ``--enable-prompt-tokens-details``.
- ``sglang``: ``POST {URL}/generate`` with ``input_ids`` and ``sampling_params``; each event has
  ``output_ids`` and ``meta_info`` (``completion_tokens``, ``finish_reason: {"type": ...}``,
  ``output_token_logprobs`` as ``[logprob, id, text]``). Depending on version and the
  ``incremental_streaming_output`` server flag, ``output_ids`` (and, separately, the logprob
  lists) are either cumulative or only the new ids; the reader tells them apart with
  ``meta_info.completion_tokens`` (cumulative: it equals ``len(output_ids)``; incremental: it
  equals the ids seen so far plus ``len(output_ids)``), falling back to a prefix check, and
  always takes the logprob lists' tail. ``meta_info.cached_tokens``: the prompt tokens its radix
  cache served.
- ``llamacpp``: ``POST {URL}/completion`` with ``prompt`` = token ids, ``return_tokens``;
  each event has ``tokens`` and, with ``n_probs``, ``completion_probabilities``; the last has
  ``stop: true`` and ``stop_type`` (``limit`` = length). No ``[DONE]``; a failure mid-stream
  comes as an ``error: {...}`` line instead of ``data:``. The last event's ``timings.cache_n``: the
  prompt tokens reused from the slot's cache (``tokens_cached`` is the slot's whole length).

Stop strings are deliberately not sent to the engines: chatsieve cuts them locally (on text
decoded from ids, with gating semantics the engines do not share) and cancels the request.
"""

from __future__ import annotations

import asyncio
import functools
import json
import time
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

from chatsieve._json import dumps, loads, loads_strict, string
from chatsieve.events import TokenLogprob
from chatsieve.grammar import Constraint
from chatsieve.server.client import ClientError, ConnectFailed, EngineHTTP, ReadTimeout, compiled

KINDS = ("vllm", "sglang", "llamacpp")
NO_LOGPROB = -9999.0  # stands in for -inf / missing, which JSON cannot carry


class BackendError(Exception):
    """The engine was unreachable, failed, or sent something chatsieve cannot read.

    `status` is the engine's HTTP status when it refused the request outright (a 400 there,
    e.g. a prompt longer than the context, is the client's problem, not a gateway failure).
    `unreachable` means no connection was made, so another replica may take the request.
    """

    def __init__(self, message: str, *, status: int | None = None, unreachable: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.unreachable = unreachable  # no connection could be made: nothing reached the engine


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    prompt_token_ids: list[int]
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    stop_token_ids: tuple[int, ...] = ()
    top_logprobs: int | None = None  # None: no logprobs; k: the sampled token's plus k alternatives
    # sampling passthrough (see sampling_fields for each engine's names)
    top_k: int | None = None
    min_p: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None
    logit_bias: tuple[tuple[int, float], ...] = ()
    constraint: Constraint | None = None  # engine-enforced structure (chatsieve.grammar)


class TokenBatch(NamedTuple):  # a NamedTuple: one is made per engine event, and it is cheap
    token_ids: tuple[int, ...]
    logprobs: tuple[TokenLogprob, ...] | None = None
    finish_reason: str | None = None  # "stop" | "length" on the engine's last event
    cached_tokens: int | None = None  # prompt tokens the engine's prefix cache served, where it says


TokenText = Callable[[int], str]


# ---------------------------------------------------------------- readers


class _Reader:
    finished = False

    def __init__(self, token_text: TokenText) -> None:
        self.token_text = token_text

    def read(self, event: dict) -> TokenBatch | None:
        raise NotImplementedError

    # The id of an event that carries one token id and nothing else `read` would act on (no
    # logprobs, no finish, no cached count, no error), where `read` would give the batch of that
    # id alone and change nothing; else None. None here: every event goes through `read`.
    one_id: Callable[[dict], int | None] | None = None

    def _lp(self, token_id: int, logprob: Any, top: list[tuple[int | str, Any]]) -> TokenLogprob:
        alts = []
        for key, value in top:
            text = self.token_text(key) if isinstance(key, int) else key
            alts.append((text, _float(value)))
        return TokenLogprob(token_id, self.token_text(token_id), _float(logprob), tuple(alts))


class VllmReader(_Reader):
    def read(self, event: dict) -> TokenBatch | None:
        choices = event.get("choices")
        if type(choices) is list and len(choices) == 1 and type(choice := choices[0]) is dict:
            # the usual event, checked cheaply: new ids only, no logprobs, no finish, no error
            ids = choice.get("token_ids")
            if (
                type(ids) is list
                and choice.get("logprobs") is None
                and choice.get("finish_reason") is None
                and not event.get("error")
                and event.get("object") != "error"
                and (len(ids) == 1 and type(ids[0]) is int or all(type(i) is int for i in ids))
            ):
                return TokenBatch(tuple(ids))
        return self._read_any(event)

    def one_id(self, event: dict) -> int | None:  # (see `_Reader.one_id`)
        choices = event.get("choices")
        if type(choices) is list and len(choices) == 1 and type(choice := choices[0]) is dict:
            ids = choice.get("token_ids")
            if (
                type(ids) is list
                and len(ids) == 1
                and type(tid := ids[0]) is int
                and choice.get("logprobs") is None
                and choice.get("finish_reason") is None
                and not event.get("error")
                and event.get("object") != "error"
            ):
                return tid
        return None

    def _read_any(self, event: dict) -> TokenBatch | None:
        _raise_error_event(event)
        choices = event.get("choices")
        if choices == [] and "usage" in event:  # the usage chunk (stream_options.include_usage)
            cached = _count(_get(_get(event.get("usage"), "prompt_tokens_details"), "cached_tokens"))
            return None if cached is None else TokenBatch((), None, None, cached)
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise BackendError(f"vllm backend sent a chunk without choices: {_short(event)}")
        choice = choices[0]
        ids = choice.get("token_ids")
        if ids is None:
            if choice.get("text") or choice.get("finish_reason") is None:
                raise BackendError(
                    "vllm backend sent no token_ids: it must be vLLM >= 0.10.2 (return_token_ids); another engine needs its --backend-kind"
                )
            ids = []
        ids = _ids(ids, "vllm")
        logprobs = None
        lp = choice.get("logprobs")
        if isinstance(lp, dict) and ids:
            values = lp.get("token_logprobs") or []
            tops = lp.get("top_logprobs") or []
            logprobs = tuple(
                self._lp(
                    tid,
                    values[i] if i < len(values) else None,
                    _vllm_top(tops[i] if i < len(tops) else None),
                )
                for i, tid in enumerate(ids)
            )
        reason = choice.get("finish_reason")
        if reason is not None:
            self.finished = True
            if reason not in ("stop", "length"):
                raise BackendError(f"vllm backend ended the request: finish_reason {reason!r}")
        return TokenBatch(tuple(ids), logprobs, reason)


def _vllm_top(top: Any) -> list[tuple[int | str, Any]]:
    if not isinstance(top, dict):
        return []
    out: list[tuple[int | str, Any]] = []
    for key, value in sorted(top.items(), key=lambda kv: -_float(kv[1])):
        if isinstance(key, str) and key.startswith("token_id:") and key[9:].lstrip("-").isdigit():
            out.append((int(key[9:]), value))
        else:
            out.append((str(key), value))
    return out


class SglangReader(_Reader):
    def __init__(self, token_text: TokenText) -> None:
        super().__init__(token_text)
        self.ids: list[int] = []
        self.mode: str | None = None  # "cumulative" | "incremental" once known
        self.cached: int | None = None  # meta_info.cached_tokens, once seen (every event repeats it)

    def read(self, event: dict) -> TokenBatch | None:
        _raise_error_event(event)
        meta = event.get("meta_info")
        if not isinstance(meta, dict):
            raise BackendError(f"sglang backend sent an event without meta_info: {_short(event)}")
        raw = event.get("output_ids")
        if raw is None:
            raise BackendError("sglang backend sent no output_ids")
        new = self._new_ids(_ids(raw, "sglang"), meta.get("completion_tokens"))
        self.ids.extend(new)
        logprobs = None
        values = meta.get("output_token_logprobs")
        if isinstance(values, list) and new:
            tops = meta.get("output_top_logprobs")
            values = values[-len(new) :]
            tops = tops[-len(new) :] if isinstance(tops, list) and len(tops) >= len(new) else []
            logprobs = tuple(
                self._lp(
                    tid,
                    _sglang_value(values[i]) if i < len(values) else None,
                    [(_sglang_id(t), _sglang_value(t)) for t in (tops[i] or [])] if i < len(tops) else [],
                )
                for i, tid in enumerate(new)
            )
        reason = meta.get("finish_reason")
        if isinstance(reason, dict):
            reason = reason.get("type")
        if reason is not None:
            self.finished = True
            if reason == "abort":
                message = (
                    meta["finish_reason"].get("message") if isinstance(meta["finish_reason"], dict) else ""
                )
                raise BackendError(f"sglang backend aborted the request: {message}")
            reason = "length" if reason == "length" else "stop"
        cached = None
        if self.cached is None:
            cached = self.cached = _count(meta.get("cached_tokens"))
        return TokenBatch(tuple(new), logprobs, reason, cached)

    def _new_ids(self, ids: list[int], total: Any) -> list[int]:
        seen = len(self.ids)
        mode = self.mode
        if mode is None and seen:
            cumulative = len(ids) >= seen and ids[:seen] == self.ids
            incremental = True
            if isinstance(total, int) and not isinstance(total, bool):
                cumulative = cumulative and total == len(ids)
                incremental = total == seen + len(ids)
            if cumulative and not incremental:
                mode = self.mode = "cumulative"
            elif incremental and not cumulative:
                mode = self.mode = "incremental"
            elif cumulative:
                mode = "cumulative"  # ambiguous event: a prefix match is the stronger evidence
            else:
                raise BackendError(
                    "sglang backend sent output_ids that neither extend nor follow the previous ones"
                )
        if mode == "cumulative":
            if len(ids) < seen or (seen and ids[seen - 1] != self.ids[-1]):
                raise BackendError("sglang backend's cumulative output_ids shrank or changed")
            return ids[seen:]
        return ids


def _sglang_value(entry: Any) -> Any:
    return entry[0] if isinstance(entry, list | tuple) and entry else None


def _sglang_id(entry: Any) -> int | str:
    if isinstance(entry, list | tuple) and len(entry) > 1 and isinstance(entry[1], int):
        return entry[1]
    if isinstance(entry, list | tuple) and len(entry) > 2 and isinstance(entry[2], str):
        return entry[2]
    return ""


class LlamacppReader(_Reader):
    def one_id(self, event: dict) -> int | None:  # (see `_Reader.one_id`)
        ids = event.get("tokens")
        if (
            type(ids) is list
            and len(ids) == 1
            and type(tid := ids[0]) is int
            and event.get("stop") is not True
            and not event.get("error")
            and not isinstance(event.get("completion_probabilities"), list)
        ):
            return tid
        return None

    def read(self, event: dict) -> TokenBatch | None:
        _raise_error_event(event)
        ids = event.get("tokens")
        if ids is None:
            if event.get("content") or not event.get("stop"):
                raise BackendError("llamacpp backend sent no tokens: it must support return_tokens")
            ids = []
        ids = _ids(ids, "llamacpp")
        logprobs = None
        probs = event.get("completion_probabilities")
        if isinstance(probs, list) and ids:
            entries = probs[-len(ids) :]
            logprobs = tuple(
                self._lp(
                    tid,
                    entries[i].get("logprob") if i < len(entries) and isinstance(entries[i], dict) else None,
                    [
                        (
                            t.get("id") if isinstance(t.get("id"), int) else str(t.get("token", "")),
                            t.get("logprob"),
                        )
                        for t in (entries[i].get("top_logprobs") or [])
                        if isinstance(t, dict)
                    ]
                    if i < len(entries) and isinstance(entries[i], dict)
                    else [],
                )
                for i, tid in enumerate(ids)
            )
        reason = cached = None
        if event.get("stop") is True:
            self.finished = True
            reason = "length" if event.get("stop_type") == "limit" else "stop"
            cached = _count(_get(event.get("timings"), "cache_n"))
        return TokenBatch(tuple(ids), logprobs, reason, cached)


def _raise_error_event(event: dict) -> None:
    err = event.get("error")
    if err:
        raise BackendError(f"backend reported an error: {_error_text(err)}")
    if event.get("object") == "error":
        raise BackendError(f"backend reported an error: {event.get('message', '')}")


def _ids(value: Any, kind: str) -> list[int]:
    if not isinstance(value, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in value):
        raise BackendError(f"{kind} backend sent token ids that are not a list of integers: {_short(value)}")
    return value


def _get(value: Any, key: str) -> Any:
    return value.get(key) if isinstance(value, dict) else None


def _count(value: Any) -> int | None:
    """A token count an engine reports (a non-negative integer), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _float(value: Any) -> float:
    if (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and value == value
        and abs(value) != float("inf")
    ):
        return float(value)
    return NO_LOGPROB


def _short(value: Any, limit: int = 200) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[:limit] + "..."


def _error_text(err: Any) -> str:
    if isinstance(err, dict):
        return str(err.get("message") or _short(err))
    return _short(err)


# ---------------------------------------------------------------- payloads


def vllm_payload(req: GenerationRequest, model: str | None) -> dict:
    p: dict[str, Any] = {
        "prompt": req.prompt_token_ids,
        "stream": True,
        "return_token_ids": True,
        "skip_special_tokens": False,
        "max_tokens": req.max_tokens,  # null: up to the context length (vLLM's default would be 16)
        "stop_token_ids": list(req.stop_token_ids),
        "stream_options": {"include_usage": True},  # the usage chunk: cached prompt tokens
    }
    if model:
        p["model"] = model
    _put(p, temperature=req.temperature, top_p=req.top_p, seed=req.seed)
    _sampling(p, req, "vllm")
    if req.top_logprobs is not None:
        p["logprobs"] = req.top_logprobs
        p["return_tokens_as_token_ids"] = True
    c = req.constraint
    if c is not None:  # vLLM >= 0.11 (earlier versions named these guided_*)
        if c.kind == "structural_tag":  # a JSON string (StructuredOutputsParams.structural_tag)
            p["structured_outputs"] = {"structural_tag": c.structural_tag}
        elif c.kind == "grammar":
            p["structured_outputs"] = {"grammar": c.grammar}
        elif c.kind == "json_object":
            p["structured_outputs"] = {"json_object": True}
        else:
            p["structured_outputs"] = {"json": c.schema}
    return p


def sglang_payload(req: GenerationRequest, model: str | None) -> dict:
    params: dict[str, Any] = {
        "max_new_tokens": req.max_tokens,
        "stop_token_ids": list(req.stop_token_ids),
        "skip_special_tokens": False,
        "no_stop_trim": True,
    }
    _put(params, temperature=req.temperature, top_p=req.top_p, sampling_seed=req.seed)
    _sampling(params, req, "sglang")
    c = req.constraint
    if c is not None:
        if c.kind == "structural_tag":
            params["structural_tag"] = c.structural_tag
        elif c.kind == "grammar":
            params["ebnf"] = c.grammar
        else:
            params["json_schema"] = json.dumps(c.schema if c.kind == "json_schema" else {"type": "object"})
    p: dict[str, Any] = {"input_ids": req.prompt_token_ids, "sampling_params": params, "stream": True}
    if req.top_logprobs is not None:
        p.update(return_logprob=True, top_logprobs_num=req.top_logprobs, logprob_start_len=-1)
    return p


def llamacpp_payload(req: GenerationRequest, model: str | None) -> dict:
    p: dict[str, Any] = {
        "prompt": req.prompt_token_ids,
        "stream": True,
        "return_tokens": True,
        "n_predict": req.max_tokens if req.max_tokens is not None else -1,
        "cache_prompt": True,
    }
    _put(p, temperature=req.temperature, top_p=req.top_p, seed=req.seed)
    _sampling(p, req, "llamacpp")
    if req.top_logprobs is not None:
        p["n_probs"] = max(1, req.top_logprobs)  # 0 would return no probabilities at all
    c = req.constraint
    if c is not None:
        if c.kind == "grammar":
            p["grammar"] = c.grammar
            if c.triggers:  # lazy: armed by a trigger, which is never an empty list (a 400 there)
                p["grammar_lazy"] = True
                p["grammar_triggers"] = [{"type": kind, "value": value} for kind, value in c.triggers]
                p["preserved_tokens"] = list(c.preserved_tokens)
        else:
            p["json_schema"] = c.schema if c.kind == "json_schema" else {"type": "object"}
    return p


# OpenAI sampling field -> each engine's name for it (docs/serving.md, "Sampling fields").
SAMPLING_FIELDS: dict[str, dict[str, str]] = {
    "top_k": {"vllm": "top_k", "sglang": "top_k", "llamacpp": "top_k"},
    "min_p": {"vllm": "min_p", "sglang": "min_p", "llamacpp": "min_p"},
    "presence_penalty": {"vllm": "presence_penalty", "sglang": "presence_penalty", "llamacpp": "presence_penalty"},
    "frequency_penalty": {
        "vllm": "frequency_penalty", "sglang": "frequency_penalty", "llamacpp": "frequency_penalty"
    },
    "repetition_penalty": {"vllm": "repetition_penalty", "sglang": "repetition_penalty", "llamacpp": "repeat_penalty"},
    "logit_bias": {"vllm": "logit_bias", "sglang": "logit_bias", "llamacpp": "logit_bias"},
}  # fmt: skip


def _sampling(d: dict, req: GenerationRequest, kind: str) -> None:
    for field in ("top_k", "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty"):
        value = getattr(req, field)
        if field == "top_k" and value == 0:
            value = 0 if kind == "llamacpp" else -1  # each engine's "no top-k cut"
        if value is not None:
            d[SAMPLING_FIELDS[field][kind]] = value
    if req.logit_bias:
        if kind == "llamacpp":  # [[id, bias], ...]
            d["logit_bias"] = [[tid, bias] for tid, bias in req.logit_bias]
        else:  # {"id": bias}, as OpenAI sends it
            d["logit_bias"] = {str(tid): bias for tid, bias in req.logit_bias}


def _put(d: dict, **values: Any) -> None:
    d.update({k: v for k, v in values.items() if v is not None})


_PROTOCOLS: dict[str, tuple[str, Callable[[GenerationRequest, str | None], dict], type[_Reader]]] = {
    "vllm": ("/v1/completions", vllm_payload, VllmReader),
    "sglang": ("/generate", sglang_payload, SglangReader),
    "llamacpp": ("/completion", llamacpp_payload, LlamacppReader),
}


# ---------------------------------------------------------------- HTTP


class Backend:
    """Streams token batches for one generation from an engine over `client`."""

    def __init__(
        self,
        kind: str,
        base_url: str,
        client: EngineHTTP,
        token_text: TokenText,
        *,
        model: str | None = None,
    ) -> None:
        if kind not in _PROTOCOLS:
            raise ValueError(f"unknown backend kind {kind!r}; known: {', '.join(KINDS)}")
        self.kind = kind
        path, self._payload, self._reader = _PROTOCOLS[kind]
        self.base_url = base_url.rstrip("/")
        self.url = self.base_url + path
        self.client = client
        self.model = model
        self.token_text = functools.lru_cache(maxsize=1 << 16)(token_text)

    def payload(self, req: GenerationRequest) -> dict:
        return self._payload(req, self.model)

    async def generate(
        self, req: GenerationRequest, push: Push | None = None, push_id: PushId | None = None
    ) -> AsyncIterator[TokenBatch]:
        """Yield token batches until the engine finishes; raise BackendError on any failure.

        The events of one network read are merged into one batch (fewer, larger batches when
        the engine is ahead of us; one per event when we keep up). After the last batch the
        rest of the response is read, so that the connection goes back to the pool.

        With `push`, batches go to `push(batch)` as they arrive, in the connection's callback (no
        task wake-up per engine event), for as long as it returns True; a batch it returns False
        for, and every later one, is yielded here instead. A batch with a finish reason, a
        failure (also one `push` raised) and the end are always yielded or raised here. With
        `push_id` too, an event of one token id and nothing else (no logprobs, no finish, no
        cached count), where the engine's reader can tell one (`_Reader.one_id`), goes to
        `push_id(id)` first; one it declines goes to `push` as a batch of that id.

        Closing the iterator early (client gone, local stop) closes the engine connection,
        which vLLM, SGLang and llama.cpp all treat as an abort.
        """
        events = _EventReader(self, self._reader(self.token_text))
        where = f"the {self.kind} backend at {self.url}"
        try:
            resp = await self.client.post(self.url, dumps(self.payload(req)))
            async with resp:
                if resp.status != 200:
                    body = await resp.read()
                    hint = " (is --backend-kind right?)" if resp.status in (404, 405) else ""
                    raise BackendError(
                        f"{self.kind} backend at {self.url} returned HTTP {resp.status}: "
                        f"{_body_message(body)}{hint}",
                        status=resp.status,
                    )
                if push is not None:
                    resp.push_to(events.pusher(push, push_id))
                chunks = resp.chunks()
                async for raw in chunks:
                    events.raise_failure()
                    batch = events.feed(raw)
                    if events.held:
                        yield events.held.pop()
                    if batch is not None:
                        yield batch
                    if events.done:
                        break
                if not events.done:
                    events.raise_failure()
                    batch = events.finish()
                    if batch is not None:
                        yield batch
                if not events.count:
                    raise BackendError(
                        f"{self.kind} backend at {self.url} sent no server-sent events (is --backend-kind right?)"
                    )
                if not events.reader.finished:
                    raise BackendError(f"{self.kind} backend closed the stream before finishing")
                if events.done:
                    await _drain(chunks)
        except ReadTimeout:
            raise BackendError(f"timed out waiting for {where}") from None
        except ConnectFailed as e:
            raise BackendError(f"cannot reach {where}: {e}", unreachable=True) from None
        except ClientError as e:
            raise BackendError(f"lost {where}: {e}") from None

Push = Callable[[TokenBatch], bool]
PushId = Callable[[int], bool]


class _EventReader:
    """One response's server-sent events to token batches: what `Backend.generate` reads, and
    what it pushes from the connection's callback (`pusher`) while a consumer takes pushes."""

    __slots__ = ("backend", "reader", "sse", "count", "done", "held", "failure")

    def __init__(self, backend: Backend, reader: _Reader) -> None:
        self.backend = backend
        self.reader = reader
        self.sse = SseParser()
        self.count = 0  # events read
        self.done = False  # the stream's end came ([DONE], or llama.cpp's last event)
        self.held: list[TokenBatch] = []  # a batch the consumer gave back, for `generate` to yield
        self.failure: BaseException | None = None  # raised in a push, for `generate` to raise

    def feed(self, raw: bytes) -> TokenBatch | None:
        """The batch in `raw` (its events merged), or None."""
        data = self.whole_event(raw)
        if data is not None:
            return self.read_data(data)
        return self._read(self.sse.feed(raw))

    def whole_event(self, raw: bytes) -> bytes | None:
        """The data of `raw` where it is one whole one-line event and nothing else (the usual read
        when the engine is paced; SseParser's answer for it), else None."""
        if (
            raw[:6] == b"data: "
            and raw[-2:] == b"\n\n"
            and raw.find(b"\n") == len(raw) - 2
            and not self.sse.partial
            and b"\r" not in raw
        ):
            return raw[6:-2]
        return None

    def finish(self) -> TokenBatch | None:
        """The batch in an event the stream ended without a blank line after."""
        return self._read(self.sse.finish())

    def _read(self, events: Iterable[tuple[str, bytes]]) -> TokenBatch | None:
        """The batch of these (field, data) events, merged, up to the stream's end."""
        batches: list[TokenBatch] = []
        for field, data in events:
            if field == "error":
                self.count += 1
                raise _error_line(self.backend.kind, data.decode("utf-8", "replace"))
            batch = self.read_data(data)
            if batch is not None:
                batches.append(batch)
            if self.done:
                break
        return merge(batches) if batches else None

    def read_data(self, data: bytes) -> TokenBatch | None:
        """The batch in one event's data, or None (none, or the stream's end: `done`)."""
        self.count += 1
        if data == b"[DONE]":
            self.done = True
            return None
        try:
            event = loads(data)
        except ValueError:
            kind = self.backend.kind
            raise BackendError(f"{kind} backend sent invalid JSON: {_short(_text(data))}") from None
        if type(event) is not dict:
            raise BackendError(f"{self.backend.kind} backend sent a non-object event: {_short(_text(data))}")
        reader = self.reader
        batch = reader.read(event)
        if reader.finished and self.backend.kind == "llamacpp":
            self.done = True  # llama.cpp's last event ends the stream
        if batch is not None and (batch.token_ids or batch.finish_reason or batch.cached_tokens is not None):
            return batch
        return None

    def raise_failure(self) -> None:
        if self.failure is not None:
            failure, self.failure = self.failure, None
            raise failure

    def pusher(self, push: Push, push_id: PushId | None = None) -> Callable[[bytes], bool]:
        """The connection callback for `Response.push_to`: read, then push; False (back to the
        reader) at the stream's end, on a failure, or for a batch `push` declines or that
        finishes the generation (held for `generate` to yield). With `push_id`, a read of one
        whole one-line event of one token id and nothing else goes to it (see `generate`); where
        `push_id` carries what it reads and writes (`lane`) for a vLLM stream, the compiled lane
        (`compiled_lane`) takes such reads instead where it can, this callback the others."""
        one_id = self.reader.one_id if push_id is not None else None

        def pushed(raw: bytes) -> bool:
            try:
                data = self.whole_event(raw) if one_id is not None else None
                if data is not None and data != b"[DONE]":
                    try:
                        event = loads_strict(data)
                    except ValueError:
                        event = None  # `feed` reads it, or says what is wrong with it
                    tid = one_id(event) if type(event) is dict else None
                    if tid is not None:
                        self.count += 1
                        if push_id(tid) or push(TokenBatch((tid,))):
                            return True
                        self.held.append(TokenBatch((tid,)))
                        return False
                batch = self.feed(raw)
                if batch is not None and (batch.finish_reason is not None or not push(batch)):
                    self.held.append(batch)
                    return False
            except BaseException as e:  # raised in the reader's task, not in the event loop's callback
                self.failure = e
                return False
            return not self.done

        lane = getattr(push_id, "lane", None)
        if lane is None or compiled_lane is None or type(self.reader) is not VllmReader:
            return pushed
        text = lane.text
        return compiled_lane(
            pushed, self, self.sse, loads_strict, lane.gen, lane.parser, lane.calls, lane.produced,
            text.pending, text.body, string, text.frames, time.monotonic, text.loop_time,
            chunked=text.chunked, histogram=lane.histogram, filter_here=lane.filter_here,
        )  # fmt: skip


compiled_lane = compiled("Lane")  # (None: the same path runs in Python)

_JSON = {"content-type": "application/json"}
DRAIN_SECONDS = 2.0  # how long to wait for the end of a finished response before dropping the connection


async def _drain(chunks: AsyncIterator[bytes]) -> None:
    """Read what is left of a finished response (the chunked terminator, after ``[DONE]``) so
    the connection can be reused; an engine that does not end it in time loses the connection."""
    try:
        async with asyncio.timeout(DRAIN_SECONDS):  # (a third of anyio.move_on_after's cost, per request)
            async for _ in chunks:
                pass
    except TimeoutError:
        pass


def merge(batches: list[TokenBatch]) -> TokenBatch:
    """One batch for several consecutive ones (ids and logprobs joined, the last finish_reason and
    cached-token count)."""
    if len(batches) == 1:
        return batches[0]
    ids = tuple(t for b in batches for t in b.token_ids)
    if all(b.logprobs is not None or not b.token_ids for b in batches):
        logprobs: tuple[TokenLogprob, ...] | None = tuple(lp for b in batches for lp in b.logprobs or ())
    else:  # an engine that sent logprobs for some events only: they cannot be lined up
        logprobs = None
    cached = next((b.cached_tokens for b in reversed(batches) if b.cached_tokens is not None), None)
    return TokenBatch(ids, logprobs, batches[-1].finish_reason, cached)


class SseParser:
    """Server-sent events from raw bytes, sans-I/O: `feed(bytes)` gives the (field, data) of each
    complete event: field "data" (lines joined by newlines), or "error" for the ``error: {...}``
    lines llama.cpp sends for a failure mid-stream. Other fields and comments are ignored."""

    # what the compiled lane (chatsieve/_lane.c) reads and writes per token: slots, which it reaches
    # by their offsets; any other attribute is in the instance's __dict__
    __slots__ = ("partial", "__dict__", "__weakref__")

    def __init__(self) -> None:
        self.partial = b""  # the start of an event not yet ended by a blank line

    def feed(self, data: bytes) -> list[tuple[str, bytes]]:
        buf = self.partial + data if self.partial else data
        tail = b""
        if b"\r" in buf:  # CRLF or CR line ends: make them LF
            if buf.endswith(b"\r"):
                buf, tail = buf[:-1], b"\r"  # it may be the first half of a CRLF
            buf = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        *blocks, rest = buf.split(b"\n\n")
        self.partial = rest + tail
        if not blocks:
            return []
        out: list[tuple[str, bytes]] = []
        for block in blocks:
            if block.startswith(b"data: ") and b"\n" not in block:
                out.append(("data", block[6:]))  # the usual event: one data line
            else:
                _parse_block(block, out)
        return out

    def finish(self) -> list[tuple[str, bytes]]:
        """The last event if the stream ended without a blank line after it."""
        buf, self.partial = self.partial.replace(b"\r", b"\n"), b""
        out: list[tuple[str, bytes]] = []
        for block in buf.split(b"\n\n"):
            _parse_block(block, out)
        return out


def _parse_block(block: bytes, out: list[tuple[str, bytes]]) -> None:
    lines: list[bytes] = []
    for line in block.split(b"\n"):
        if line.startswith(b"data:"):
            lines.append(line[6:] if line[5:6] == b" " else line[5:])
        elif line.startswith(b"error:"):
            out.append(("error", line[6:].strip()))
        # other fields (event:, id:, retry:) and comments are ignored
    if lines:
        out.append(("data", b"\n".join(lines)))


def _text(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def _error_line(kind: str, data: str) -> BackendError:
    try:
        err = json.loads(data)
    except ValueError:
        err = data
    code = err.get("code") if isinstance(err, dict) else None
    status = code if isinstance(code, int) and not isinstance(code, bool) else None
    return BackendError(f"{kind} backend reported an error: {_error_text(err)}", status=status)


def _body_message(body: bytes) -> str:
    try:
        data = json.loads(body)
    except ValueError:
        return _short(body.decode("utf-8", "replace")) or "(empty body)"
    if isinstance(data, dict):
        if "error" in data:
            return _error_text(data["error"])
        if "message" in data:
            return str(data["message"])
        if "detail" in data:
            return _short(data["detail"])
    return _short(data)
