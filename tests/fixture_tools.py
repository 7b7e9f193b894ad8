"""The tools a fixture case's request offers when an engine plugin runs it (vLLM's, SGLang's).

The plugins return only offered calls (tested on its own in each plugin's tests), so a case runs
with its own tools plus a schema-less definition of each function it calls that it does not define.
"""

from __future__ import annotations

from chatsieve import parse


def openai_tool(t: dict) -> dict:
    if t.get("type") == "function":
        return t
    return {"type": "function", "function": {"name": t["name"], "parameters": t.get("parameters", {})}}


def offering_every_call(case, ids, tok) -> list[dict]:
    """The case's tools, plus a schema-less definition for each function it calls that the
    case does not define (a schema-less tool types arguments as no tool does)."""
    tools = [openai_tool(t) for t in case.options.get("tools") or []]
    offered = {t["function"]["name"] for t in tools}
    for stream_arguments in (False, True):
        msg = parse(
            token_ids=ids,
            format=case.format,
            tokenizer=tok,
            tools=tools or None,
            thinking=case.options.get("thinking"),
            prompt=case.options.get("prompt"),
            stream_arguments=stream_arguments,
        )
        for c in msg.tool_calls:
            if c.name not in offered:
                offered.add(c.name)
                tools.append({"type": "function", "function": {"name": c.name, "parameters": {}}})
    return tools
