"""What a chat template cannot render of a tool conversation, written in the way the family
documents it (tool prompt, results, earlier calls, one call per message), or a PromptError.

`template_support(source)` probes a template once (render with and without tools / a tool
result / a call / two calls); `adapt_conversation` rewrites one request for what it lacks, per
the family's `FormatSpec.tool_prompt` (data, with its source).
"""

from __future__ import annotations

import functools
import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .spec import FormatSpec, ToolPrompt

__all__ = ["Splice", "TemplateSupport", "adapt_conversation", "apply_splices", "harmony_turns", "template_support",
           "write_calls"]

_PROBE_TOOLS = [{"type": "function", "function": {
    "name": "probe_tool", "description": "A probe tool.",
    "parameters": {"type": "object", "properties": {"k": {"type": "string", "description": "A key."}},
                   "required": ["k"]}}}]  # fmt: skip
_PROBE_RESULT = "r5x9result"
_PROBE_SECOND = "w8z3second"  # the second call's argument value: rendered or not
_PROBE_SYSTEM = "s7q2system"
_PROBE_TEXT = "t4k8preamble"  # a call message's text: rendered as text, or as its reasoning
_PROBE_ID = "abcDEF123"  # nine alphanumerics: Mistral's templates insist on that shape
_RESULTS = "\x00results"  # marks a user turn made of tool results (removed before rendering)
_PASS_BACK = ("--chat-template PATH with `chatsieve serve`, template=PATH with render_prompt")


@dataclass(frozen=True)
class TemplateSupport:
    """What a chat template renders of a tool conversation."""

    tools: bool  # tool definitions (rendering with and without `tools` differs)
    results: bool  # a `tool` message's content
    calls: bool  # an assistant message's earlier `tool_calls`
    late_system: bool = True  # a system message after the first turn (Claude Code sends them)
    parallel: bool = True  # every call of a message with several (gpt-oss, GigaChat 3: only the first)
    # a call message's text is rendered where its reasoning goes (gpt-oss: as its analysis message)
    call_text_as_reasoning: bool = False
    # a tool without a description is refused (gpt-oss's template writes `"// " + tool.description`)
    needs_description: bool = False


@functools.lru_cache(maxsize=32)
def template_support(source: str) -> TemplateSupport:
    """Probe `source` with a tool, a tool result and a call (cached per template)."""
    from .prompt.errors import PromptError
    from .prompt.template import call_shape, render_chat_template

    variables = {"bos_token": "", "eos_token": ""}

    def render(messages: list[dict], tools: Any) -> str | None:
        try:
            return render_chat_template(source, messages, tools, None, True, variables)
        except PromptError:
            return None

    user = [{"role": "user", "content": "q"}]
    described = render(user, _PROBE_TOOLS)
    tools = False
    for conversation in (user, [{"role": "system", "content": "s"}, *user]):  # some render tools in a system turn
        with_tools = described if conversation is user else render(conversation, _PROBE_TOOLS)
        without = render(conversation, None)
        tools = tools or with_tools is None or without is None or with_tools != without
    shape = call_shape(source)
    call = {"id": _PROBE_ID, "type": "function",
            "function": {"name": "probe_tool", "arguments": {"k": "v"} if shape.objects else '{"k": "v"}'}}
    result = render([*user, {"role": "assistant", "content": None if shape.null_content else "", "tool_calls": [call]},
                     {"role": "tool", "tool_call_id": _PROBE_ID, "name": "probe_tool", "content": _PROBE_RESULT}],
                    _PROBE_TOOLS)
    results = result is not None and _PROBE_RESULT in result
    late = render([*user, {"role": "system", "content": _PROBE_SYSTEM}], None)
    second = {**call, "id": _PROBE_ID[::-1],
              "function": {"name": "probe_tool", "arguments": {"k": _PROBE_SECOND} if shape.objects
                           else json.dumps({"k": _PROBE_SECOND})}}
    both = render([*user, {"role": "assistant", "content": None if shape.null_content else "",
                           "tool_calls": [call, second]},
                   *({"role": "tool", "tool_call_id": c["id"], "name": "probe_tool", "content": _PROBE_RESULT}
                     for c in (call, second))], _PROBE_TOOLS)
    said = render([*user, {"role": "assistant", "content": _PROBE_TEXT, "tool_calls": [call]}], _PROBE_TOOLS)
    thought = render([*user, {"role": "assistant", "content": None if shape.null_content else "",
                              "thinking": _PROBE_TEXT, "reasoning_content": _PROBE_TEXT, "tool_calls": [call]}],
                     _PROBE_TOOLS)
    bare = {k: v for k, v in _PROBE_TOOLS[0]["function"].items() if k != "description"}
    needs_description = described is not None and render(user, [{"type": "function", "function": bare}]) is None
    return TemplateSupport(tools=tools, results=results, calls=shape.renders,
                           late_system=late is not None and _PROBE_SYSTEM in late,
                           parallel=not shape.renders or (both is not None and _PROBE_SECOND in both),
                           call_text_as_reasoning=said is not None and _PROBE_TEXT in said and said == thought,
                           needs_description=needs_description)


def described_tools(source: str, tools: list | None) -> list | None:
    """`tools` as the template can render them: where it refuses a tool without a description (an
    MCP server's tool may have none), such a tool gets an empty one; new dicts for those tools
    only, the caller's left as they were. Other templates get `tools` itself."""
    if not tools or not template_support(source).needs_description:
        return tools
    out = []
    for tool in tools:
        function = tool.get("function") if isinstance(tool, Mapping) else None
        if isinstance(function, Mapping) and function.get("description") is None:
            tool = {**tool, "function": {**function, "description": ""}}
        out.append(tool)
    return out


def write_calls(syntax: str, calls: Sequence[Mapping[str, Any]]) -> str:
    """Earlier calls as the model writes them in `syntax`: "pythonic" (`[f(a="x", n=1)]`),
    "granite" (`<|tool_call|>[{"name": "f", "arguments": {"a": "x"}}]`) or "deepseek" (DeepSeek
    V3 / R1: `<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f` + fenced JSON, the
    client's argument text as given)."""
    fns = [c.get("function") or {} for c in calls]
    named = [(fn.get("name", ""), _arguments(fn.get("arguments"))) for fn in fns]
    if syntax == "pythonic":
        return "[" + ", ".join(f"{n}(" + ", ".join(f"{k}={_python(v)}" for k, v in a.items()) + ")"
                               for n, a in named) + "]"
    if syntax == "granite":
        return "<|tool_call|>" + json.dumps([{"name": n, "arguments": a} for n, a in named], ensure_ascii=False)
    if syntax == "deepseek":
        raw = [a if isinstance(a := fn.get("arguments"), str) else json.dumps(a, ensure_ascii=False) for fn in fns]
        return "<｜tool▁calls▁begin｜>" + "\n".join(
            f"<｜tool▁call▁begin｜>{c.get('type') or 'function'}<｜tool▁sep｜>{n}\n```json\n{r}\n```<｜tool▁call▁end｜>"
            for c, (n, _), r in zip(calls, named, raw, strict=True)) + "<｜tool▁calls▁end｜>"
    raise ValueError(f"no writer for call syntax {syntax!r}; known: pythonic, granite, deepseek")


_TEXT_THEN_CALLS = {"deepseek": ""}  # what joins a message's text and its written calls (else a newline)


def _arguments(args: Any) -> dict:
    if isinstance(args, Mapping):
        return dict(args)
    try:
        value = json.loads(args) if isinstance(args, str) and args.strip() else {}
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise ValueError(f"tool-call arguments {args!r} are not a JSON object")
    return value


def _python(v: Any) -> str:
    """A Python literal (strings double-quoted, as Google's examples write them)."""
    if isinstance(v, bool) or v is None:
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, list):
        return "[" + ", ".join(_python(x) for x in v) + "]"
    if isinstance(v, Mapping):
        return "{" + ", ".join(f"{json.dumps(str(k), ensure_ascii=False)}: {_python(x)}" for k, x in v.items()) + "}"
    return json.dumps(v)


def _fold_late_system(messages: list[dict]) -> list[dict]:
    """System messages after the first turn appended to the leading one (made if absent), for
    templates that drop them (gpt-oss renders only the first): moved, never lost."""
    head = [dict(messages[0])] if messages and messages[0].get("role") == "system" else []
    rest = messages[len(head):]
    late = [m["content"] for m in rest if m.get("role") == "system" and m.get("content")]
    if head:
        head[0]["content"] = "\n\n".join([head[0].get("content") or "", *late]).strip("\n")
    elif late:
        head = [{"role": "system", "content": "\n\n".join(late)}]
    return head + [m for m in rest if m.get("role") != "system"]


# gpt-oss (harmony) writes what its chat template cannot render: a commentary preamble beside a
# call (the template takes a call message's text for its analysis, or refuses text beside
# reasoning) and a developer message later in the conversation (it renders only the first)
_HARMONY = "gpt_oss"
_HARMONY_CALL = "<|start|>assistant to=functions."
_HARMONY_PREAMBLE = "<|start|>assistant<|channel|>commentary<|message|>{}<|end|>"
_HARMONY_USER = "<|start|>user<|message|>{}<|end|>"
_HARMONY_DEVELOPER = "<|start|>developer<|message|>{}<|end|>"


@dataclass(frozen=True)
class Splice:
    """Text a template cannot write, put in after rendering: `text` replaces `at` (which the
    rendered prompt holds exactly once), then every other `sentinel` is removed."""

    sentinel: str
    at: str
    text: str


def apply_splices(text: str, splices: Sequence[Splice]) -> str:
    """The rendered `text` with each splice put in; PromptError if the template did not write a
    splice's place exactly once (it rendered the message otherwise than probed: fail closed)."""
    from .prompt.errors import PromptError

    for sp in splices:
        if text.count(sp.at) != 1:
            raise PromptError("the chat template did not render a message where gpt-oss's format needs it; "
                              "cannot write the conversation as the model wrote it")
        text = text.replace(sp.at, sp.text).replace(sp.sentinel, "")
    return text


def harmony_turns(source: str, messages: list[dict], spec: FormatSpec) -> tuple[list[dict], list[Splice]]:
    """For gpt-oss's template: each call message's text as the commentary preamble the model wrote
    before the call (after its analysis, which stays reasoning), and each system message after the
    first as a developer message where it arrived -- so a turn is sent back as the model wrote it,
    and a late instruction does not move to the top (which would change the prompt's prefix). The
    messages to render, with sentinels where the splices go."""
    if spec.name != _HARMONY:
        return messages, []
    support = template_support(source)
    if support.late_system or not support.call_text_as_reasoning:
        return messages, []  # not the template this is written against
    nonce = uuid.uuid4().hex[:12]
    out: list[dict] = []
    splices: list[Splice] = []
    for i, m in enumerate(messages):
        sentinel = f"\x00{nonce}-{len(splices)}\x00"
        if i and m.get("role") == "system":
            out.append({"role": "user", "content": sentinel})
            splices.append(Splice(sentinel, _HARMONY_USER.format(sentinel), _HARMONY_DEVELOPER.format(m.get("content") or "")))
        elif m.get("role") == "assistant" and m.get("tool_calls") and m.get("content"):
            first, *rest = m["tool_calls"]
            fn = first.get("function") or {}
            marked = {**first, "function": {**fn, "name": sentinel + str(fn.get("name", ""))}}
            out.append({**m, "content": None if m["content"] is None else "", "tool_calls": [marked, *rest]})
            splices.append(Splice(sentinel, _HARMONY_CALL + sentinel,
                                  _HARMONY_PREAMBLE.format(m["content"]) + _HARMONY_CALL))
        else:
            out.append(m)
    return out, splices


def adapt_conversation(source: str, messages: list[dict], tools: list | None,
                       spec: FormatSpec) -> list[dict]:
    """`messages` with what the template cannot render written in per the family's documentation.

    Raises PromptError where the template ignores part of the request and the family documents
    no way to write it: never a prompt that silently lost the tools. System messages after the
    first turn go into the leading one where the template would drop them.
    """
    from .prompt.errors import PromptError
    from .prompt.template import call_shape

    if (any(m.get("role") == "system" for m in messages[1:]) and not template_support(source).late_system
            and spec.name != _HARMONY):  # gpt-oss: in place, by harmony_turns
        messages = _fold_late_system(messages)
    has_results = any(m.get("role") == "tool" for m in messages)
    has_calls = any(m.get("role") == "assistant" and m.get("tool_calls") for m in messages)
    if not tools and not has_results and not has_calls:
        return messages
    support = template_support(source)
    if has_calls and not support.parallel and any(len(m.get("tool_calls") or ()) > 1 for m in messages):
        messages = _one_call_per_message(messages)
    doc: ToolPrompt | None = spec.tool_prompt
    missing = []
    if tools and not support.tools and (doc is None or doc.system is None):
        missing.append("tool definitions")
    if has_results and not support.results and not (doc and doc.result):
        missing.append("tool results (it has no tool role)")
    if has_calls and not support.calls and not (doc and doc.calls):
        missing.append("earlier tool calls")
    # a template that renders calls only under null content (DeepSeek V3) drops those of a message with text
    texted = has_calls and support.calls and call_shape(source).null_content and any(
        m.get("role") == "assistant" and m.get("tool_calls") and m.get("content") for m in messages)
    if texted and not (doc and doc.calls):
        missing.append("earlier tool calls of a message with text")
    if missing:
        raise PromptError(
            f"the chat template ignores the {' and '.join(missing)} of this request, and format {spec.name!r} "
            f"documents no prompt for them: pass a chat template that renders tools ({_PASS_BACK})"
        )
    from .jinja_env import render_template

    out = list(messages)
    if has_results and not support.results:
        out = _results_as_user_turns(out, doc.result, render_template)
    if has_calls and (not support.calls or texted):
        out = [_calls_as_text(m, doc.calls) if m.get("role") == "assistant" and m.get("tool_calls")
               and (not support.calls or m.get("content")) else m for m in out]
    if tools and not support.tools:
        text = render_template(doc.system, {"tools": tools})
        if out and out[0].get("role") == "system":
            out[0] = {**out[0], "content": f"{out[0].get('content') or ''}\n\n{text}".lstrip("\n")}
        else:
            out.insert(0, {"role": "system", "content": text})
    return out


def _one_call_per_message(messages: list[dict]) -> list[dict]:
    """Each message with several calls as one message per call, each followed by its results,
    for templates that render only a message's first call ("max 1 tool call per message", as
    gpt-oss' template says; GigaChat 3): the sequence the model writes, nothing dropped. Results
    go to their call by `tool_call_id`, else in order; the text and reasoning stay with the first."""
    out: list[dict] = []
    i = 0
    while i < len(messages):
        m = messages[i]
        calls = m.get("tool_calls") or []
        i += 1
        if m.get("role") != "assistant" or len(calls) < 2:
            out.append(m)
            continue
        run = []
        while i < len(messages) and messages[i].get("role") == "tool":
            run.append(messages[i])
            i += 1
        ids = [c.get("id") if isinstance(c, Mapping) else None for c in calls]
        by_id = all(ids) and len(set(ids)) == len(ids) and all(r.get("tool_call_id") in ids for r in run)
        empty = None if m.get("content") is None else ""
        for k, c in enumerate(calls):
            first = {key: v for key, v in m.items() if key != "tool_calls"}
            piece = first if k == 0 else {"role": "assistant", "content": empty}
            out.append({**piece, "tool_calls": [c]})
            mine = ([r for r in run if r.get("tool_call_id") == ids[k]] if by_id
                    else run[k : k + 1] + (run[len(calls):] if k == len(calls) - 1 else []))
            out.extend(mine)
    return out


def _calls_as_text(message: dict, syntax: str) -> dict:
    from .prompt.errors import PromptError

    try:
        calls = write_calls(syntax, message["tool_calls"])
    except ValueError as e:
        raise PromptError(f"cannot write an earlier tool call back for this template: {e}") from e
    text = message.get("content") or ""
    m = {k: v for k, v in message.items() if k != "tool_calls"}
    sep = _TEXT_THEN_CALLS.get(syntax, "\n")
    m["content"] = f"{text}{sep}{calls}" if text else calls
    return m


def _results_as_user_turns(messages: list[dict], template: str, render: Any) -> list[dict]:
    """Each run of `tool` messages becomes one user turn (merged into a user message right after)."""
    out: list[dict] = []
    names: dict[str, str] = {}
    run: list[dict] = []

    def flush() -> None:
        if run:
            out.append({"role": "user", "content": render(template, {"results": list(run)}), _RESULTS: True})
            run.clear()

    for m in messages:
        if m.get("role") == "assistant":
            for c in m.get("tool_calls") or ():
                if isinstance(c, Mapping) and c.get("id"):
                    names[c["id"]] = (c.get("function") or {}).get("name", "")
        if m.get("role") == "tool":
            name = m.get("name") or names.get(m.get("tool_call_id", ""), "")
            run.append({"name": name, "content": m.get("content") or ""})
            continue
        flush()
        out.append(m)
    flush()
    # a user message right after the results joins their turn (templates insist on alternation)
    merged: list[dict] = []
    for m in out:
        if merged and merged[-1].get(_RESULTS) and m.get("role") == "user":
            merged[-1] = {**merged[-1], "content": f"{merged[-1]['content']}\n\n{m.get('content') or ''}"}
        else:
            merged.append(m)
    return [{k: v for k, v in m.items() if k != _RESULTS} for m in merged]
