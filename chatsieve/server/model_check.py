"""Start-up check that the engine's model and chatsieve's tokenizer share one vocabulary.

chatsieve decodes the engine's token ids with its own tokenizer: with another model's
vocabulary every id would mean another token. The model's GGUF (given with --gguf, or the
file a local llama-server reports in /props) is compared with the tokenizer before serving.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import httpx

from chatsieve.gguf import GGUFError, check_vocab

log = logging.getLogger("chatsieve.server")


class ModelMismatch(RuntimeError):
    """The engine's model does not match the tokenizer; the server must not start."""


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
