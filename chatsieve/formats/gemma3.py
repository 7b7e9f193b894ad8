"""Google Gemma 3: no reasoning channel and no tool tokens; calls are a Python-style call
list as the first content (`[get_weather(city="Paris")]`), also inside a ```tool_code fence."""

from __future__ import annotations

from ..args.base import CallContext
from ..args.pythonic import AFTER_CALL, NAME, PythonicCallCodec
from ..spec import FormatSpec, ToolPrompt

FENCE_OPEN = "```tool_code"
FENCE_CLOSE = "```"
_WS = " \t\r\n"

# fence phases
_OPENING, _BODY, _CLOSING, _CLOSED = range(4)


class ToolCodeCodec(PythonicCallCodec):
    """The pythonic codec, plus the ```tool_code fence Gemma 3 sometimes wraps its calls in.

    Opened by `[`: exactly the pythonic codec. Opened by the fence: the fence line is
    consumed, the body is a call list or bare calls (`f(a=1)`, one per line), and the
    closing ``` is consumed too; the call list must still name a tool of the request, or
    the whole fence goes back to content.
    """

    def __init__(self, ctx: CallContext) -> None:
        super().__init__(ctx)
        fenced = bool(ctx.opener and ctx.opener.startswith(FENCE_CLOSE))
        self._phase = _OPENING if fenced else None
        self._matched = 0  # characters of the fence marker matched so far
        self.bare_calls_when_tentative = fenced

    def feed(self, text: str) -> int:
        if self._phase is None:
            return super().feed(text)
        i, n = 0, len(text)
        while i < n:
            phase = self._phase
            if phase == _OPENING:
                if self._matched < len(FENCE_OPEN):
                    if text[i] != FENCE_OPEN[self._matched]:
                        self._phase = _BODY  # cannot happen: the engine opened on the full fence
                        continue
                    self._matched += 1
                    i += 1
                elif text[i] in _WS:
                    i += 1
                else:
                    self._phase = _BODY
                    self._matched = 0
            elif phase == _BODY:
                used = super().feed(text[i:])
                i += used
                if self.give_back:
                    if self.give_back.strip():  # a word after the calls: the fence is not closed
                        self._phase = _CLOSED
                        return i
                    self.give_back = ""  # whitespace before the closing fence is the fence's
                if i < n:
                    self._phase = _CLOSING
            elif phase == _CLOSING:
                c = text[i]
                if self._matched == 0 and c in _WS:
                    i += 1
                elif c == FENCE_CLOSE[self._matched]:
                    self._matched += 1
                    i += 1
                    if self._matched == len(FENCE_CLOSE):
                        self._phase = _CLOSED
                        return i
                else:
                    if self._matched:
                        self.junk(FENCE_CLOSE[: self._matched], "an unfinished ``` after the tool_code calls")
                    self._phase = _CLOSED
                    return i  # no closing fence: the rest is content again
            else:
                return i
        return n

    def _structure(self, c: str, i: int) -> int:
        # one bare call per line inside the fence: after a call, a name starts the next
        if self._phase is not None and self._st == AFTER_CALL and not self._bracketed:
            if c.isalpha() or c == "_":
                self._begin_run(NAME)
                return i
        return super()._structure(c, i)

    @property
    def idle(self) -> bool:
        if self._phase in (_CLOSING, _CLOSED):
            return True
        return super().idle


# Google's function-calling guide for Gemma 3 (ai.google.dev/gemma/docs/capabilities/function-calling):
# the model has no tool role or tokens; the functions and the call format are described in the
# prompt (its Python-style variant), the model answers with a call list, and the application
# passes the result back in the next user turn (as a ```tool_output block).
GEMMA3_TOOL_PROMPT = ToolPrompt(
    system=(
        "You have access to functions. If you decide to invoke any of the function(s), you MUST put it "
        "in the format of\n[func_name1(params_name1=params_value1, params_name2=params_value2...), "
        "func_name2(params)]\n\nYou SHOULD NOT include any other text in the response if you call a "
        "function\n{{ tools | map(attribute='function') | list | tojson(indent=2) }}"
    ),
    result="{% for r in results %}```tool_output\n{{ r.content }}\n```{% if not loop.last %}{{ '\\n' }}{% endif %}{% endfor %}",
    calls="pythonic",
    source="https://ai.google.dev/gemma/docs/capabilities/function-calling (Gemma 3: prompt and Python-style "
    "call format; results returned in a user turn)",
)

GEMMA3 = FormatSpec(
    name="gemma3",
    description="Google Gemma 3 (function calling as Python-style call lists)",
    aliases=("gemma-3", "gemma_3"),
    codec=ToolCodeCodec,
    # Gemma 3 has no tool tokens: a reply that starts with `[` or a ```tool_code fence may
    # be a call list; it is one only when its first call names a tool of the request.
    content_call_start=("[", FENCE_OPEN),
    end=("<end_of_turn>", "<eos>", "<start_of_turn>"),
    strip=("<bos>", "<pad>"),
    reasoning_doc="—",
    calls_doc="`[f(a=1, b='x')]` as the first content, or the same (or bare `f(a=1)`) inside a "
    "```` ```tool_code ```` fence; only for tools of the request",
    tokenizer_doc="gemma3",
    template="gemma3/tokenizer_config.json.xz",
    call_syntax="pythonic",
    tool_prompt=GEMMA3_TOOL_PROMPT,
)

SPECS = (GEMMA3,)
