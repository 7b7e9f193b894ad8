"""The body of a harmony (gpt-oss) function-call message: one JSON object, the
function's arguments. The name comes from the message header, so the call starts
at once; the object streams as valid-prefix fragments."""

from __future__ import annotations

from .base import CallContext, RegionCodec
from .json import JsonScanner

_WS = " \t\r\n"


class HarmonyArgsCodec(RegionCodec):
    """Arguments of the function named by the header (`to=functions.NAME`). The
    engine ends the body at `<|call|>`, `<|end|>` or the next message."""

    def __init__(self, ctx: CallContext, name: str) -> None:
        super().__init__(ctx)
        self._sc = JsonScanner()
        self._error: str | None = None
        self._junk: list[str] = []
        self.start(name)

    def feed(self, text: str) -> int:
        sc = self._sc
        if self._error is not None or sc.done:
            self._junk.append(text)
            return len(text)
        if not sc.started:
            body = text.lstrip(_WS)
            if not body:
                return len(text)
            if body[0] != "{":
                self._error = f"the arguments are not a JSON object (found {body[0]!r})"
                self._junk.append(body)
                return len(text)
        used = sc.feed(text)
        self.args(sc.take())
        if sc.error is not None:
            self._error = f"invalid JSON: {sc.error}"
            self._junk.append(text[used:])
        elif used < len(text):
            self._junk.append(text[used:])
        return len(text)

    def plain(self, text: str) -> str | None:
        return self._sc.plain(text) if self._error is None else None

    def marker(self, marker: str) -> bool:
        if self._error is None and self._sc.in_string and marker not in self.ctx.gated:
            self.feed(marker)  # a delimiter spelled inside a JSON string is just text
            return True
        return False

    def close(self, *, truncated: bool) -> None:
        sc = self._sc
        if self._error is None and not sc.done:
            if not sc.started and not truncated:
                self.args("{}")  # `<|message|><|call|>`: a call without arguments
                self.end()
                return
            self._error = "the output ended inside the call" if truncated else "unterminated JSON object"
            self.fail(self._error, truncated=truncated)
            return
        if self._error is not None:
            self.fail(self._error)
            return
        self.end()
        junk = "".join(self._junk)
        self.junk(junk, "text after the arguments object")
