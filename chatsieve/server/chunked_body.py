"""A streamed response's body chunks written straight to the client's transport, past the ASGI
send chain and h11's per-event work; the head and the end still go through h11 (its state stays right).

`chatsieve serve`'s h11 protocol (security.guarded_h11) offers every HTTP request a `ChunkedBody`
as the ASGI scope extension `chatsieve.chunked_body`. A response that has sent its head through
the usual ASGI `send` may then write its body chunks with `ChunkedBody.write`, framed as h11 frames
them (`%x CRLF data CRLF`), and ends with the usual empty `http.response.body`, which h11 turns
into the last chunk. It is offered only where h11 chose chunked framing (an HTTP/1.1 client, no
Content-Length, not HEAD); anywhere else the app writes through `send` as before. What goes
this way passes no middleware: it suits only bodies no middleware transforms (no compression).
"""

from __future__ import annotations

from typing import Any

from h11._writers import ChunkedWriter

EXTENSION = "chatsieve.chunked_body"


class ChunkedBody:
    """Body chunks for one request/response cycle of uvicorn's h11 protocol."""

    __slots__ = ("_cycle", "_transport", "_flow")

    def __init__(self, cycle: Any) -> None:
        self._cycle = cycle  # uvicorn's RequestResponseCycle
        self._transport = cycle.transport
        self._flow = cycle.flow

    def usable(self) -> bool:
        """Whether chunks may be written now: the head went out through h11 with chunked framing,
        and neither the end nor a disconnect has come."""
        c = self._cycle
        try:
            return (
                c.response_started
                and not c.response_complete
                and not c.disconnected
                and type(c.conn._writer) is ChunkedWriter
                and c.scope["method"] != "HEAD"
            )
        except (AttributeError, KeyError):  # another uvicorn or h11 than this was written for: use send
            return False

    @property
    def ready(self) -> bool:
        """Whether a write goes out now: the client is reading (its buffer is below uvicorn's high
        water mark) or gone (a write is then dropped, as uvicorn's send drops it)."""
        return not self._flow.write_paused or self._cycle.disconnected

    def write(self, data: bytes) -> None:
        """One chunk; nothing for empty data (an empty chunk would end the body)."""
        if data and not self._cycle.disconnected and not self._transport.is_closing():
            self._transport.write(b"%x\r\n%b\r\n" % (len(data), data))

    async def drain(self) -> None:
        """Until the client has read enough for `ready`."""
        if self._flow.write_paused and not self._cycle.disconnected:
            await self._flow.drain()


def offer(protocol: Any) -> None:
    """Put a `ChunkedBody` for `protocol`'s current cycle in its request's scope (once per cycle)."""
    cycle = getattr(protocol, "cycle", None)
    if cycle is None or getattr(cycle, "response_started", True):
        return
    extensions = cycle.scope.setdefault("extensions", {})
    if EXTENSION not in extensions:
        try:
            extensions[EXTENSION] = ChunkedBody(cycle)
        except AttributeError:  # a cycle without transport or flow control: nothing offered
            pass
