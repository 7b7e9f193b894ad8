"""The six families whose templates an agent session meets differently (qwen3, qwen3_coder,
gemma4, glm47, kimi_k2, gpt_oss): their real tokenizers and templates, how each model writes
reasoning, text and calls (the stand-in engine's scripts), and an in-process `chatsieve serve`
in front of a `FakeEngine` that plays each session step by the key found last in its prompt.

Shared by the agent end-to-end tests (test_claude_code.py, test_codex_e2e.py) and the protocol
tests with the real SDKs (test_agent_controls.py).
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
import struct
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path

from fake_engines import FakeEngine, Script, ServerThread, spelled
from test_server_agent_loop import FAMILIES as LOOP_FAMILIES
from test_server_agent_loop import _tokenizer
from test_server_responses import WRITERS, Writer

from chatsieve import formats
from chatsieve.prompt import thinking_switch
from chatsieve.server.app import create_app
from chatsieve.server.config import ServerConfig
from chatsieve.server.security import SecurityPolicy

SIX = ("qwen3", "qwen3_coder", "gemma4", "glm47", "kimi_k2", "gpt_oss")
CONTEXT = 40_960  # Qwen3-8B's context (its config.json): the agents' recipes are run against it


def _coder_value(v: object) -> str:
    return v if isinstance(v, str) else str(v)


FAMILY_WRITERS: dict[str, Writer] = {
    **{f: WRITERS[f] for f in SIX if f in WRITERS},
    # Qwen3-Coder: XML values, written raw between the template's own newlines; no thinking
    "qwen3_coder": Writer(
        call=lambda i, n, a: (
            f"<tool_call>\n<function={n}>\n"
            + "".join(f"<parameter={k}>\n{_coder_value(v)}\n</parameter>\n" for k, v in a.items())
            + "</function>\n</tool_call>"
        ),
        end="<|im_end|>",
    ),
}


@functools.cache
def tokenizer(family: str):
    """The family's real tokenizer with its chat template (tests/test_server_agent_loop.py)."""
    return _tokenizer(LOOP_FAMILIES[family])


def thinks(family: str, switch: bool | None) -> bool:
    """Whether the model writes reasoning when a request sets the thinking switch to `switch`
    (None: unset): gpt-oss always does; a family whose template has no switch keeps its default."""
    spec = formats.get(family)
    if spec.name == "gpt_oss":
        return True
    if switch is None or not thinking_switch(tokenizer(family)):
        return spec.default_thinking
    return switch


def model_output(
    family: str, *, thinking: bool, reasoning: str = "", text: str = "", calls: tuple = (), first_call: int = 0
) -> str:
    """What the family's model writes: its reasoning (when it thinks), text, calls, end of turn.
    Kimi numbers its calls across the conversation (`functions.Read:3`): its first is `first_call`."""
    out = FAMILY_WRITERS[family].out(reasoning=reasoning if thinking else None, text=text, calls=calls)
    return renumbered(family, out, first_call)


def renumbered(family: str, out: str, first_call: int) -> str:
    """Kimi's call ids in `out` counted from `first_call` (a session's ids never repeat)."""
    if family != "kimi_k2" or not first_call:
        return out
    return re.sub(r"(functions\.[A-Za-z0-9_.\-]+):(\d+)", lambda m: f"{m.group(1)}:{int(m.group(2)) + first_call}", out)


def reasoning_head(family: str, reasoning: str, *, thinking: bool) -> str:
    """What the family's model writes before a call when it thinks: its reasoning block."""
    if not thinking:
        return ""
    if formats.get(family).name == "gpt_oss":
        return f"<|channel|>analysis<|message|>{reasoning}<|end|><|start|>assistant"
    return FAMILY_WRITERS[family].think(reasoning)


def unfinished_call(family: str, name: str, args: dict, *, cut: str, first_call: int = 0) -> str:
    """A call the model never finished (its arguments cut before `cut`, a string in them), then the
    end of its turn: what the parser cannot read."""
    w = FAMILY_WRITERS[family]
    full = renumbered(family, w.section(w.call(0, name, args)), first_call)
    return full[: full.index(cut)] + ("<|call|>" if formats.get(family).name == "gpt_oss" else (w.call_end or w.end))


def encode(family: str, text: str, spell: Sequence[str] = ()) -> list[int]:
    """The ids of `text` as the model produces them, but each occurrence of a string in `spell`
    with the family's delimiters spelled from ordinary sub-word pieces (text the model repeats,
    never its control tokens)."""
    tok = tokenizer(family)
    delimiters = formats.get(family).delimiters
    ids: list[int] = []
    rest = text
    while rest:
        hits = [(rest.find(s), s) for s in spell if s and s in rest]
        if not hits:
            ids += tok.encode(rest)
            break
        at, piece = min(hits)
        if at:
            ids += tok.encode(rest[:at])
        ids += spelled(tok.encode, piece, delimiters)
        rest = rest[at + len(piece) :]
    return ids


def tricky_text(family: str) -> str:
    """A value an edit must write byte-exact: closing and opening tags of the XML-value families
    in a sentence, a whole example call in Qwen3-Coder's syntax (a docstring of parser code), and
    every delimiter of the family's own format, spelled as text."""
    return (
        "keep these: x = '</parameter>' and <parameter=x> and </function> stay text\n"
        'EXAMPLE = """\n<tool_call>\n<function=write_file>\n<parameter=content>\nhello\n</parameter>\n'
        '</function>\n</tool_call>\n"""\n'
        "delimiters: " + " ".join(formats.get(family).delimiters)
    )


def png(width: int = 4, height: int = 4, rgb: tuple[int, int, int] = (0, 0, 255)) -> bytes:
    """A small valid PNG (the agents check what they read)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    rows = b"".join(b"\x00" + bytes(rgb) * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


class Recorder:
    """ASGI middleware keeping each request's path and JSON body (what the agent sent) and each
    response's headers, in order."""

    def __init__(self, app) -> None:
        self.app = app
        self.requests: list[tuple[str, dict]] = []
        self.headers: list[dict[str, str]] = []

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "POST":
            return await self.app(scope, receive, send)
        chunks, more = [], True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        self.requests.append((scope["path"], json.loads(body) if body else {}))
        given = False

        async def replay():
            nonlocal given
            if not given:
                given = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        async def keep(message):
            if message["type"] == "http.response.start":
                self.headers.append({k.decode(): v.decode() for k, v in message.get("headers", [])})
            await send(message)

        await self.app(scope, replay, keep)


@contextlib.contextmanager
def served(
    tmp: Path, family: str, scripts: dict[str, Script], *, model: str, key: str | None = None,
    format: str | None = None, engine_options: dict | None = None, **config
) -> Iterator[tuple[str, FakeEngine, Recorder]]:
    """`chatsieve serve` (in process) for `family` with a 40,960-token context, in front of a
    stand-in engine playing `scripts` by the key found last in each prompt; (URL, engine, the
    requests the server got). `format` replaces the family's name (`auto`: detected);
    `engine_options` go to the `FakeEngine`."""
    tok = tokenizer(family)
    engine = FakeEngine(tok.decode, scripts, latest=True, **(engine_options or {}))
    with contextlib.ExitStack() as stack:
        engine_url = stack.enter_context(ServerThread(engine.app)).url
        cfg = ServerConfig(
            model_dir=tmp,
            format=format or LOOP_FAMILIES[family].format,
            backend_url=engine_url,
            served_model_name=model,
            warm_up=False,
            max_model_len=CONTEXT,
            response_store=str(tmp / "responses.db"),
            security=SecurityPolicy(api_keys=(key,) if key else ()),
            **config,
        )
        recorder = Recorder(create_app(cfg, tokenizer=tok))
        url = stack.enter_context(ServerThread(recorder)).url
        yield url, engine, recorder


def prompts(engine: FakeEngine, since: int = 0) -> list[list[int]]:
    """The prompt ids of the engine requests from `since` on."""
    return [payload["prompt"] for _, payload in engine.requests[since:]]


def prefix_breaks(ids: Sequence[Sequence[int]]) -> list[int]:
    """The steps k whose prompt does not start with step k-1's (what a prefix cache loses)."""
    return [k for k in range(1, len(ids)) if list(ids[k][: len(ids[k - 1])]) != list(ids[k - 1])]
