"""Start-up checks of the engine: it is the kind of engine the server was told it is, and its
model shares one vocabulary with chatsieve's tokenizer.

chatsieve decodes the engine's token ids with its own tokenizer: with another model's
vocabulary every id would mean another token. The model's GGUF (given with --gguf, or the
file a local llama-server reports in /props) is compared with the tokenizer before serving.
An engine of another kind than --backend-kind would answer every request with an error.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import httpx

from chatsieve.gguf import GGUFError, check_vocab

log = logging.getLogger("chatsieve.server")


class StartupRefusal(RuntimeError):
    """The engine is not what the server was configured for; the server must not start. Its
    message is one line: what is wrong and what to do."""


class ModelMismatch(StartupRefusal):
    """The engine's model does not match the tokenizer."""


class EngineKindMismatch(StartupRefusal):
    """The engine answers as another kind of engine than --backend-kind."""


ENGINE_NAMES = {"vllm": "vLLM", "sglang": "SGLang", "llamacpp": "llama.cpp's llama-server"}


async def identify_engine(client: httpx.AsyncClient, base_url: str) -> str | None:
    """The kind of engine at `base_url` ("vllm", "sglang", "llamacpp") as it names itself: the
    `owned_by` of its /v1/models, else llama-server's /props; None when it does not answer or
    says nothing that tells."""
    base = base_url.rstrip("/")
    try:
        resp = await client.get(base + "/v1/models")
        data = resp.json() if resp.status_code == 200 else None
        models = data.get("data") if isinstance(data, dict) else None
        owners = {m.get("owned_by") for m in models if isinstance(m, dict)} if isinstance(models, list) else set()
        if len(owners) == 1 and (owner := owners.pop()) in ENGINE_NAMES:
            return owner
        resp = await client.get(base + "/props")
        data = resp.json() if resp.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None
    if isinstance(data, dict) and "default_generation_settings" in data:
        return "llamacpp"
    return None


async def check_engine_kind(client: httpx.AsyncClient, base_url: str, kind: str) -> None:
    """Raise EngineKindMismatch when the engine at `base_url` names itself as another kind."""
    found = await identify_engine(client, base_url)
    if found is not None and found != kind:
        raise EngineKindMismatch(
            f"the engine at {base_url} is {ENGINE_NAMES[found]}, not {ENGINE_NAMES.get(kind, kind)}: "
            f"give --backend-kind {found}"
        )


async def engine_model_path(client: httpx.AsyncClient, base_url: str) -> Path | None:
    """The model file a llama-server reports in /props, if it answers and the file is readable here."""
    try:
        resp = await client.get(base_url.rstrip("/") + "/props")
        data = resp.json() if resp.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None
    path = data.get("model_path") if isinstance(data, dict) else None
    if isinstance(path, str) and path and Path(path).is_file():
        return Path(path)
    return None


def check_model(path: Path, tokenizer: Any) -> None:
    """Raise ModelMismatch when the GGUF at `path` does not match `tokenizer`."""
    try:
        check_vocab(path, tokenizer)
    except (GGUFError, OSError) as e:
        raise ModelMismatch(f"refusing to serve: {e}") from None
    log.info("the model %s matches the tokenizer's vocabulary", path)
