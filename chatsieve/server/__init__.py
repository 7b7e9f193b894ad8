"""`chatsieve serve`: an OpenAI-compatible chat server in front of an engine that speaks token ids.

`serve_main(argv)` is the CLI entry; `create_app(ServerConfig(...))` gives the ASGI app.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

KINDS = ("vllm", "sglang", "llamacpp")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="chatsieve serve",
        description="Serve OpenAI chat completions (reasoning_content, content, tool_calls) in front of "
        "a vLLM, SGLang or llama.cpp server, parsing the model's token ids with chatsieve.",
    )
    p.add_argument("--model-dir", required=True, help="directory with the tokenizer and chat template")
    p.add_argument("--format", required=True, help="chatsieve format name (e.g. qwen3, gemma4)")
    p.add_argument(
        "--backend", required=True, metavar="URL", help="engine base URL, e.g. http://127.0.0.1:8001"
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
    p.add_argument("--max-connections", type=int, default=1024, help="pooled connections to the engine")
    p.add_argument(
        "--gguf",
        default=None,
        metavar="PATH",
        help="the engine's GGUF model file: refuse to start unless its vocabulary matches the tokenizer "
        "(a local llama-server's model is found through its /props without this)",
    )
    p.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    return p


def config_from_args(args: argparse.Namespace):  # -> ServerConfig
    from chatsieve.server.app import ServerConfig

    return ServerConfig(
        model_dir=Path(args.model_dir),
        format=args.format,
        backend_url=args.backend,
        backend_kind=args.backend_kind,
        served_model_name=args.served_model_name,
        backend_model=args.backend_model,
        timeout=args.backend_timeout,
        max_connections=args.max_connections,
        gguf=Path(args.gguf) if args.gguf else None,
    )


def serve_main(argv: Sequence[str] | None = None) -> int:
    """Run the server until interrupted; 2 with a one-line error on bad arguments."""
    args = build_parser().parse_args(argv)

    def fail(msg: str) -> int:
        print(f"chatsieve serve: error: {msg}", file=sys.stderr)
        return 2

    if not Path(args.model_dir).is_dir():
        return fail(f"--model-dir {args.model_dir!r} is not a directory")
    if not args.backend.startswith(("http://", "https://")):
        return fail(f"--backend must be an http(s) URL, got {args.backend!r}")
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
    try:
        app = create_app(config_from_args(args))
    except Exception as e:
        return fail(f"cannot load the tokenizer from {args.model_dir}: {e}")
    if args.gguf:  # checked here too, so a mismatch is one clear line before uvicorn starts
        from chatsieve.server.model_check import ModelMismatch, check_model

        try:
            check_model(Path(args.gguf), app.state.service.tokenizer)
        except ModelMismatch as e:
            return fail(str(e))
    logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s:     %(name)s: %(message)s")
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level)
    return 0
