"""What the Dynamo tests need: Dynamo itself, a private network namespace, model directories built
from the real tokenizers (shared/models), and a way to run a deployment and its clients in it.

Dynamo advertises the machine's other interfaces and its ZMQ publishers bind 0.0.0.0, so every
Dynamo process of a test runs inside `unshare -n` (loopback only), together with the client
(tests/dynamo_scenario.py). Without Dynamo or `unshare -n` the tests skip with the reason --
and fail under CI (CHATSIEVE_REQUIRE_MODELS=1).
"""

from __future__ import annotations

import functools
import json
import lzma
import os
import subprocess
import sys
from pathlib import Path

from tests import models

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
INSTALL = "pip install --no-deps -r requirements/dynamo-test.txt"


def require_dynamo() -> None:
    """Dynamo 1.6 importable with chatsieve's adapter, or skip (fail under CI)."""
    try:
        import chatsieve.integrations.dynamo  # noqa: F401
    except ImportError as e:
        models.missing(f"NVIDIA Dynamo is not usable here ({e}): {INSTALL}")


LOOPBACK_UP = (
    "import fcntl, socket, struct; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); "
    "f = struct.unpack('16sH', fcntl.ioctl(s, 0x8913, struct.pack('16sH22x', b'lo', 0))[:18])[1]; "
    "fcntl.ioctl(s, 0x8914, struct.pack('16sH22x', b'lo', f | 1))"
)  # SIOCGIFFLAGS / SIOCSIFFLAGS |= IFF_UP: no `ip` binary needed


@functools.cache
def _netns_error() -> str | None:
    try:
        r = subprocess.run(
            ["unshare", "-n", sys.executable, "-c", LOOPBACK_UP], capture_output=True, text=True, timeout=20
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"cannot run `unshare -n` ({e})"
    if r.returncode != 0:
        return f"`unshare -n` failed ({r.stderr.strip()[-300:] or r.returncode}): run the Dynamo tests as root"
    return None


def require_netns() -> None:
    """A private network namespace for the Dynamo processes, or skip (fail under CI)."""
    error = _netns_error()
    if error:
        models.missing(f"the Dynamo tests need a private network namespace: {error}")


def netns_command(argv: list[str]) -> list[str]:
    """A Python script's argv run in a fresh network namespace with loopback up."""
    assert argv[0] == sys.executable, argv
    launcher = f"import runpy, sys; {LOOPBACK_UP}; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"
    return ["unshare", "-n", sys.executable, "-c", launcher, *argv[1:]]


def subprocess_env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.setdefault("DYN_LOG", "warn")
    for var in ("DYN_TCP_RPC_HOST", "DYN_TCP_RESPONSE_STREAM_HOST", "DYN_EVENT_PLANE_HOST", "DYN_HTTP_RPC_HOST"):
        env[var] = "127.0.0.1"
    env["DYN_SELF_HOST_METADATA"] = "0"
    return env


# ---------------------------------------------------------------- model directories


def model_dir(root: Path, family: str) -> Path:
    """A model directory Dynamo and chatsieve both read: tokenizer.json, tokenizer_config.json with
    the chat template, config.json, generation_config.json (no weights)."""
    d = root / family
    d.mkdir(parents=True, exist_ok=True)
    if family in ("qwen3", "qwen3_coder"):
        src = models.model_path("qwen3")
        (d / "tokenizer.json").write_bytes(lzma.open(src / "tokenizer.json.xz").read())
        config = json.loads((src / "tokenizer_config.json").read_text(encoding="utf-8"))
        template = "chat_template.qwen3-coder.jinja" if family == "qwen3_coder" else "chat_template.jinja"
        config["chat_template"] = models.model_path(f"qwen3/{template}").read_text(encoding="utf-8")
        model = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "max_position_embeddings": 40960,
                 "vocab_size": 151936, "eos_token_id": 151645, "bos_token_id": 151643}  # fmt: skip
        generation = {"eos_token_id": [151645, 151643]}
    elif family == "gemma4":
        (d / "tokenizer.json").write_text(models.gemma4_tokenizer_json(), encoding="utf-8")
        template = models.model_path("gemma4/chat_template.jinja").read_text(encoding="utf-8")
        config = {"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>", "chat_template": template}
        model = {"architectures": ["Gemma4ForConditionalGeneration"], "model_type": "gemma4",
                 "max_position_embeddings": 131072, "vocab_size": 262144, "eos_token_id": [1, 106]}  # fmt: skip
        generation = {"eos_token_id": [1, 106]}
    else:
        raise KeyError(f"no Dynamo test model for {family!r}")
    (d / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    (d / "config.json").write_text(json.dumps(model), encoding="utf-8")
    (d / "generation_config.json").write_text(json.dumps(generation), encoding="utf-8")
    return d


def free_ports(n: int) -> list[int]:
    """n distinct ports (inside the namespace every port is free; these are only distinct)."""
    base = 18000 + (os.getpid() % 1000) * 7
    return [base + i for i in range(n)]


# ---------------------------------------------------------------- running a scenario


def run_scenario(tmp: Path, apps: list[list[str]], ports: dict, models_by_port: dict, requests: list[dict],
                 log: Path, timeout: float = 600, env: dict | None = None) -> dict:  # fmt: skip
    """Start the deployment's processes `apps` and run `requests` against it inside one network
    namespace; what came back (tests/dynamo_scenario.py's output)."""
    scenario = {
        "apps": apps,
        "ports": ports,
        "models": models_by_port,
        "requests": requests,
        "log": str(log),
        "app_log": str(tmp / "app.log"),
        "timeout": 240,  # model discovery; slow on a loaded machine
    }
    path = tmp / "scenario.json"
    path.write_text(json.dumps(scenario), encoding="utf-8")
    argv = netns_command([sys.executable, str(HERE / "dynamo_scenario.py"), str(path)])
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env={**subprocess_env(), **(env or {})}, cwd=REPO)
    app_log = (tmp / "app.log").read_text(encoding="utf-8", errors="replace") if (tmp / "app.log").exists() else ""
    if r.returncode != 0:
        raise AssertionError(
            f"the Dynamo scenario failed (status {r.returncode}):\n{r.stderr[-4000:]}\napp log:\n{app_log[-4000:]}"
        )
    out = json.loads(r.stdout)
    out["app_log"] = app_log
    return out
