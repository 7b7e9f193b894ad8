"""Loopback test engines speaking the vLLM, SGLang and llama.cpp streaming protocols.

One `FakeEngine` serves all three routes (``/v1/completions``, ``/generate``, ``/completion``)
and replays scripted token ids: it decodes the request's prompt ids and plays the script whose
key occurs in the prompt text, in batches, the way that engine streams. `ServerThread` runs any
ASGI app with uvicorn on 127.0.0.1, port 0, and stops it on exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import re
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route


@dataclass
class Script:
    token_ids: list[int]
    finish_reason: str = "stop"  # what the engine reports when the ids run out
    batch: int = 1  # ids per streamed event
    fail: str | None = None  # None | "status" | "reject" | "garbage" | "truncate" | "error_event"
    delay: float = 0.0  # seconds between events (to leave room for a disconnect)
    first_delay: float = 0.0  # seconds of silence before the first event (a long prefill)
    ignore_max_tokens: bool = False  # an engine that runs past the max_tokens it was sent
    # Honour the request's constraint as a real engine would: refuse (400) a request that carries
    # none, or whose constraint the scripted output (but its last `constraint_tail` ids, the end
    # token) does not satisfy -- so a forced call or schema that never reaches the engine fails.
    constrained: bool = False
    constraint_tail: int = 1
    unconstrained: bool = False  # refuse a request that carries a constraint (a first, free phase)
    # What the model writes instead where a strict-tool constraint (a structural tag, a lazy
    # grammar: tests/strict_engine.py) refuses its first choice: its next choices, in order
    fallbacks: tuple[list[int], ...] = ()


def fake_logprob(token_id: int) -> float:
    """The deterministic logprob the fake engines report for a sampled token."""
    return -0.25 * ((token_id % 4) + 1)


def fake_top(token_id: int, k: int) -> list[tuple[int, float]]:
    """k alternatives, the sampled token first."""
    lp = fake_logprob(token_id)
    return [(token_id + j, lp - j) for j in range(k)]


class FakeEngine:
    """Replays `scripts` (keyed by a string found in the decoded prompt) over three protocols."""

    def __init__(
        self,
        decode: Callable[[Sequence[int]], str],
        scripts: dict[str, Script] | None = None,
        *,
        sglang_cumulative: bool = False,
        latest: bool = False,
        prefix_cache: bool = False,
        tokenizer: object = None,
        eog: frozenset[int] = frozenset(),
    ) -> None:
        self.decode = decode
        # the family's tokenizer (chatsieve's), to refuse and enforce strict-tool constraints as the
        # real engines do (tests/strict_engine.py); `eog`: llama.cpp's end-of-generation ids
        if tokenizer is None and type(getattr(decode, "__self__", None)).__name__ == "Tokenizer":
            tokenizer = decode.__self__  # `tok.decode` of chatsieve's Tokenizer: enforce with it
        self.tokenizer = tokenizer
        self.eog = eog
        self.chosen: list[int] = []  # per strict-constrained request: which choice it played (0: the first)
        # Report cached prompt tokens as each engine does (vLLM with --enable-prompt-tokens-details,
        # in the usage chunk stream_options.include_usage asks for; SGLang meta_info.cached_tokens;
        # llama.cpp timings.cache_n on its last event): the longest prefix shared with an earlier
        # prompt, the last token always computed, vLLM's in whole blocks of 16. Off: vLLM without
        # the flag (no prompt_tokens_details), SGLang and llama.cpp say 0.
        self.prefix_cache = prefix_cache
        self.prompts: list[list[int]] = []
        self.cached: list[int] = []  # what each request was told its cache served
        self.scripts: dict[str, Script] = dict(scripts or {})
        self.sglang_cumulative = sglang_cumulative
        # False: the longest key found in the prompt plays; True: the key found last in it (an
        # agent session, where each step's prompt holds every earlier step's keys before its own)
        self.latest = latest
        self.requests: list[tuple[str, dict]] = []
        self.healthy = True  # what GET /health says: 200, or 503 when False
        self.outcomes: dict[str, str] = {}  # script key -> "complete" | "cancelled"
        self._outcome_events: dict[str, threading.Event] = {}
        self._lock = threading.Lock()
        self.url = ""  # while `serving`
        self.app = Starlette(
            routes=[
                Route("/v1/completions", self._vllm, methods=["POST"]),
                Route("/generate", self._sglang, methods=["POST"]),
                Route("/completion", self._llamacpp, methods=["POST"]),
                Route("/health", self._health, methods=["GET"]),
            ]
        )
        self.healthy = True  # what GET /health answers: 200, or 503 when False

    @contextlib.contextmanager
    def serving(self) -> Iterator[FakeEngine]:
        """This engine on loopback for the block (`ServerThread`), `.url` set."""
        with ServerThread(self.app) as server:
            self.url = server.url
            yield self

    def outcome(self, key: str, timeout: float = 20.0) -> str | None:
        """Wait for the request playing `key` to end; "complete", "cancelled" or None."""
        with self._lock:
            ev = self._outcome_events.setdefault(key, threading.Event())
        ev.wait(timeout)
        return self.outcomes.get(key)

    async def _health(self, request: Request) -> Response:
        return JSONResponse({}, status_code=200 if self.healthy else 503)

    # ------------------------------------------------------------ helpers

    async def _health(self, request: Request) -> Response:
        return Response(status_code=200 if self.healthy else 503)

    def _pick(self, prompt_ids: list[int]) -> tuple[str, Script]:
        text = self.decode(prompt_ids)
        matches = [k for k in self.scripts if k in text]
        if not matches:
            raise LookupError(f"no script for prompt ...{text[-200:]!r}")
        if self.latest:
            key = max(matches, key=lambda k: (text.rfind(k) + len(k), len(k)))
        else:
            key = max(matches, key=len)
        return key, self.scripts[key]

    def _done(self, key: str, outcome: str) -> None:
        with self._lock:
            self.outcomes[key] = outcome
            self._outcome_events.setdefault(key, threading.Event()).set()

    async def _start(
        self, request: Request, path: str, prompt_field: str
    ) -> tuple[dict, str, Script, list[int], int] | Response:
        payload = await request.json()
        self.requests.append((path, payload))
        prompt = payload.get(prompt_field)
        if not isinstance(prompt, list) or not all(isinstance(i, int) for i in prompt):
            return JSONResponse({"error": {"message": f"{prompt_field} must be token ids"}}, status_code=400)
        cached = self._cached_tokens(prompt, block=16 if path == "/v1/completions" else 1)
        self.cached.append(cached)
        try:
            key, script = self._pick(prompt)
        except LookupError as e:
            return JSONResponse({"error": {"message": str(e)}}, status_code=404)
        refused = self._check_constraint(path, payload, script)
        if refused is not None:
            return JSONResponse({"error": {"message": refused, "code": 400}}, status_code=400)
        from strict_engine import admits, refusal, strict_constraint

        if strict_constraint(path, payload) is not None:
            if self.tokenizer is None:
                return JSONResponse({"error": {"message": "the stand-in needs tokenizer= to enforce a "
                                               "strict-tool constraint"}}, status_code=500)  # fmt: skip
            why = refusal(path, payload, self.tokenizer)
            if why is not None:
                return JSONResponse({"error": {"message": why, "code": 400}}, status_code=400)
            choices = [list(script.token_ids), *script.fallbacks]
            pick = next((i for i, c in enumerate(choices) if admits(path, payload, c, self.tokenizer, self.eog)), None)
            if pick is None:
                return JSONResponse({"error": {"message": "the constraint admits none of the script's outputs",
                                               "code": 500}}, status_code=500)  # fmt: skip
            self.chosen.append(pick)
            script = dataclasses.replace(script, token_ids=choices[pick])
        if script.fail == "status":
            return JSONResponse({"error": {"message": "engine exploded", "code": 500}}, status_code=500)
        if script.fail == "reject":
            message = "This model's maximum context length is 8 tokens"
            return JSONResponse({"object": "error", "message": message, "code": 400}, status_code=400)
        return payload, key, script, prompt, cached

    def _cached_tokens(self, prompt: list[int], block: int) -> int:
        """The prompt tokens this (simulated) prefix cache serves, and the prompt remembered."""
        if not self.prefix_cache:
            return 0
        with self._lock:
            best = 0
            for earlier in self.prompts:
                n = 0
                for a, b in zip(earlier, prompt):
                    if a != b:
                        break
                    n += 1
                best = max(best, n)
            self.prompts.append(list(prompt))
        return min(best, len(prompt) - 1) // block * block

    def _check_constraint(self, path: str, payload: dict, script: Script) -> str | None:
        """Why the engine would refuse this constrained script, or None."""
        if script.unconstrained:
            kind, _ = payload_constraint(path, payload)
            return None if kind is None else f"the script must run unconstrained, the request carries a {kind}"
        if not script.constrained:
            return None
        kind, value = payload_constraint(path, payload)
        ids = list(script.token_ids[: len(script.token_ids) - script.constraint_tail])
        if kind is None:
            return "the script expects a constraint, the request carries none"
        if kind == "grammar":
            from gbnf import accepts, token_char

            named = {int(t) for t in re.findall(r"<\[(\d+)\]>", value)}
            text = "".join(token_char(t) if t in named else self.decode([t]) for t in ids)
            return None if accepts(value, text) else f"the output {text!r} is outside the grammar"
        import jsonschema

        text = self.decode(ids)
        try:
            jsonschema.validate(json.loads(text), value)
        except (ValueError, jsonschema.ValidationError) as e:
            return f"the output {text!r} violates the {kind} constraint: {str(e).splitlines()[0]}"
        return None

    def _play(
        self, script: Script, max_tokens: int | None, stop_ids: Sequence[int]
    ) -> tuple[list[list[int]], str]:
        """The batches to stream and the finish reason, honouring stop ids and max tokens."""
        ids = list(script.token_ids)
        reason = script.finish_reason
        for i, t in enumerate(ids):
            if t in stop_ids:
                ids = ids[: i + 1]
                reason = "stop"
                break
        if max_tokens is not None and max_tokens < len(ids) and not script.ignore_max_tokens:
            ids, reason = ids[:max_tokens], "length"
        batches = [ids[i : i + script.batch] for i in range(0, len(ids), script.batch)] or [[]]
        return batches, reason

    def _stream(self, key: str, script: Script, events: AsyncIterator[str]) -> StreamingResponse:
        async def body() -> AsyncIterator[bytes]:
            outcome = "cancelled"
            try:
                if script.first_delay:
                    await asyncio.sleep(script.first_delay)
                async for data in events:
                    if script.delay:
                        await asyncio.sleep(script.delay)
                    field = "" if data.startswith("error: ") else "data: "
                    yield f"{field}{data}\n\n".encode()
                outcome = "complete"
            finally:
                self._done(key, outcome)

        return StreamingResponse(body(), media_type="text/event-stream")

    # ------------------------------------------------------------ vLLM

    async def _vllm(self, request: Request) -> Response:
        started = await self._start(request, "/v1/completions", "prompt")
        if isinstance(started, Response):
            return started
        payload, key, script, prompt, cached = started
        batches, reason = self._play(script, payload.get("max_tokens"), payload.get("stop_token_ids") or [])
        k = payload.get("logprobs")
        as_ids = payload.get("return_tokens_as_token_ids")
        rid, created = f"cmpl-{uuid.uuid4().hex}", int(time.time())

        async def events() -> AsyncIterator[str]:
            n = len(batches)
            for i, ids in enumerate(batches):
                if script.fail == "garbage":
                    yield "this is not json"
                    return
                if script.fail == "truncate" and i >= max(1, n // 2):
                    return
                if script.fail == "error_event" and i == 1:
                    yield json.dumps({"error": {"message": "CUDA out of memory", "code": 500}})
                    yield "[DONE]"
                    return
                choice = {
                    "index": 0,
                    "text": self.decode(ids),
                    "token_ids": ids,
                    "logprobs": None,
                    "finish_reason": reason if i == n - 1 else None,
                    "stop_reason": None,
                }
                if i == 0:
                    choice["prompt_token_ids"] = prompt
                if k is not None:
                    name = (lambda t: f"token_id:{t}") if as_ids else (lambda t: self.decode([t]))
                    choice["logprobs"] = {
                        "text_offset": [0] * len(ids),
                        "token_logprobs": [fake_logprob(t) for t in ids],
                        "tokens": [name(t) for t in ids],
                        "top_logprobs": [{name(a): v for a, v in fake_top(t, max(k, 1))} for t in ids],
                    }
                chunk = {
                    "id": rid,
                    "object": "text_completion",
                    "created": created,
                    "model": "fake",
                    "choices": [choice],
                }
                yield json.dumps(chunk)
            if (payload.get("stream_options") or {}).get("include_usage"):
                done = sum(len(b) for b in batches)
                usage = {"prompt_tokens": len(prompt), "completion_tokens": done,
                         "total_tokens": len(prompt) + done}
                if self.prefix_cache:  # vLLM --enable-prompt-tokens-details
                    usage["prompt_tokens_details"] = {"cached_tokens": cached}
                yield json.dumps({"id": rid, "object": "text_completion", "created": created, "model": "fake",
                                  "choices": [], "usage": usage})
            yield "[DONE]"

        return self._stream(key, script, events())

    # ------------------------------------------------------------ SGLang

    async def _sglang(self, request: Request) -> Response:
        started = await self._start(request, "/generate", "input_ids")
        if isinstance(started, Response):
            return started
        payload, key, script, prompt, cached = started
        params = payload.get("sampling_params") or {}
        batches, reason = self._play(script, params.get("max_new_tokens"), params.get("stop_token_ids") or [])
        want_lp = payload.get("return_logprob")
        k = payload.get("top_logprobs_num") or 0
        rid = uuid.uuid4().hex
        cumulative = self.sglang_cumulative

        async def events() -> AsyncIterator[str]:
            n = len(batches)
            seen: list[int] = []
            for i, ids in enumerate(batches):
                if script.fail == "garbage":
                    yield "<html>bad gateway</html>"
                    return
                if script.fail == "truncate" and i >= max(1, n // 2):
                    return
                if script.fail == "error_event" and i == 1:
                    yield json.dumps({"error": {"message": "CUDA out of memory"}})
                    return
                seen.extend(ids)
                out = list(seen) if cumulative else ids
                finish = None
                if i == n - 1:
                    finish = (
                        {"type": "length", "length": len(seen)}
                        if reason == "length"
                        else {"type": "stop", "matched": seen[-1] if seen else None}
                    )
                meta = {
                    "id": rid,
                    "finish_reason": finish,
                    "prompt_tokens": len(prompt),
                    "completion_tokens": len(seen),
                    "cached_tokens": cached,
                }
                if want_lp:
                    meta["output_token_logprobs"] = [[fake_logprob(t), t, None] for t in out]
                    meta["output_top_logprobs"] = [[[v, a, None] for a, v in fake_top(t, k)] for t in out]
                yield json.dumps({"text": self.decode(seen), "output_ids": out, "meta_info": meta})
            yield "[DONE]"

        return self._stream(key, script, events())

    # ------------------------------------------------------------ llama.cpp

    async def _llamacpp(self, request: Request) -> Response:
        started = await self._start(request, "/completion", "prompt")
        if isinstance(started, Response):
            return started
        payload, key, script, prompt, cached = started
        n_predict = payload.get("n_predict")
        batches, reason = self._play(script, None if n_predict in (None, -1) else n_predict, [])
        k = payload.get("n_probs") or 0

        def entry(t: int) -> dict:
            text = self.decode([t])
            return {"id": t, "token": text, "bytes": list(text.encode()), "logprob": fake_logprob(t)}

        async def events() -> AsyncIterator[str]:
            n = len(batches)
            produced = 0
            for i, ids in enumerate(batches):
                if script.fail == "garbage":
                    yield "{not json"
                    return
                if script.fail == "truncate" and i >= max(1, n // 2):
                    return
                if script.fail == "error_event" and i == 1:
                    # llama.cpp sends a mid-stream failure as an `error:` field, not `data:`
                    yield "error: " + json.dumps(
                        {"code": 500, "message": "slot crashed", "type": "server_error"}
                    )
                    return
                produced += len(ids)
                event = {
                    "index": 0,
                    "content": self.decode(ids),
                    "tokens": ids,
                    "stop": False,
                    "id_slot": 0,
                    "tokens_predicted": produced,
                    "tokens_evaluated": len(prompt),
                }
                if k:
                    event["completion_probabilities"] = [
                        {**entry(t), "top_logprobs": [{**entry(a), "logprob": v} for a, v in fake_top(t, k)]}
                        for t in ids
                    ]
                yield json.dumps(event)
            yield json.dumps(
                {
                    "index": 0,
                    "content": "",
                    "tokens": [],
                    "stop": True,
                    "stop_type": "limit" if reason == "length" else "eos",
                    "stopping_word": "",
                    "tokens_predicted": produced,
                    "tokens_evaluated": len(prompt),
                    "tokens_cached": len(prompt) + produced,  # the slot's length, not a hit count
                    "truncated": False,
                    "timings": {"cache_n": cached, "prompt_n": len(prompt) - cached, "predicted_n": produced},
                }
            )

        return self._stream(key, script, events())


def payload_constraint(path: str, payload: dict) -> tuple[str | None, object]:
    """The constraint an engine request carries, per protocol: ("grammar", GBNF text),
    ("json_schema", schema), ("json_object", {"type": "object"}) or (None, None)."""
    if path == "/v1/completions":
        so = payload.get("structured_outputs") or {}
        if "grammar" in so:
            return "grammar", so["grammar"]
        if so.get("json_object"):
            return "json_object", {"type": "object"}
        if "json" in so:
            return "json_schema", so["json"]
        return None, None
    if path == "/generate":
        params = payload.get("sampling_params") or {}
        if "ebnf" in params:
            return "grammar", params["ebnf"]
        if "json_schema" in params:
            return "json_schema", json.loads(params["json_schema"])
        return None, None
    if "grammar" in payload:
        return "grammar", payload["grammar"]
    if "json_schema" in payload:
        return "json_schema", payload["json_schema"]
    return None, None


class ServerThread:
    """Runs an ASGI app with uvicorn on 127.0.0.1:0 in a thread; `.url` and `.port` once entered;
    `options` override the uvicorn settings (`chatsieve.server.uvicorn_options` gives serve's own).
    The HTTP protocol is the one `chatsieve serve` runs (uvicorn's h11, bounded, streamed bodies
    written past h11); `http="h11"` is uvicorn's own."""

    def __init__(self, app, *, lifespan: str = "on", **options) -> None:
        from chatsieve.server.security import guarded_h11

        settings = {
            "host": "127.0.0.1",
            "port": 0,
            "log_level": "warning",
            "lifespan": lifespan,
            "loop": "asyncio",
            "http": guarded_h11(10.0, 10_000),
            "ws": "none",
            "timeout_graceful_shutdown": 5,
        }
        config = uvicorn.Config(app, **{**settings, **options})
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.url = ""
        self.port = 0

    def __enter__(self) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("test server failed to start")
            time.sleep(0.01)
        self.port = self.server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(30)


def spelled(encode: Callable[[str], list[int]], text: str, delimiters: Sequence[str]) -> list[int]:
    """Ids for `text` with every delimiter spelled from ordinary sub-word pieces (as an echoed
    tool result would be), never as its added-token id: each delimiter is encoded in two halves."""
    ids: list[int] = []
    rest = text
    while rest:
        hits = [(rest.find(d), d) for d in delimiters if d in rest]
        if not hits:
            ids += encode(rest)
            break
        at, d = min(hits)
        if at:
            ids += encode(rest[:at])
        half = max(1, len(d) // 2)
        ids += encode(d[:half]) + encode(d[half:])
        rest = rest[at + len(d) :]
    return ids


@contextlib.contextmanager
def serve_process(*argv: str, timeout: float = 120.0):
    """`chatsieve serve ARGV` in a process of its own on a free loopback port, as a user runs
    it; yields (process, port, URL) once its /health answers, and stops it afterwards."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code = "import sys; from chatsieve.server import serve_main; sys.exit(serve_main(sys.argv[1:]))"
    proc = subprocess.Popen(
        [sys.executable, "-c", code, *argv, "--port", str(port)],
        cwd=Path(__file__).resolve().parent.parent,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            assert proc.poll() is None, proc.stderr.read().decode()
            try:
                if httpx.get(url + "/health", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "chatsieve serve did not come up"
            time.sleep(0.1)
        yield proc, port, url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stderr.close()
