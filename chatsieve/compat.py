"""Drop-in helpers matching small utilities other stacks ship."""

from __future__ import annotations

_OPEN, _CLOSE, _LABEL = "<|channel>", "<channel|>", "thought\n"
_TRAILERS = ("<turn|>", "<eos>")


def parse_thinking_output(text: str) -> dict[str, str | None]:
    """Split a Gemma 4 output into `thinking` and `answer`, as the offline helper of
    vLLM/transformers does: split on the first `<channel|>`; the thinking loses
    `<|channel>` and its `thought` label; with no delimiters a leading `thought\\n`
    is stripped; the answer loses surrounding whitespace and trailing `<turn|>`/`<eos>`.
    For streaming or tool calls use `chatsieve.parse(text, "gemma4")`."""
    thinking: str | None = None
    if _CLOSE in text:
        head, answer = text.split(_CLOSE, 1)
        head = head.replace(_OPEN, "").lstrip()
        thinking = head.removeprefix(_LABEL).strip()
    else:
        answer = text.lstrip().removeprefix(_LABEL) if _OPEN not in text else text
    answer = answer.strip()
    while answer.endswith(_TRAILERS):
        for t in _TRAILERS:
            answer = answer.removesuffix(t).rstrip()
    return {"thinking": thinking, "answer": answer}
