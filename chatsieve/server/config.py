"""The server's configuration (`ServerConfig`): what `chatsieve serve` was given, and its JSON
for `--workers` processes.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

from chatsieve.protocols.common import RequestLimits
from chatsieve.server.security import SecurityPolicy

# where `chatsieve serve --workers N` puts the configuration (its JSON) for the worker processes
CONFIG_ENV = "CHATSIEVE_SERVE_CONFIG"


@dataclass(frozen=True)
class ServerConfig:
    model_dir: Path
    format: str
    backend_url: str
    backend_kind: str = "vllm"
    served_model_name: str | None = None
    backend_model: str | None = None  # the engine's model name, if it insists on one
    timeout: float = 600.0  # seconds without a byte from the engine before giving up
    max_connections: int = 1024
    warm_up: bool = True  # render one prompt at start-up so the first request does not pay for setup
    max_model_len: int | None = None  # the context in tokens; None: from the model directory
    limits: RequestLimits = RequestLimits()  # stop strings, JSON depth (max_model_len is filled in)
    security: SecurityPolicy = SecurityPolicy()  # API keys, Host allow-list, body size and time
    cors_origins: tuple[str, ...] = ()  # browser origins allowed to call the API (none by default)
    gguf: Path | None = None  # the engine's model file, checked against the tokenizer at start-up
    check_engine_model: bool = True  # llamacpp: also check the GGUF the engine reports in /props
    extra_backend_urls: tuple[str, ...] = ()  # more replicas of the engine at backend_url
    model_aliases: tuple[str, ...] = ()  # more model names clients may ask for (--model-alias)
    # the Responses API's stored responses (server/response_store.py); the CLI's default is a file
    response_store: str = ":memory:"
    response_store_max: int = 10_000  # responses kept, the oldest evicted first
    response_store_max_age: float = 30 * 24 * 3600.0  # seconds a stored response is kept
    response_store_max_bytes: int = 1 << 30  # the stored rows' JSON, the oldest evicted first
    # what a continuation (previous_response_id) may load: items, and bytes (None: max_body_bytes,
    # what one request could send instead)
    response_chain_max_items: int = 10_000
    response_chain_max_bytes: int | None = None
    max_concurrent_prompts: int = 8  # prompts prepared at once (render, isolate, tokenize, grammar)
    prompt_queue_timeout: float = 5.0  # seconds a request waits for a free slot before its 503
    chat_template: Path | None = None  # --chat-template: replaces the model directory's template
    format_file: Path | None = None  # --format-file: the family `format` names comes from this file
    # --reasoning-effort-budgets: reasoning tokens per effort, over protocols.common.EFFORT_BUDGETS
    effort_budgets: tuple[tuple[str, int], ...] = ()

    @property
    def model_name(self) -> str:
        return self.served_model_name or Path(self.model_dir).resolve().name

    @property
    def backend_urls(self) -> tuple[str, ...]:
        return (self.backend_url, *self.extra_backend_urls)

    def to_json(self) -> str:
        """The configuration as JSON, for `--workers` processes (which cannot be handed objects)."""
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        d["model_dir"] = str(self.model_dir)
        d["gguf"] = None if self.gguf is None else str(self.gguf)
        d["chat_template"] = None if self.chat_template is None else str(self.chat_template)
        d["format_file"] = None if self.format_file is None else str(self.format_file)
        d["limits"] = dataclasses.asdict(self.limits)
        d["security"] = {**dataclasses.asdict(self.security), "open_paths": sorted(self.security.open_paths)}
        return json.dumps(d)

    @classmethod
    def from_json(cls, text: str) -> ServerConfig:
        d = json.loads(text)
        sec = d["security"]
        return cls(
            **{
                **d,
                "model_dir": Path(d["model_dir"]),
                "gguf": None if d.get("gguf") is None else Path(d["gguf"]),
                "chat_template": None if d.get("chat_template") is None else Path(d["chat_template"]),
                "format_file": None if d.get("format_file") is None else Path(d["format_file"]),
                "extra_backend_urls": tuple(d.get("extra_backend_urls", ())),
                "model_aliases": tuple(d.get("model_aliases", ())),
                "effort_budgets": tuple((e, b) for e, b in d.get("effort_budgets", ())),
                "cors_origins": tuple(d.get("cors_origins", ())),
                "limits": RequestLimits(**d["limits"]),
                "security": SecurityPolicy(
                    **{
                        **sec,
                        "api_keys": tuple(sec["api_keys"]),
                        "allowed_hosts": None if sec["allowed_hosts"] is None else tuple(sec["allowed_hosts"]),
                        "open_paths": frozenset(sec["open_paths"]),
                    }
                ),
            }
        )
