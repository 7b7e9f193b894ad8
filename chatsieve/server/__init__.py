"""`chatsieve serve`: an OpenAI- and Anthropic-compatible chat server in front of an engine that speaks token ids.

`serve_main(argv)` is the CLI entry; `create_app(ServerConfig(...))` gives the ASGI app.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

KINDS = ("vllm", "sglang", "llamacpp")
KEEP_ALIVE_TIMEOUT = (
    75.0  # above common idle timeouts in front of us: httpx 5 s, aiohttp 15 s, load balancers 60 s
)
# what the server imports that the core does not (pyproject.toml's `server` extra, by module name)
SERVER_EXTRA = ("anyio", "h11", "httptools", "httpx", "jinja2", "jsonschema", "orjson", "prometheus_client",
                "starlette", "tokenizers", "uvicorn")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="chatsieve serve",
        description="Serve OpenAI chat completions (reasoning_content, content, tool_calls) and Anthropic "
        "Messages in front of a vLLM, SGLang or llama.cpp server, parsing the model's token ids with chatsieve.",
    )
    p.add_argument(
        "--model-dir",
        default=None,
        help="directory with the tokenizer and chat template (not needed with --gguf: the GGUF's own "
        "vocabulary and chat template are used)",
    )
    p.add_argument(
        "--format",
        default=None,
        help="chatsieve format name (e.g. qwen3, gemma4), or 'auto' (the default when the model's chat "
        "template is there): the format is found from the chat template, and logged and shown in /v1/models",
    )
    p.add_argument(
        "--format-file",
        default=None,
        metavar="FILE",
        help="a model family described in a format file (YAML or JSON, docs/format-files.md) instead of --format",
    )
    p.add_argument(
        "--backend",
        required=True,
        action="append",
        metavar="URL",
        help="engine base URL, e.g. http://127.0.0.1:8001; give it again for more replicas of the same "
        "model (each request goes to the least-loaded healthy one)",
    )
    p.add_argument(
        "--chat-template",
        default=None,
        metavar="PATH",
        help="chat template file to render prompts with instead of the model directory's (vLLM's option; "
        "e.g. one that renders tools where the model's own template ignores them); checked at start-up",
    )
    p.add_argument("--backend-kind", choices=KINDS, default="vllm", help="engine protocol (default: vllm)")
    p.add_argument("--backend-model", default=None, help="model name to send to the engine, if it needs one")
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default: 127.0.0.1, this machine only; another address needs --api-key "
        "or --allow-unauthenticated)",
    )
    p.add_argument("--port", type=int, default=8000, help="port to listen on (default: 8000)")
    p.add_argument("--served-model-name", default=None, help="model id clients use (default: the dir name)")
    p.add_argument(
        "--model-alias",
        action="append",
        default=[],
        metavar="NAME",
        help="another model name that resolves to the served model (repeat for several), e.g. the "
        "names an agent asks for",
    )
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
        "--gguf",
        default=None,
        metavar="PATH",
        help="the engine's GGUF model file: alone, chatsieve takes the tokenizer and chat template from "
        "it; with --model-dir, refuse to start unless its vocabulary matches that tokenizer (a local "
        "llama-server's model is found through its /props without this)",
    )
    store = p.add_argument_group("Responses API store (previous_response_id, GET /v1/responses/{id})")
    store.add_argument(
        "--response-store",
        default=None,
        metavar="PATH",
        help="SQLite file for stored responses (default: ~/.cache/chatsieve/responses.sqlite3, under "
        "$XDG_CACHE_HOME when set), made readable by this account only; ':memory:' keeps them in this "
        "process only (not with --workers above 1)",
    )
    store.add_argument(
        "--response-store-max", type=int, default=10_000, help="stored responses kept; the oldest go first (10000)"
    )
    store.add_argument(
        "--response-store-max-age",
        type=float,
        default=30 * 24 * 3600.0,
        metavar="SECONDS",
        help="how long a stored response is kept after it, or a response continuing it, was stored (30 days)",
    )
    store.add_argument(
        "--response-store-max-bytes",
        type=int,
        default=1 << 30,
        metavar="N",
        help="stored responses' JSON kept, in bytes; the least recently continued go first (1 GiB)",
    )
    p.add_argument(
        "--log-level",
        default="info",
        choices=["critical", "error", "warning", "info", "debug"],
        help="the server log's level (default: info)",
    )

    access = p.add_argument_group("access control")
    access.add_argument(
        "--api-key",
        action="append",
        default=[],
        metavar="KEY",
        help="a key clients send as 'Authorization: Bearer KEY' (repeat for several; also "
        "CHATSIEVE_API_KEY, comma-separated); every route but /health then needs one",
    )
    access.add_argument(
        "--allow-unauthenticated",
        action="store_true",
        help="bind a non-loopback --host without an API key (behind a proxy that authenticates)",
    )
    access.add_argument(
        "--allowed-hosts",
        default=None,
        metavar="H1,H2",
        help="Host header names accepted ('*': any); default: the loopback names and --host, "
        "or any when --host is 0.0.0.0 or ::",
    )
    access.add_argument(
        "--cors-origins",
        default="",
        metavar="O1,O2",
        help="browser origins allowed to call the API, e.g. https://app.example ('*': any); default none",
    )

    limits = p.add_argument_group("limits")
    limits.add_argument(
        "--max-request-bytes", type=int, default=4 * 1024 * 1024, help="largest request body (4 MiB): 413"
    )
    limits.add_argument(
        "--max-model-len",
        type=int,
        default=None,
        help="the model's context in tokens (default: config.json's max_position_embeddings, else the "
        "tokenizer's model_max_length); longer prompts, or prompt plus max_tokens, are a 400",
    )
    limits.add_argument(
        "--fit-max-tokens",
        action="store_true",
        help="chat completions too: lower a max_tokens above the room the prompt leaves in the context to "
        "that room (the x-chatsieve-max-tokens-lowered response header says so) instead of a 400, as "
        "/v1/messages and /v1/responses always do",
    )
    p.add_argument(
        "--reasoning-effort-budgets",
        default=None,
        metavar="JSON",
        help="reasoning tokens per effort, for requests that ask an effort and give no budget, e.g. "
        "'{\"low\": 2048, \"high\": 16384}' (defaults: minimal 1024, low 4096, medium 16384, high 32768, "
        "xhigh 65536; max none); past its budget the reasoning is closed and the answer goes on",
    )
    limits.add_argument("--max-stop-strings", type=int, default=16, help="stop strings per request (16)")
    limits.add_argument("--max-stop-length", type=int, default=256, help="characters per stop string (256)")
    limits.add_argument(
        "--limit-concurrency",
        type=int,
        default=512,
        help="open client connections (512): beyond it requests get 503, and connections past "
        "a small headroom are closed unread",
    )
    limits.add_argument(
        "--timeout-header", type=float, default=10.0, help="seconds to send a request's headers (10)"
    )
    limits.add_argument("--timeout-body", type=float, default=30.0, help="seconds to send a request body (30)")
    limits.add_argument(
        "--timeout-keep-alive",
        "--keep-alive-timeout",
        dest="timeout_keep_alive",
        type=float,
        default=KEEP_ALIVE_TIMEOUT,
        help=f"seconds an idle client connection is kept open ({KEEP_ALIVE_TIMEOUT:g}); keep it above the "
        "idle timeout of clients and load balancers in front, so they never reuse a closed one",
    )
    limits.add_argument(
        "--max-concurrent-prompts",
        type=int,
        default=8,
        help="prompts prepared at once (rendered, isolated, tokenized, grammar built) (8); a request "
        "that finds none free within 5 s is a 503",
    )
    limits.add_argument(
        "--max-header-bytes", type=int, default=16 * 1024, help="largest request head, in bytes (16 KiB)"
    )
    return p


def _split(value: str | None) -> tuple[str, ...]:
    return tuple(v.strip() for v in (value or "").split(",") if v.strip())


def api_keys(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """--api-key values and CHATSIEVE_API_KEY's comma-separated keys."""
    env = (os.environ if environ is None else environ).get("CHATSIEVE_API_KEY", "")
    return tuple(dict.fromkeys([*args.api_key, *_split(env)]))


def connection_headroom(limit_concurrency: int) -> int:
    """Connections kept open beyond --limit-concurrency (those get uvicorn's 503) before new
    ones are closed unread."""
    return max(16, limit_concurrency // 8)


def uvicorn_options(args: argparse.Namespace) -> dict:
    """uvicorn.Config keywords bounding slow and idle clients (slowloris)."""
    from chatsieve.server.security import guarded_h11

    return {
        "http": guarded_h11(
            args.timeout_header, args.limit_concurrency + connection_headroom(args.limit_concurrency)
        ),
        "limit_concurrency": args.limit_concurrency,
        "timeout_keep_alive": args.timeout_keep_alive,
        "h11_max_incomplete_event_size": args.max_header_bytes,
        "access_log": False,  # SecurityMiddleware writes the access log, without query-string values
        "backlog": 4096,
    }


def config_from_args(args: argparse.Namespace, environ: Mapping[str, str] | None = None):  # -> ServerConfig
    from chatsieve.protocols.common import RequestLimits
    from chatsieve.server.config import ServerConfig
    from chatsieve.server.response_store import default_store_path
    from chatsieve.server.security import SecurityPolicy, default_allowed_hosts

    hosts = _split(args.allowed_hosts) if args.allowed_hosts is not None else default_allowed_hosts(args.host)
    return ServerConfig(
        max_model_len=args.max_model_len,
        limits=RequestLimits(max_stop_strings=args.max_stop_strings, max_stop_length=args.max_stop_length,
                             fit_max_tokens=args.fit_max_tokens),
        security=SecurityPolicy(
            api_keys=api_keys(args, environ),
            allowed_hosts=hosts,
            max_body_bytes=args.max_request_bytes,
            body_timeout=args.timeout_body,
        ),
        cors_origins=_split(args.cors_origins),
        # --gguf alone: the GGUF is the tokenizer (load_tokenizer reads its metadata), and
        # a local llama-server's /props still tells whether the engine runs that model
        model_dir=Path(args.model_dir) if args.model_dir else Path(args.gguf),
        format=args.format or "auto",
        format_file=Path(args.format_file) if args.format_file else None,
        backend_url=args.backend[0],
        extra_backend_urls=tuple(args.backend[1:]),
        backend_kind=args.backend_kind,
        served_model_name=args.served_model_name,
        model_aliases=tuple(args.model_alias),
        backend_model=args.backend_model,
        timeout=args.backend_timeout,
        max_connections=args.max_connections,
        max_concurrent_prompts=args.max_concurrent_prompts,
        gguf=Path(args.gguf) if args.gguf and args.model_dir else None,
        response_store=args.response_store or str(default_store_path()),
        response_store_max=args.response_store_max,
        response_store_max_age=args.response_store_max_age,
        response_store_max_bytes=args.response_store_max_bytes,
        chat_template=Path(args.chat_template) if args.chat_template else None,
        effort_budgets=tuple(_effort_budgets(args.reasoning_effort_budgets).items()),
    )


def _effort_budgets(text: str | None) -> dict[str, int]:
    """--reasoning-effort-budgets' JSON, checked (ValueError naming what is wrong)."""
    if text is None:
        return {}
    import json

    from chatsieve.protocols.common import check_effort_budgets

    try:
        table = json.loads(text)
    except ValueError as e:
        raise ValueError(f"--reasoning-effort-budgets is not JSON: {e}") from None
    return check_effort_budgets(table)


def _engine_gguf(args: argparse.Namespace) -> Path | None:
    """The GGUF a local llama-server runs (its /props `model_path`), if it answers and the
    file is readable here."""
    import asyncio

    import httpx

    from chatsieve.server.model_check import engine_model_path

    async def ask() -> Path | None:
        async with httpx.AsyncClient(timeout=httpx.Timeout(10.0)) as client:
            return await engine_model_path(client, args.backend[0])

    return asyncio.run(ask())


def run_workers(workers: int, options: dict) -> None:
    """uvicorn's worker processes for the app `app_from_environ` makes, each on a listening socket
    of its own where the platform allows (chatsieve.server.workers), else sharing one."""
    import uvicorn

    from chatsieve.server.workers import reuse_port_sockets, supervisor

    target = "chatsieve.server.app:app_from_environ"
    sockets = reuse_port_sockets(options["host"], options["port"], workers)
    if sockets is not None:
        sup = supervisor(uvicorn.Config(target, factory=True, workers=workers, **options), sockets)
        if sup is not None:
            logging.getLogger("uvicorn.error").info(
                "Uvicorn running on http://%s:%d with %d workers, each on a socket of its own (SO_REUSEPORT)",
                options["host"], options["port"], workers)
            sup.run()
            return
        for sock in sockets:
            sock.close()
    uvicorn.run(target, factory=True, workers=workers, **options)


def serve_main(argv: Sequence[str] | None = None) -> int:
    """Run the server until interrupted; 2 with a one-line error on bad arguments."""
    args = build_parser().parse_args(argv)

    def fail(msg: str) -> int:
        print(f"chatsieve serve: error: {msg}", file=sys.stderr)
        return 2

    try:  # before anything imports them: a one-line answer instead of a traceback
        for module in SERVER_EXTRA:
            importlib.import_module(module)
    except ImportError as e:
        return fail(
            f"{e}: `chatsieve serve` needs the server extra; install it with pip install -e '.[server]' "
            "in a clone of chatsieve"
        )
    for url in args.backend:
        if not url.startswith(("http://", "https://")):
            return fail(f"--backend must be an http(s) URL, got {url!r}")
    if args.model_dir is None and args.gguf is None:
        found = _engine_gguf(args) if args.backend_kind == "llamacpp" else None
        if found is None:
            return fail(
                "give --model-dir (a directory with the tokenizer and chat template) or --gguf (the "
                "engine's GGUF file, whose vocabulary and chat template are used); a local "
                "llama-server's model is used by itself when its /props names a file readable here"
            )
        args.gguf = str(found)
    if args.model_dir is not None and not Path(args.model_dir).is_dir():
        return fail(f"--model-dir {args.model_dir!r} is not a directory")
    if args.gguf is not None and not Path(args.gguf).is_file():
        return fail(f"--gguf {args.gguf!r} is not a file")
    if args.workers < 1:
        return fail(f"--workers must be at least 1, got {args.workers}")
    if args.max_connections < 1:
        return fail(f"--max-connections must be at least 1, got {args.max_connections}")
    from chatsieve.server.security import is_loopback, key_problem

    for key in api_keys(args):
        problem = key_problem(key)
        if problem:
            return fail(f"--api-key / CHATSIEVE_API_KEY: {problem}")

    if not is_loopback(args.host) and not api_keys(args) and not args.allow_unauthenticated:
        return fail(
            f"--host {args.host} is reachable from other machines and no API key is set: give "
            "--api-key (or CHATSIEVE_API_KEY), or --allow-unauthenticated if a proxy in front checks access"
        )
    for name in ("max_request_bytes", "max_stop_strings", "max_stop_length", "limit_concurrency",
                 "max_header_bytes", "max_concurrent_prompts"):
        if getattr(args, name) < 1:
            return fail(f"--{name.replace('_', '-')} must be at least 1")
    if args.response_store_max < 1 or args.response_store_max_age <= 0 or args.response_store_max_bytes < 1:
        return fail("--response-store-max and --response-store-max-bytes must be at least 1, and "
                    "--response-store-max-age above 0")
    if args.response_store == ":memory:" and args.workers > 1:
        return fail("--response-store :memory: keeps each worker's responses in that worker, so with --workers "
                    f"{args.workers} a continuation would find them on one worker only: give a file (the "
                    "default) or --workers 1")
    if args.max_model_len is not None and args.max_model_len < 2:
        return fail("--max-model-len must be at least 2")
    from chatsieve import formats
    from chatsieve.server.app import create_app
    from chatsieve.server.config import CONFIG_ENV
    from chatsieve.server.tuning import freeze_startup_objects

    if args.format_file:
        if args.format not in (None, "auto"):
            return fail("give --format or --format-file, not both")
        from chatsieve.format_file import FormatFileError, register_file

        try:
            args.format = register_file(args.format_file).name
        except FormatFileError as e:
            return fail(f"--format-file: {e}")
    elif args.format not in (None, "auto"):
        try:
            formats.get(args.format)
        except Exception as e:  # unknown format: the registry's message lists the known ones
            return fail(str(e))
    if args.chat_template:
        from chatsieve.prompt import PromptError, load_chat_template

        try:
            load_chat_template(args.chat_template, None if args.format in (None, "auto") else args.format)
        except PromptError as e:
            return fail(f"--chat-template: {e}")
    try:
        config = config_from_args(args)
    except ValueError as e:  # --reasoning-effort-budgets
        return fail(str(e))
    from chatsieve.server.response_store import ResponseStore

    try:  # one clear line for a store that cannot be opened, before the tokenizer loads
        ResponseStore(config.response_store, max_bytes=config.response_store_max_bytes).close()
    except (ValueError, OSError) as e:
        return fail(f"--response-store {config.response_store}: {e}")
    from chatsieve.detect import FormatNotFound

    try:
        app = create_app(config)
    except FormatNotFound as e:
        return fail(str(e))
    except Exception as e:
        return fail(f"cannot load the tokenizer from {config.model_dir}: {e}")
    if args.model_dir is None and not args.chat_template and not app.state.service.tokenizer.chat_template:
        return fail(
            f"the GGUF {args.gguf} carries no chat template (tokenizer.chat_template): give "
            "--chat-template FILE, or --model-dir with the model's tokenizer and chat template"
        )
    import asyncio

    from chatsieve.server.model_check import StartupRefusal

    try:  # before uvicorn starts, so a refusal is one clear line
        asyncio.run(app.state.service.check_engine())
    except StartupRefusal as e:
        return fail(str(e))
    freeze_startup_objects()
    logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s:     %(name)s: %(message)s")
    choice = app.state.service.format_choice
    logging.getLogger("chatsieve.server").info("%s", choice.log_line())
    options = {"host": args.host, "port": args.port, "log_level": args.log_level, **uvicorn_options(args)}
    if args.workers > 1:
        # each worker process builds its own app from the configuration in the environment
        del app
        os.environ[CONFIG_ENV] = config.to_json()
        run_workers(args.workers, options)
    else:
        from chatsieve.server.quiet_server import run

        if not run(app, **options):
            return 3  # uvicorn's exit status for a server that did not start
    return 0

