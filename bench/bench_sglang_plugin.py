"""Per-token time inside SGLang's chat-completions handler: the chatsieve plugin (token-id adapter)
against SGLang's own Qwen3 parsers (`qwen25` + `qwen3`) and against no parser, on the same ids.

SGLang's real OpenAIServingChat streams a generated Qwen3 output (reasoning, content, one call
with a long string argument; bench_stream.py's generator), one token per engine step, from the
stand-in TokenizerManager of tests/sglang_driver.py, in the SGLang venv (.ci/sglang.sh). Each
request's process CPU time is divided by its tokens; the first request of each server is not timed.

    .ci/sglang.sh                                   # the SGLang venv, once
    python bench/bench_sglang_plugin.py             # needs ../shared/models or $CHATSIEVE_MODELS
"""

from __future__ import annotations

import json
import lzma
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))

from bench_stream import TOOLS, make_output, models_dir  # noqa: E402

from chatsieve.tokenizer import load_tokenizer  # noqa: E402

SIZES = (2_000, 8_000)
PARSERS = {
    "chatsieve_qwen3": ("chatsieve_qwen3", "chatsieve_qwen3"),
    "sglang qwen25+qwen3": ("qwen25", "qwen3"),
    "no parser": (None, None),
}
VENV_PYTHON = (
    Path(os.environ.get("CHATSIEVE_CACHE") or Path.home() / ".cache/chatsieve") / "sglang-0.5.23/bin/python"
)


def main() -> None:
    from tests.test_sglang_plugin import _entry_point_site

    python = Path(os.environ.get("CHATSIEVE_SGLANG_PYTHON") or VENV_PYTHON)
    if not python.is_file():
        sys.exit(f"bench: no SGLang venv at {python}: run .ci/sglang.sh")
    base = models_dir() / "qwen3"
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        d = root / "qwen3"
        d.mkdir()
        (d / "tokenizer.json").write_bytes(lzma.open(base / "tokenizer.json.xz").read())
        config = json.loads((base / "tokenizer_config.json").read_text(encoding="utf-8"))
        config.pop("chat_template", None)
        (d / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
        (d / "chat_template.jinja").write_bytes((base / "chat_template.jinja").read_bytes())
        (d / "config.json").write_text(json.dumps({"model_type": "qwen3"}), encoding="utf-8")
        tok = load_tokenizer(d)
        jobs = []
        for label, (tool, reasoning) in PARSERS.items():
            request = {"model": "test-model", "messages": [{"role": "user", "content": "Write the notes."}],
                       "tools": TOOLS, "stream": True}  # fmt: skip
            common = {"model": "qwen3", "tool_call_parser": tool, "reasoning_parser": reasoning, "step": 1}
            jobs.append(
                {
                    **common,
                    "id": f"{label}/warm-up",
                    "request": request,
                    "output_ids": make_output("qwen3", tok, 200),
                }
            )
            for n in SIZES:
                jobs.append(
                    {
                        **common,
                        "id": f"{label}/{n}",
                        "request": request,
                        "output_ids": make_output("qwen3", tok, n),
                    }
                )
        (root / "jobs.json").write_text(json.dumps({"models": {"qwen3": {"path": str(d), "model_type": "qwen3"}},
                                                    "jobs": jobs}))  # fmt: skip
        site = _entry_point_site(root)
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(ROOT), str(site)]),
            "SGLANG_PLUGINS": "chatsieve",
        }
        subprocess.run([str(python), str(ROOT / "tests/sglang_driver.py"), str(root / "jobs.json"),
                        str(root / "results.json")], check=True, env=env, cwd=root,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        results = json.loads((root / "results.json").read_text())["results"]
    print(
        f"# {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}; µs of process CPU per streamed token"
    )
    print(f"{'parser':<22}" + "".join(f"{n:>12,}" for n in SIZES) + "   (tokens)")
    for label in PARSERS:
        cells = []
        for n in SIZES:
            r = results[f"{label}/{n}"]
            cells.append(f"{r['cpu_seconds'] / n * 1e6:>12.1f}" if "exception" not in r else f"{'error':>12}")
        print(f"{label:<22}" + "".join(cells))


if __name__ == "__main__":
    main()
