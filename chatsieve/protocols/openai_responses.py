"""OpenAI Responses protocol (``POST /v1/responses``) as a `ClientProtocol`: the request
(protocols/openai_responses_request.py) in, the event stream (protocols/openai_responses_stream.py)
or the whole ``response`` object out; and the store's pages (a stored response's input items, 404s).

Sans-I/O like the rest of chatsieve: dicts in, dicts and bytes out; the server does the I/O
(the response store, previous_response_id lookups, the engine).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from chatsieve._json import dumps
from chatsieve.events import Event
from chatsieve.protocols.common import (
    Outcome,
    ParsedRequest,
    RequestError,
    RequestLimits,
    ResponseInfo,
    left_out_headers,
)
from chatsieve.protocols.openai_chat import error_body
from chatsieve.protocols.openai_responses_request import (
    ResponsesRequest,
    parse_responses_request,
    response_id,
)
from chatsieve.protocols.openai_responses_stream import ResponseStream, usage

__all__ = [
    "OPENAI_RESPONSES",
    "OpenAIResponses",
    "ResponsesParsed",
    "input_items_page",
    "not_found",
]

PING_INTERVAL = 10.0  # seconds; Codex's idle timeout (stream_idle_timeout_ms) is 300 s by default


def not_found(response_id: str) -> RequestError:
    """OpenAI's 404 for an unknown (or another key's) response id."""
    return RequestError(
        f"Response with id '{response_id}' not found.", param="response_id", code="not_found", status=404
    )


def input_items_page(
    items: Sequence[Mapping],
    *,
    after: str | None = None,
    before: str | None = None,
    limit: str | int | None = None,
    order: str | None = None,
) -> dict:
    """``GET /v1/responses/{id}/input_items``: one page of a response's input items
    (``order`` desc by default, as OpenAI's; ``after`` / ``before`` are item ids; limit 1..100)."""
    if order is None:
        order = "desc"
    if order not in ("asc", "desc"):
        raise RequestError("'order' must be 'asc' or 'desc'", param="order")
    try:
        n = 20 if limit is None else int(limit)
    except ValueError:
        n = 0
    if not 1 <= n <= 100:
        raise RequestError("'limit' must be an integer from 1 to 100", param="limit")
    seq = list(items) if order == "asc" else list(reversed(items))
    ids = [it.get("id") for it in seq]
    for name, cursor in (("after", after), ("before", before)):
        if cursor is not None and cursor not in ids:
            raise RequestError(f"'{name}' names no input item of this response: {cursor!r}", param=name)
    start = ids.index(after) + 1 if after is not None else 0
    stop = ids.index(before) if before is not None else len(seq)
    page = seq[start:stop][:n]
    return {
        "object": "list",
        "data": page,
        "first_id": page[0].get("id") if page else None,
        "last_id": page[-1].get("id") if page else None,
        "has_more": start + len(page) < stop,
    }


# ---------------------------------------------------------------- the protocol


@dataclass(frozen=True)
class ResponsesParsed(ParsedRequest):
    """A parsed Responses request: the internal request, the Responses fields, and what the
    server hands in -- `keep(response)` stores the finished response (store: true), and
    `count_tokens(text)` counts the reasoning tokens for usage."""

    request: ResponsesRequest | None = None
    keep: Callable[[dict], None] | None = None
    count_tokens: Callable[[str], int] | None = None


class _Outcomes:
    """Shared by the encoder and the collector: the response's skeleton and its ending.

    Closing a response stores it (`keep`) and counts its reasoning tokens, so closing blocks: the
    runner asks for the encoder's `finish_parts` and the collector's `body` (`blocking`) in a
    worker thread."""

    blocking = True

    def __init__(self, parsed: ResponsesParsed, info: ResponseInfo, emit: bool) -> None:
        assert parsed.request is not None
        self.parsed = parsed
        req = parsed.request
        self.out = ResponseStream(
            req.skeleton(id=response_id(), model=info.model),
            namespaces=req.namespaces,
            emit=emit,
            logprobs=req.logprobs,
            top_logprobs=req.top_logprobs,
            token_bytes=info.token_bytes,
            summary=req.reasoning_summary not in (None, "none"),
        )

    def _ending(self, outcome: Outcome) -> tuple[dict, str | None]:
        """(usage, incomplete reason) of the finished response."""
        reasoning = "".join(
            p["text"] for item in self.out.output if item["type"] == "reasoning" for p in item["content"]
        )
        count = self.parsed.count_tokens
        # the reasoning text's own tokens where it can be counted; the runner's count (tokens
        # before the first content or call) takes in the batch the content began in
        spent = count(reasoning) if reasoning and count else outcome.reasoning_tokens
        cut = outcome.finish_reason == "length"
        return (usage(outcome.prompt_tokens, outcome.completion_tokens, spent, outcome.cached_tokens),
                "max_output_tokens" if cut else None)


class ResponsesEncoder(_Outcomes):
    """The Responses event stream for one request (a `StreamEncoder`)."""

    def __init__(self, parsed: ResponsesParsed, info: ResponseInfo) -> None:
        super().__init__(parsed, info, emit=True)

    def start(self) -> bytes:
        return self.out.start()

    def encode(self, events: Iterable[Event]) -> bytes:
        return self.out.encode(events)

    def encode_text(self, kind: str, text: str) -> bytes | None:
        return self.out.encode_text(kind, text)

    def finish(self, outcome: Outcome) -> bytes:
        return b"".join(self.finish_parts(outcome))

    def finish_parts(self, outcome: Outcome) -> Iterator[bytes]:
        """The closing events one at a time, each encoded when asked for; the response is stored
        (`keep`) before the last, which tells the client it is done."""
        usage_, reason = self._ending(outcome)
        yield from self.out.finish_parts(usage=usage_, incomplete_reason=reason, stored=self.parsed.keep)

    def error(self, e: RequestError) -> bytes:
        return self.out.fail(e.message, code=e.code or "server_error")

    def ping(self) -> bytes | None:
        return self.out.keepalive()


class ResponsesCollector(_Outcomes):
    """The whole ``response`` object for one request (a `Collector`)."""

    def __init__(self, parsed: ResponsesParsed, info: ResponseInfo) -> None:
        super().__init__(parsed, info, emit=False)

    def apply(self, events: Iterable[Event]) -> None:
        self.out.encode(events)

    def body(self, outcome: Outcome) -> bytes:
        """The response object's JSON (stored first, with `keep`)."""
        usage_, reason = self._ending(outcome)
        self.out.finish(usage=usage_, incomplete_reason=reason)
        assert self.out.response is not None
        if self.parsed.keep is not None:
            self.parsed.keep(self.out.response)
        return dumps(self.out.response)


class OpenAIResponses:
    """``POST /v1/responses`` as a `chatsieve.protocols.common.ClientProtocol`.

    `parse` alone knows no earlier responses; the server's `parse_with(history, ...)` gives the
    items a previous_response_id stands for and the store's `keep`."""

    name = "openai_responses"
    # seconds of engine silence (a long prefill) before a `keepalive` event; sent until the engine
    # answers or the server's --backend-timeout gives up on it (then the stream fails)
    ping_interval: float | None = PING_INTERVAL

    def parse(self, body: Any, limits: RequestLimits) -> ResponsesParsed:
        return self.parse_with(parse_responses_request(body, limits))

    def parse_with(
        self,
        req: ResponsesRequest,
        history: Sequence[Mapping] = (),
        *,
        format: str | None = None,
        keep: Callable[[dict], None] | None = None,
        count_tokens: Callable[[str], int] | None = None,
    ) -> ResponsesParsed:
        headers = left_out_headers(req.left_out)
        return ResponsesParsed(
            chat=req.chat_request(history, format=format),
            headers=headers,
            request=req,
            keep=keep if req.store else None,
            count_tokens=count_tokens,
        )

    def encoder(self, request: ParsedRequest, info: ResponseInfo) -> ResponsesEncoder:
        assert isinstance(request, ResponsesParsed)
        return ResponsesEncoder(request, info)

    def collector(self, request: ParsedRequest, info: ResponseInfo) -> ResponsesCollector:
        assert isinstance(request, ResponsesParsed)
        return ResponsesCollector(request, info)

    def error_body(self, e: RequestError) -> dict:
        return error_body(e.message, type=e.type, param=e.param, code=e.code)


OPENAI_RESPONSES = OpenAIResponses()

