"""Per-token parser time inside vLLM's chat-completions loop: the chatsieve plugin against
vLLM's built-in parsers for the same family, one token per engine step.

Each run drives vLLM's ChatStreamProcessor (the per-choice loop of OpenAIServingChat) over a
generated output (reasoning, content, one call with a long string argument; bench_stream.py's
generator) and divides the loop's time by the tokens. "no parser" is the loop alone; the
"net" column subtracts it. One run each, in process CPU time (the first request of a
parser class is not timed).

    pip install --no-deps -r requirements/vllm-test.txt     # vLLM on CPU
    python bench/bench_vllm_plugin.py                       # needs ../shared/models or $CHATSIEVE_MODELS
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_stream import TOOLS, make_output, models_dir  # noqa: E402

from chatsieve.detok import Detokenizer  # noqa: E402
from chatsieve.tokenizer import derive_gemma4_tokenizer, load_tokenizer  # noqa: E402

SIZES = (2_000, 8_000)
BUILTIN = {"qwen3": ("qwen3", "hermes"), "gemma4": ("gemma4", "gemma4")}  # vLLM's (reasoning, tool) parsers
PROMPT = {
    "qwen3": "<|im_start|>user\nWrite the notes.<|im_end|>\n<|im_start|>assistant\n",
    "gemma4": "<|turn>user\nWrite the notes.<turn|>\n<|turn>model\n",
}


def vllm_model_dir(fmt: str, tok, base: Path, root: Path) -> str:
    """A directory vLLM loads the tokenizer from (the same tokenizer.json as chatsieve's)."""
    d = root / fmt
    d.mkdir()
    (d / "tokenizer.json").write_text(tok.hf.to_str(), encoding="utf-8")
    if fmt == "qwen3":
        config = json.loads((base / "qwen3/tokenizer_config.json").read_text(encoding="utf-8"))
        model_type = "qwen3"
    else:
        config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<bos>", "eos_token": "<eos>"}
        model_type = "gemma3_text"
    (d / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    (d / "config.json").write_text(json.dumps({"model_type": model_type}), encoding="utf-8")
    return str(d)


def run(parser_cls, vtok, request, steps, prompt_ids):
    from vllm.entrypoints.openai.chat_completion.stream_processor import ChatStreamProcessor

    parser = None
    if parser_cls is not None:
        parser = parser_cls(vtok, request.tools, chat_template_kwargs={}, model_config=None)
    processor = ChatStreamProcessor(request, parser, enable_auto_tools=True, parser_cls=parser_cls)
    calls = {}
    t0 = time.process_time()  # CPU time of this process: the machine may be shared
    for text, ids, finish in steps:
        delta = processor.step(text, ids, finish, prompt_ids).delta
        if delta is not None:
            for tc in delta.tool_calls or []:
                if tc.function is not None and tc.function.name:
                    calls[tc.index] = tc.function.name
    return time.process_time() - t0, calls


def main() -> None:
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.parser import ParserManager
    from vllm.tokenizers import get_tokenizer

    import chatsieve.integrations.vllm  # noqa: F401  registers chatsieve_<format>

    base = models_dir()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for fmt, tok in (
            ("qwen3", load_tokenizer(base / "qwen3")),
            ("gemma4", derive_gemma4_tokenizer(base / "gemma3", base / "gemma4/special_tokens.json")),
        ):
            vtok = get_tokenizer(vllm_model_dir(fmt, tok, base, Path(tmp)))
            request = ChatCompletionRequest(
                model="m", messages=[{"role": "user", "content": "hi"}], tools=TOOLS, stream=True,
                chat_template_kwargs={"enable_thinking": True},
            )  # fmt: skip
            prompt_ids = tok.encode(PROMPT[fmt])
            setups = {
                "no parser": None,
                "chatsieve": ParserManager.get_parser(
                    tool_parser_name=f"chatsieve_{fmt}",
                    reasoning_parser_name=f"chatsieve_{fmt}",
                    enable_auto_tools=True,
                    tokenizer=vtok,
                ),  # fmt: skip
                f"vLLM {'+'.join(sorted(set(BUILTIN[fmt])))}": ParserManager.get_parser(
                    tool_parser_name=BUILTIN[fmt][1],
                    reasoning_parser_name=BUILTIN[fmt][0],
                    enable_auto_tools=True,
                    tokenizer=vtok,
                ),  # fmt: skip
            }
            for n in SIZES:
                ids = make_output(fmt, tok, n)
                detok = Detokenizer(tok)
                texts = ["".join(p.text for p in detok.feed([i])) for i in ids]
                texts[-1] += "".join(p.text for p in detok.finish())
                steps = [
                    (t, [i], "stop" if k == len(ids) - 1 else None)
                    for k, (t, i) in enumerate(zip(texts, ids))
                ]
                base_time = None
                for name, cls in setups.items():
                    run(cls, vtok, request, steps[:50], prompt_ids)  # warm-up (first request of the class)
                    seconds, calls = run(cls, vtok, request, steps, prompt_ids)
                    if cls is None:
                        base_time = seconds
                    net = (seconds - base_time) * 1e6 / len(ids)
                    rows.append((fmt, name, len(ids), seconds * 1e6 / len(ids), net, list(calls.values())))
    print(f"{'format':7} {'parser':22} {'tokens':>6} {'µs/token':>9} {'net':>8}  calls")
    for fmt, name, n, us, net, calls in rows:
        print(f"{fmt:7} {name:22} {n:6d} {us:9.1f} {net:8.1f}  {calls}")


if __name__ == "__main__":
    main()
