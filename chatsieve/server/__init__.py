"""`chatsieve serve`: an OpenAI-compatible chat server in front of an engine that speaks token ids.

`serve_main(argv)` is the CLI entry; `create_app(ServerConfig(...))` gives the ASGI app.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

KINDS = ("vllm", "sglang", "llamacpp")
KEEP_ALIVE_TIMEOUT = (
    75.0  # above common idle timeouts in front of us: httpx 5 s, aiohttp 15 s, load balancers 60 s
)
CONFIG_ENV = "CHATSIEVE_SERVE_CONFIG"  # how --workers processes get the configuration


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="chatsieve serve",
        description="Serve OpenAI chat completions (reasoning_content, content, tool_calls) in front of "
        "a vLLM, SGLang or llama.cpp server, parsing the model's token ids with chatsieve.",
    )
    p.add_argument("--model-dir", required=True, help="directory with the tokenizer and chat template")
    p.add_argument("--format", required=True, help="chatsieve format name (e.g. qwen3, gemma4)")
    p.add_argument(
        "--backend",
        required=True,
        action="append",
        metavar="URL",
        help="engine base URL, e.g. http://127.0.0.1:8001; give it again for more replicas of the same "
        "model (each request goes to the least-loaded healthy one)",
    )
    p.add_argument("--backend-kind", choices=KINDS, default="vllm", help="engine protocol (default: vllm)")
    p.add_argument("--backend-model", default=None, help="model name to send to the engine, if it needs one")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--served-model-name", default=None, help="model id clients use (default: the dir name)")
    p.add_argument(
        "--backend-timeout",
        type=float,
        default=600.0,
        help="seconds to wait for the engine's next byte (600)",
    )
    p.add_argument(
        "--max-connections",
        type=int,
        default=1024,
        help="kept-alive connections to each engine, at most this many at once (1024)",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=1,
        help="server processes sharing the port (1); up to one per core scales tokens/s",
    )
    p.add_argument(
        "--keep-alive-timeout",
        type=float,
        default=KEEP_ALIVE_TIMEOUT,
        help=f"seconds an idle client connection is kept open ({KEEP_ALIVE_TIMEOUT:g}); keep it above "
        "the idle timeout of clients and load balancers in front, so they never reuse a closed one",
    )
    p.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    return p


def config_from_args(args: argparse.Namespace):  # -> ServerConfig
    from chatsieve.server.app import ServerConfig

    return ServerConfig(
        model_dir=Path(args.model_dir),
        format=args.format,
        backend_url=args.backend[0],
        extra_backend_urls=tuple(args.backend[1:]),
        backend_kind=args.backend_kind,
        served_model_name=args.served_model_name,
        backend_model=args.backend_model,
        timeout=args.backend_timeout,
        max_connections=args.max_connections,
    )


def serve_main(argv: Sequence[str] | None = None) -> int:
    """Run the server until interrupted; 2 with a one-line error on bad arguments."""
    args = build_parser().parse_args(argv)

    def fail(msg: str) -> int:
        print(f"chatsieve serve: error: {msg}", file=sys.stderr)
        return 2

    if not Path(args.model_dir).is_dir():
        return fail(f"--model-dir {args.model_dir!r} is not a directory")
    for url in args.backend:
        if not url.startswith(("http://", "https://")):
            return fail(f"--backend must be an http(s) URL, got {url!r}")
    if args.workers < 1:
        return fail(f"--workers must be at least 1, got {args.workers}")
    if args.max_connections < 1:
        return fail(f"--max-connections must be at least 1, got {args.max_connections}")
    try:
        import uvicorn

        from chatsieve import formats
        from chatsieve.server.app import create_app
    except ImportError as e:
        return fail(f"{e}; install the server extra: pip install 'chatsieve[server]'")
    try:
        formats.get(args.format)
    except Exception as e:  # unknown format: the registry's message lists the known ones
        return fail(str(e))
    config = config_from_args(args)
    try:
        app = create_app(config)
    except Exception as e:
        return fail(f"cannot load the tokenizer from {args.model_dir}: {e}")
    logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s:     %(name)s: %(message)s")
    options = uvicorn_options(args)
    if args.workers > 1:
        # each worker process builds its own app from the configuration in the environment
        del app
        os.environ[CONFIG_ENV] = config.to_json()
        uvicorn.run("chatsieve.server.app:app_from_environ", factory=True, workers=args.workers, **options)
    else:
        uvicorn.run(app, **options)
    return 0


def uvicorn_options(args: argparse.Namespace) -> dict:
    """uvicorn settings for `chatsieve serve` (also used by the tests)."""
    return {
        "host": args.host,
        "port": args.port,
        "log_level": args.log_level,
        "timeout_keep_alive": args.keep_alive_timeout,
        "backlog": 4096,
    }
