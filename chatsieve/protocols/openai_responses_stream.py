"""The OpenAI Responses event stream (`ResponseStream`): parser events to output items (reasoning,
message, function_call) and their sequence-numbered events, and the final ``response`` object.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping

from chatsieve._json import Raw, dumps, loads
from chatsieve.events import (
    ContentDelta,
    Event,
    ReasoningDelta,
    TokenLogprob,
    ToolCallArgsDelta,
    ToolCallEnd,
    ToolCallStart,
)
from chatsieve.protocols.common import sse_event
from chatsieve.protocols.openai_chat import TokenBytes, logprob_entries
from chatsieve.protocols.openai_responses_request import item_id

__all__ = ["ResponseStream", "response_object", "usage"]


def usage(input_tokens: int, output_tokens: int, reasoning_tokens: int = 0, cached_tokens: int = 0) -> dict:
    """The Responses usage: `input_tokens` includes the `cached_tokens` the engine's cache served."""
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": cached_tokens, "cache_write_tokens": 0},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": min(reasoning_tokens, output_tokens)},
        "total_tokens": input_tokens + output_tokens,
    }


def response_object(
    skeleton: Mapping,
    output: list[dict],
    *,
    status: str,
    usage: dict | None,
    incomplete_reason: str | None = None,
    error: dict | None = None,
) -> dict:
    """The ``response`` object: `skeleton` (ResponsesRequest.skeleton) with its outcome."""
    return {
        **skeleton,
        "status": status,
        "output": output,
        "usage": usage,
        "incomplete_details": {"reason": incomplete_reason} if incomplete_reason else None,
        "error": error,
    }


class _Item:
    """One output item being built: its wire id, index, kind and text so far."""

    __slots__ = ("id", "index", "kind", "parts", "call_id", "name", "logprobs")

    def __init__(self, kind: str, index: int, id: str, call_id: str = "", name: str = "") -> None:
        self.kind = kind  # "reasoning" | "message" | "function_call"
        self.index = index
        self.id = id
        self.parts: list[str] = []
        self.call_id = call_id
        self.name = name
        # a message's token logprob entries, when asked for: their JSON, comma-separated, as they
        # were sent (a long answer's entries as Python objects would be many times their size)
        self.logprobs = bytearray()

    def logprobs_json(self) -> Raw | list:
        """The entries as one JSON array (spliced into the closing events as it is); [] for none."""
        return Raw(b"[" + self.logprobs + b"]") if self.logprobs else []


class ResponseStream:
    """Parser events (already filtered) to Responses output items, and to their event stream.

    Adjacent deltas of one kind become one item (reasoning, message, function_call), in order; a
    change of kind closes the open item. `encode(events)` gives the SSE bytes of the deltas (an
    ``event:`` line and the JSON with its ``sequence_number``); with ``emit=False`` only the items
    are built (non-streaming). `output` is the finished items so far; `finish` closes the rest.
    `response` is then the response object, its logprobs as encoded JSON (`_json.Raw`: `dumps`
    writes it); `final` the same decoded.
    """

    def __init__(
        self,
        skeleton: dict,
        *,
        namespaces: Mapping[str, str] | None = None,
        emit: bool = True,
        logprobs: bool = False,
        top_logprobs: int = 0,
        token_bytes: TokenBytes | None = None,
        summary: bool = False,
    ) -> None:
        self.skeleton = skeleton
        self.summary = summary  # reasoning items carry their text as a summary part too
        self.logprobs = logprobs
        self.top_logprobs = top_logprobs
        self.token_bytes = token_bytes
        self.namespaces = dict(namespaces or {})
        self.emit = emit
        self.seq = 0
        self.output: list[dict] = []
        self._open: _Item | None = None
        self._calls: dict[int, _Item] = {}  # parser call index -> its open item
        self._buf: list[bytes] = []
        self._later: list[tuple[str, dict]] | None = None  # events kept unencoded (finish_parts)
        self._index: dict[str, int] = {}  # item id -> output_index
        self.response: dict | None = None

    @property
    def final(self) -> dict | None:
        """The response object as plain JSON values (its logprobs decoded)."""
        return None if self.response is None else loads(dumps(self.response))

    # -- the wire

    def _event(self, kind: str, fields: dict) -> None:
        if self.emit:
            payload = {"type": kind, "sequence_number": self.seq, **fields}
            if self._later is not None:
                self._later.append((kind, payload))
            else:
                self._buf.append(sse_event(kind, payload))
        self.seq += 1

    def _take(self) -> bytes:
        out = b"".join(self._buf)
        self._buf.clear()
        return out

    def start(self) -> bytes:
        """``response.created`` and ``response.in_progress``."""
        self._event("response.created", {"response": self.skeleton})
        self._event("response.in_progress", {"response": self.skeleton})
        return self._take()

    def encode(self, events: Iterable[Event]) -> bytes:
        """The SSE bytes for `events`; adjacent deltas of one item go out as one delta event."""
        run: list[str] = []  # delta texts of `run_item` not yet sent
        run_lps: list[TokenLogprob] = []  # their tokens' logprobs (a message's, when asked for)
        run_item: _Item | None = None
        for e in events:
            t = type(e)
            if t is ContentDelta or t is ReasoningDelta:
                if not e.text:
                    continue
                kind = "message" if t is ContentDelta else "reasoning"
                item = self._open
                if item is None or item.kind != kind:
                    self._delta(run_item, run, run_lps)
                    item = self._open_item(kind)
                text = e.text
                if self.logprobs and e.logprobs and t is ContentDelta:
                    run_lps.extend(e.logprobs)
            elif t is ToolCallArgsDelta:
                item = self._calls.get(e.index)
                if item is None or not e.json_text:
                    continue
                text = e.json_text
            else:
                self._delta(run_item, run, run_lps)
                if t is ToolCallStart:
                    self._close_open()
                    call = self._new_item("function_call", "fc", e.id, e.name)
                    self._calls[e.index] = call
                    self._open = call
                    self._event(
                        "response.output_item.added",
                        {"output_index": call.index, "item": self._call_item(call, "in_progress")},
                    )
                elif t is ToolCallEnd:
                    done = self._calls.pop(e.index, None)
                    if done is not None:
                        self._close_call(done, "incomplete" if e.incomplete else "completed")
                continue
            if item is not run_item:
                self._delta(run_item, run, run_lps)
                run_item = item
            item.parts.append(text)
            run.append(text)
        self._delta(run_item, run, run_lps)
        return self._take()

    def encode_text(self, kind: str, text: str) -> bytes | None:
        """`encode` of one reasoning or content delta that continues the open item; None where
        it opens one (see `StreamEncoder.encode`)."""
        item = self._open
        if item is None or item.kind != ("message" if kind == "content" else "reasoning") or self._later is not None:
            return None
        item.parts.append(text)
        self._delta(item, [text], [])
        return self._take()

    def _delta(self, item: _Item | None, run: list[str], lps: list[TokenLogprob]) -> None:
        """One delta event for `item` carrying the texts in `run` and their logprobs (both then
        emptied)."""
        if not run or item is None:
            return
        entries = b"[]"
        if lps:
            entries = dumps(logprob_entries(lps, self.top_logprobs, self.token_bytes))
            if item.logprobs:
                item.logprobs += b","
            item.logprobs += memoryview(entries)[1:-1]
            lps.clear()
        if self.emit:
            text = dumps(run[0] if len(run) == 1 else "".join(run))
            if item.kind == "function_call":
                self._buf.append(
                    b'event: response.function_call_arguments.delta\ndata: {"type":'
                    b'"response.function_call_arguments.delta","sequence_number":%d,"item_id":"%s",'
                    b'"output_index":%d,"delta":%s}\n\n' % (self.seq, item.id.encode(), item.index, text)
                )
            else:
                name = (
                    b"response.output_text.delta"
                    if item.kind == "message"
                    else b"response.reasoning_text.delta"
                )
                self._buf.append(
                    b'event: %s\ndata: {"type":"%s","sequence_number":%d,"item_id":"%s","output_index":%d,'
                    b'"content_index":0,"delta":%s%s}\n\n'
                    % (
                        name,
                        name,
                        self.seq,
                        item.id.encode(),
                        item.index,
                        text,
                        b',"logprobs":' + entries if item.kind == "message" else b"",
                    )
                )
                if self.summary and item.kind == "reasoning":
                    self.seq += 1
                    self._buf.append(
                        b'event: response.reasoning_summary_text.delta\ndata: {"type":'
                        b'"response.reasoning_summary_text.delta","sequence_number":%d,"item_id":"%s",'
                        b'"output_index":%d,"summary_index":0,"delta":%s}\n\n'
                        % (self.seq, item.id.encode(), item.index, text)
                    )
        elif self.summary and item.kind == "reasoning":
            self.seq += 1
        self.seq += 1
        run.clear()

    def _new_item(self, kind: str, prefix: str, call_id: str = "", name: str = "") -> _Item:
        item = _Item(kind, len(self._index), item_id(prefix), call_id, name)
        self._index[item.id] = item.index
        return item

    def _open_item(self, kind: str) -> _Item:
        self._close_open()
        item = self._new_item(kind, "msg" if kind == "message" else "rs")
        self._open = item
        if kind == "message":
            added = {
                "id": item.id,
                "type": "message",
                "status": "in_progress",
                "role": "assistant",
                "content": [],
            }
            part: dict = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        else:
            added = {
                "id": item.id,
                "type": "reasoning",
                "summary": [],
                "content": [],
                "status": "in_progress",
            }
            part = {"type": "reasoning_text", "text": ""}
        self._event("response.output_item.added", {"output_index": item.index, "item": added})
        self._event(
            "response.content_part.added",
            {"item_id": item.id, "output_index": item.index, "content_index": 0, "part": part},
        )
        if self.summary and kind == "reasoning":
            self._event(
                "response.reasoning_summary_part.added",
                {"item_id": item.id, "output_index": item.index, "summary_index": 0,
                 "part": {"type": "summary_text", "text": ""}},
            )
        return item

    def _close_open(self, status: str = "completed") -> None:
        item, self._open = self._open, None
        if item is None or item.kind == "function_call":
            return  # calls close on their ToolCallEnd (or at finish)
        text = "".join(item.parts)
        where = {"item_id": item.id, "output_index": item.index, "content_index": 0}
        if item.kind == "message":
            logprobs = item.logprobs_json()
            item.logprobs = bytearray()
            part = {"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs}
            self._event("response.output_text.done", {**where, "text": text, "logprobs": logprobs})
            done = {
                "id": item.id,
                "type": "message",
                "status": status,
                "role": "assistant",
                "content": [part],
            }
        else:
            part = {"type": "reasoning_text", "text": text}
            self._event("response.reasoning_text.done", {**where, "text": text})
            summary = []
            if self.summary:  # the reasoning text itself, whole (docs/serving.md)
                summary = [{"type": "summary_text", "text": text}]
                at = {"item_id": item.id, "output_index": item.index, "summary_index": 0}
                self._event("response.reasoning_summary_text.done", {**at, "text": text})
                self._event("response.reasoning_summary_part.done", {**at, "part": summary[0]})
            done = {
                "id": item.id,
                "type": "reasoning",
                "summary": summary,
                "content": [part],
                "status": status,
            }
        self._event("response.content_part.done", {**where, "part": part})
        self._done(item, done)

    def _call_item(self, item: _Item, status: str) -> dict:
        out = {
            "id": item.id,
            "type": "function_call",
            "status": status,
            "call_id": item.call_id,
            "name": item.name,
            "arguments": "".join(item.parts) if status != "in_progress" else "",
        }
        ns = self.namespaces.get(item.name)
        if ns is not None:
            out["namespace"] = ns
        return out

    def _close_call(self, item: _Item, status: str) -> None:
        if self._open is item:
            self._open = None
        done = self._call_item(item, status)
        self._event(
            "response.function_call_arguments.done",
            {
                "item_id": item.id,
                "output_index": item.index,
                "name": item.name,
                "arguments": done["arguments"],
            },
        )
        self._done(item, done)

    def _done(self, item: _Item, done: dict) -> None:
        self._event("response.output_item.done", {"output_index": item.index, "item": done})
        # items finish in the order they were opened (one open text item; calls end in order)
        self.output.append(done)
        if len(self.output) > 1 and self._index[self.output[-2]["id"]] > item.index:
            self.output.sort(key=lambda d: self._index[d["id"]])  # a call that ended after a later item

    def close_items(self, *, cut: bool = False) -> None:
        """Close every open item (at the end of the output); `cut` (max_output_tokens) marks the
        item the output was cut in, and unfinished calls, incomplete."""
        self._close_open("incomplete" if cut else "completed")
        for index in sorted(self._calls):
            self._close_call(self._calls.pop(index), "incomplete" if cut else "completed")

    def keepalive(self) -> bytes:
        """A ``keepalive`` event (numbered like the others) for a stream the engine keeps silent:
        clients skip an event type they do not know (Codex, the openai SDK), but it resets their
        idle timeout, which a comment line would not (SSE readers drop comments unseen)."""
        self._event("keepalive", {})
        return self._take()

    def finish(self, *, usage: dict, incomplete_reason: str | None = None) -> bytes:
        """Close the open items, then ``response.completed`` (or ``response.incomplete``)."""
        return b"".join(self.finish_parts(usage=usage, incomplete_reason=incomplete_reason))

    def finish_parts(
        self, *, usage: dict, incomplete_reason: str | None = None, stored: Callable[[dict], None] | None = None
    ) -> Iterator[bytes]:
        """`finish`'s bytes an event at a time, each encoded when asked for: a long answer's
        logprob entries are in four of them, which need not all exist at once. `stored(response)`
        is called before the last event (the one that tells a client the response is done)."""
        if self._buf:
            yield self._take()
        self._later = []
        try:
            self.close_items(cut=incomplete_reason is not None)
            status = "incomplete" if incomplete_reason else "completed"
            self.response = response_object(
                self.skeleton, self.output, status=status, usage=usage, incomplete_reason=incomplete_reason
            )
            self._event(f"response.{status}", {"response": self.response})
            later, self._later = self._later, None
        finally:
            self._later = None
        while later:
            kind, payload = later.pop(0)
            if not later and stored is not None:
                stored(self.response)
            data = sse_event(kind, payload)
            del payload
            yield data
            del data

    def fail(self, message: str, *, code: str = "server_error", usage: dict | None = None) -> bytes:
        """An ``error`` event, then ``response.failed`` with the items finished so far."""
        self._event("error", {"code": code, "message": message, "param": None})
        self.response = response_object(
            # the response's error.code is one of OpenAI's fixed set: ours goes in the error event
            self.skeleton,
            self.output,
            status="failed",
            usage=usage,
            error={"code": "server_error", "message": message},
        )
        self._event("response.failed", {"response": self.response})
        return self._take()

