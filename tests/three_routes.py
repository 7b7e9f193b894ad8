"""One request on each client API through its real SDK (openai: chat completions and Responses;
anthropic: Messages), streamed or whole, read back into one shape: the reasoning, the text, the
calls and the usage as each API reports them. For the guarantees every route must keep alike
(strict tools, reasoning budgets, cached tokens)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import anthropic
import openai

ROUTES = ("chat", "responses", "messages")


@dataclass
class Answer:
    reasoning: str = ""
    content: str = ""
    calls: list[tuple[str, str]] = field(default_factory=list)  # (name, arguments as JSON text)
    prompt_tokens: int = 0  # the whole prompt, cached or not
    cached_tokens: int = 0
    completion_tokens: int = 0
    raw_usage: dict = field(default_factory=dict)


def tool(route: str, name: str, schema: dict, *, strict: bool | None = None, description: str = "") -> dict:
    """A function tool in the route's own shape; `strict` left out when None."""
    extra = {} if strict is None else {"strict": strict}
    if route == "chat":
        return {"type": "function", "function": {"name": name, "description": description, "parameters": schema,
                                                 **extra}}  # fmt: skip
    if route == "responses":
        return {"type": "function", "name": name, "description": description, "parameters": schema, **extra}
    return {"name": name, "description": description, "input_schema": schema, **extra}


def ask(
    route: str,
    url: str,
    text: str,
    *,
    model: str,
    stream: bool,
    tools: list[dict] | None = None,
    max_tokens: int = 4000,
    system: str | None = None,
    **options: Any,
) -> Answer:
    """`text` as the user's message (after `system`) on `route`; `options` go to the SDK call as
    they are (a route's own fields: `reasoning`, `thinking`, `extra_body`, ...)."""
    if route == "messages":
        return _messages(url, text, model=model, stream=stream, tools=tools, max_tokens=max_tokens, system=system,
                         **options)  # fmt: skip
    client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=120)
    if route == "responses":
        return _responses(client, text, model=model, stream=stream, tools=tools, max_tokens=max_tokens,
                          system=system, **options)  # fmt: skip
    return _chat(client, text, model=model, stream=stream, tools=tools, max_tokens=max_tokens, system=system,
                 **options)  # fmt: skip


def _chat(client, text, *, model, stream, tools, max_tokens, system, **options) -> Answer:
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": text}]
    kw: dict[str, Any] = {"model": model, "messages": messages, "max_tokens": max_tokens, **options}
    if tools:
        kw["tools"] = tools
    out = Answer()
    if not stream:
        r = client.chat.completions.create(**kw)
        m = r.choices[0].message
        out.reasoning = getattr(m, "reasoning_content", None) or ""
        out.content = m.content or ""
        out.calls = [(t.function.name, t.function.arguments) for t in m.tool_calls or []]
        return _chat_usage(out, r.usage.model_dump())
    calls: dict[int, list[str]] = {}
    usage = None
    for chunk in client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kw):
        if chunk.usage:
            usage = chunk.usage.model_dump()
        if not chunk.choices:
            continue
        d = chunk.choices[0].delta
        out.reasoning += getattr(d, "reasoning_content", None) or ""
        out.content += d.content or ""
        for tc in d.tool_calls or []:
            if tc.id:
                calls[tc.index] = [tc.function.name, ""]
            calls[tc.index][1] += tc.function.arguments or ""
    out.calls = [(n, a) for n, a in (calls[i] for i in sorted(calls))]
    return _chat_usage(out, usage or {})


def _chat_usage(out: Answer, usage: dict) -> Answer:
    out.raw_usage = usage
    out.prompt_tokens = usage.get("prompt_tokens") or 0
    out.completion_tokens = usage.get("completion_tokens") or 0
    out.cached_tokens = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    return out


def _responses(client, text, *, model, stream, tools, max_tokens, system, **options) -> Answer:
    kw: dict[str, Any] = {"model": model, "input": text, "max_output_tokens": max_tokens, **options}
    if system:
        kw["instructions"] = system
    if tools:
        kw["tools"] = tools
    if stream:
        response = None
        for event in client.responses.create(stream=True, **kw):
            if event.type in ("response.completed", "response.incomplete"):
                response = event.response
        assert response is not None, "the stream ended without response.completed"
    else:
        response = client.responses.create(**kw)
    out = Answer()
    for item in response.output:
        if item.type == "reasoning":
            out.reasoning += "".join(c.text for c in item.content or [])
        elif item.type == "message":
            out.content += "".join(getattr(c, "text", "") for c in item.content)
        elif item.type == "function_call":
            out.calls.append((item.name, item.arguments))
    usage = response.usage.model_dump()
    out.raw_usage = usage
    out.prompt_tokens = usage["input_tokens"]
    out.completion_tokens = usage["output_tokens"]
    out.cached_tokens = (usage.get("input_tokens_details") or {}).get("cached_tokens") or 0
    return out


def _messages(url, text, *, model, stream, tools, max_tokens, system, **options) -> Answer:
    client = anthropic.Anthropic(base_url=url, api_key="none", max_retries=0, timeout=120)
    kw: dict[str, Any] = {"model": model, "max_tokens": max_tokens, "messages": [{"role": "user", "content": text}],
                          **options}  # fmt: skip
    if system:
        kw["system"] = system
    if tools:
        kw["tools"] = tools
    if stream:
        with client.messages.stream(**kw) as s:
            message = s.get_final_message()
    else:
        message = client.messages.create(**kw)
    import json

    out = Answer()
    for block in message.content:
        if block.type == "thinking":
            out.reasoning += block.thinking
        elif block.type == "text":
            out.content += block.text
        elif block.type == "tool_use":
            out.calls.append((block.name, json.dumps(block.input)))
    u = message.usage
    out.raw_usage = u.model_dump()
    out.cached_tokens = u.cache_read_input_tokens or 0
    out.prompt_tokens = u.input_tokens + out.cached_tokens  # Anthropic: input_tokens is the uncached rest
    out.completion_tokens = u.output_tokens
    return out
