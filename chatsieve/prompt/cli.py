"""`chatsieve render`: a conversation rendered with a model's chat template, printed as JSON."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..tokenizer import load_tokenizer
from .errors import PromptError
from .render import render_prompt


def render_main(argv: Sequence[str] | None = None) -> int:
    """`chatsieve render`: print {"text", "token_ids", "isolated_spans"} as JSON; errors exit 2."""
    parser = argparse.ArgumentParser(
        prog="chatsieve render",
        description="Render a conversation with a model's chat template and print the prompt and its ids.")
    parser.add_argument("messages", help="JSON file: a list of messages, or {\"messages\": [...], \"tools\": [...]}")
    parser.add_argument("--model-dir", required=True, help="directory with tokenizer.json(.xz) and its config")
    parser.add_argument("--format", help="family whose delimiters are isolated (e.g. qwen3, gemma4)")
    parser.add_argument("--template", help="chat template file (default: the model directory's)")
    parser.add_argument("--tools", help="JSON file with a list of OpenAI tool definitions")
    parser.add_argument("--thinking", choices=("on", "off"), help="pass enable_thinking to the template")
    parser.add_argument("--no-isolate", action="store_true", help="tokenize exactly as transformers would")
    parser.add_argument("--keep-empty-thinking", action="store_true",
                        help="keep Gemma 4's empty thought channel at the end of the prompt")
    args = parser.parse_args(list(argv) if argv is not None else None)
    try:
        try:
            data = json.loads(Path(args.messages).read_text(encoding="utf-8"))
            tools = json.loads(Path(args.tools).read_text(encoding="utf-8")) if args.tools else None
        except (OSError, ValueError) as e:
            raise PromptError(f"cannot read input: {e}") from e
        if isinstance(data, dict):
            tools = tools if tools is not None else data.get("tools")
            data = data.get("messages")
        kwargs: dict[str, Any] = {}
        if args.thinking is not None:
            kwargs["enable_thinking"] = args.thinking == "on"
        try:
            tok = load_tokenizer(args.model_dir)
        except (OSError, ValueError) as e:
            raise PromptError(str(e)) from e
        prompt = render_prompt(data, tokenizer=tok, template=args.template, tools=tools, format=args.format,
                               isolate_markers=not args.no_isolate,
                               keep_empty_thinking=args.keep_empty_thinking, **kwargs)
    except PromptError as e:
        print(f"chatsieve render: {e}", file=sys.stderr)
        return 2
    json.dump({"text": prompt.text, "token_ids": prompt.token_ids,
               "isolated_spans": [list(s) for s in prompt.isolated_spans]},
              sys.stdout, ensure_ascii=False)
    sys.stdout.write("\n")
    return 0
