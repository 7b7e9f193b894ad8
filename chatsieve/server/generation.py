"""One generation (`Generation`): an engine request's token batches through the parser and the
tool-call filter as event lists, within max_tokens and the reasoning budget, and its outcome.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, NamedTuple

from chatsieve.events import ContentDelta, Event, ReasoningDelta, ToolCallStart
from chatsieve.protocols.common import Outcome, ToolCallFilter, finish_reason
from chatsieve.server.backends import Backend, BackendError, GenerationRequest, Push, PushId, TokenBatch
from chatsieve.server.metrics import CheapHistogram, Metrics
from chatsieve.server.pool import ReplicaPool

log = logging.getLogger("chatsieve.server")

TextSink = Callable[[str, str], bool]  # (kind, text): written (True), or left to the caller (False)
_DELTA = {"reasoning": ReasoningDelta, "content": ContentDelta}


class IdLane(NamedTuple):
    """What `Generation._id_pusher`'s `push_id` reads and writes, for the compiled text lane
    (`chatsieve._lane`), which does what it does."""

    gen: Generation
    parser: Any  # StreamParser
    calls: ToolCallFilter
    produced: list[int]
    text: Any  # streaming.TextLane: what the text sink reads and writes
    histogram: CheapHistogram | None  # metrics.inter_token where it is one (observed in the lane)
    filter_here: bool  # calls.passes_text is ToolCallFilter's (done in the lane)


class Generation:
    """One backend generation pushed through the parser and the tool-call filter."""

    # what the compiled lane (chatsieve/_lane.c) reads and writes per token: slots, which it reaches
    # by their offsets; any other attribute is in the instance's __dict__
    __slots__ = (
        "completion_tokens", "max_tokens", "vocab_size", "reasoning_budget", "_past_reasoning", "_budget_hit",
        "reasoning_tokens", "metrics", "_last", "_started", "__dict__", "__weakref__",
    )  # fmt: skip

    def __init__(
        self,
        backend: Backend | ReplicaPool,
        request: GenerationRequest,
        parser: Any,
        calls: ToolCallFilter,
        prompt_tokens: int,
    ) -> None:
        self.backend = backend
        self.request = request
        self.parser = parser
        self.calls = calls
        self.prompt_tokens = prompt_tokens
        self.completion_tokens = 0
        self.max_tokens: int | None = None  # cut locally at this many tokens (finish "length")
        self.vocab_size: int | None = None  # ids at or above it are an engine fault
        self.reasoning_end_id: int | None = None  # two phases: reasoning, then the constrained answer
        self.answer_prefix_ids: list[int] = []  # written between the two (gpt-oss: the final channel)
        self.reasoning_budget: int | None = None  # reasoning tokens before the reasoning is closed here
        self.budget_close_ids: list[int] = []  # what closes it (the family's marker)
        # tokens fed before the first content or call: what the budget counts (content the parser
        # still holds counts too, so this is no exact reasoning count for usage)
        self.reasoning_tokens = 0
        self._past_reasoning = False  # content or a call came
        self._budget_hit = False
        self._engine_finish: str | None = None
        # prompt tokens the engine's prefix cache served: the first engine request's count where the
        # engine reported one, else a later request's (its prompt holds this one), at most the prompt
        self.cached_tokens: int | None = None
        self._started = self._last = 0.0  # when the engine request began, and its last batch came
        self.request_id = ""
        self.metrics: Metrics | None = None
        self.note_scrub: tuple[str, ...] = ()  # taken out of the unusable-call note (the family's delimiters)
        self.headers: dict[str, str] = {}  # response headers preparing the request added

    async def events(
        self, sink: Callable[[list[Event]], None] | None = None, text_sink: TextSink | None = None
    ) -> AsyncIterator[list[Event]]:
        """Filtered event lists as the engine produces ids; BackendError if the engine fails.
        Counted in `metrics` (when set): generations in flight, prompt and completion tokens.

        With `sink`, the event lists of ordinary engine events (ids that cannot end the output,
        in no batch the limits cut) go to `sink` instead, straight from the engine connection's
        callback (`Backend.generate`'s push); the rest, and the end, are yielded. With `text_sink`
        too, an event of one token id the parser's hot lane takes (`StreamParser.take_id`) and the
        tool-call filter passes as it is goes to `text_sink(kind, text)` without its delta object
        or list; where that returns False (it cannot write it now), to `sink` as usual.

        With `reasoning_end_id` (a constraint the engine cannot combine with reasoning), two
        engine requests make one answer: unconstrained up to the reasoning's end token, then
        constrained from the prompt plus that reasoning; usage counts both. A `reasoning_budget`
        that runs out before the reasoning ends does the same: the first request is cancelled
        there, the family's closing marker written, and a second request goes on from it."""
        m = self.metrics
        if m is not None:
            m.in_flight.inc()
            m.prompt_tokens.inc(self.prompt_tokens)
        try:  # (one generator, not two: this runs once per engine event)
            produced: list[int] = []
            first = self.request
            end_id = self.reasoning_end_id
            if end_id is not None:
                first = dataclasses.replace(self.request, constraint=None,
                                            stop_token_ids=(*self.request.stop_token_ids, end_id))
            async for events in self._run(first, produced, sink, text_sink):
                yield events
            if self._budget_hit and end_id is None:  # the reasoning budget ran out: close it, then go on
                produced.extend(self.budget_close_ids)
                events = self.parser.feed(token_ids=list(self.budget_close_ids))
                if events:
                    yield self.calls.apply(events)
            if self._budget_hit or end_id is not None and self._engine_finish == "stop" and not self.parser.stopped:
                if end_id is not None and (not produced or produced[-1] != end_id):  # trimmed, or cut by the budget
                    produced.append(end_id)
                    events = self.parser.feed(token_ids=[end_id])
                    if events:
                        yield self.calls.apply(events)
                if self.answer_prefix_ids:  # what opens the answer, as the model would write it
                    produced.extend(self.answer_prefix_ids)
                    events = self.parser.feed(token_ids=list(self.answer_prefix_ids))
                    if events:
                        yield self.calls.apply(events)
                left = None if self.max_tokens is None else self.max_tokens - self.completion_tokens
                if left is None or left > 0:
                    second = dataclasses.replace(
                        self.request, prompt_token_ids=[*self.request.prompt_token_ids, *produced],
                        max_tokens=left if self.request.max_tokens is not None else self.request.max_tokens)
                    async for events in self._run(second, produced, sink, text_sink):
                        yield events
            events = self.calls.apply(self.parser.finish("stop" if self.parser.stopped else self._engine_finish))
            self.calls.finish()
            if self.calls.unusable and self.parser.finish_reason != "length":
                # an agent's turn never ends empty: a call that could not be used says so in the text
                events.append(ContentDelta(self.calls.note(self.note_scrub)))
                log.info("%s %d unusable tool call(s): %s", self.request_id, len(self.calls.unusable),
                         "; ".join(self.calls.unusable))
            yield events
            if self.calls.dropped:
                log.info("dropped %d tool call(s) by tool_choice policy", len(self.calls.dropped))
        finally:
            if m is not None:
                m.in_flight.dec()
                m.completion_tokens.inc(self.completion_tokens)

    async def _run(
        self,
        request: GenerationRequest,
        produced: list[int],
        sink: Callable[[list[Event]], None] | None,
        text_sink: TextSink | None = None,
    ) -> AsyncIterator[list[Event]]:
        """One engine request fed through the parser; its finish reason in `_engine_finish`."""
        self._engine_finish = None
        self._last = self._started = time.monotonic()
        accept, calls = self._accept, self.calls
        push = push_id = None
        if sink is not None:
            push = self._pusher(sink, produced)
            if text_sink is not None:
                push_id = self._id_pusher(sink, text_sink, produced)
        stream = self.backend.generate(request, push, push_id)
        waited = False
        try:
            async for batch in stream:
                if waited and batch.token_ids and not batch.finish_reason:
                    break  # the engine went on past the stop token
                events, cut = accept(batch, produced)
                if events:
                    yield calls.apply(events)
                if cut:
                    break  # closing the stream cancels the engine request
                if self.parser.stopped and self._engine_finish is None:  # a local stop
                    # a stop token ends the engine's generation too, and its last event (with the
                    # cached-token count) comes next: it is read; a stop string, or tokens after the
                    # stop token, cancel the engine request
                    if waited or self.parser.stop_sequence is not None:
                        break
                    waited = True
        except BackendError:
            if self.metrics is not None:
                self.metrics.engine_errors.inc()
            raise
        finally:
            await stream.aclose()

    def _accept(self, batch: TokenBatch, produced: list[int]) -> tuple[list[Event], bool]:
        """The events of one engine batch, and whether the budget or max_tokens cut it (reading
        the engine stops there). This runs once per engine event (one token each, when the
        engine is paced)."""
        ids, lps, over = batch.token_ids, batch.logprobs, False
        n = len(ids)
        events: list[Event] = []
        if n:
            if self.metrics is not None:
                now = time.monotonic()
                if not self.completion_tokens:
                    self.metrics.ttft.observe(now - self._started)
                else:
                    self.metrics.inter_token.observe((now - self._last) / n)
                self._last = now
            max_tokens = self.max_tokens
            if max_tokens is not None and self.completion_tokens + n > max_tokens:
                keep = max(max_tokens - self.completion_tokens, 0)
                ids, lps, over = ids[:keep], lps[:keep] if lps is not None else None, True
                n = len(ids)
        vocab_size = self.vocab_size
        if n and vocab_size is not None and not (
            0 <= ids[0] < vocab_size if n == 1 else min(ids) >= 0 and max(ids) < vocab_size
        ):
            bad = next(i for i in ids if not 0 <= i < vocab_size)
            raise BackendError(
                f"the engine sent token id {bad}, outside the tokenizer's vocabulary "
                f"(0..{vocab_size - 1}): does --model-dir hold the engine's tokenizer?"
            )
        budget = self.reasoning_budget
        if n and budget is not None and not (self._past_reasoning or self._budget_hit):
            room = budget - self.reasoning_tokens
            if n > room:  # the budget ends in this batch: feed up to it, then see
                events = self._feed(ids[:room], lps[:room] if lps is not None else None)
                produced.extend(ids[:room])
                if not self._past_reasoning:
                    self._budget_hit = True
                    return events, True
                ids, lps = ids[room:], lps[room:] if lps is not None else None
                n = len(ids)
        if n:
            produced.extend(ids)
            if events:
                events += self._feed(ids, lps)
            else:
                events = self._feed(ids, lps)
        if batch.finish_reason:
            self._engine_finish = batch.finish_reason
        if batch.cached_tokens is not None and self.cached_tokens is None:
            self.cached_tokens = batch.cached_tokens
        if over:
            self._engine_finish = "length"  # the engine went past max_tokens: cut here
        return events, over

    def _pusher(self, sink: Callable[[list[Event]], None], produced: list[int]) -> Push:
        """`Backend.generate`'s push: takes the batches `_accept` cannot stop on (ids that are
        no stop token, no stop strings, within max_tokens and the reasoning budget; the engine's
        last batch is never pushed) and sends their filtered events to `sink`; declines the
        others, which `_run` reads."""
        parser, calls, accept = self.parser, self.calls, self._accept
        stop_ids = parser.stop_ids
        if parser.stop_strings:
            return lambda batch: False

        def push(batch: TokenBatch) -> bool:
            ids = batch.token_ids
            n = len(ids)
            if (
                not n
                or self.max_tokens is not None and self.completion_tokens + n > self.max_tokens
                or self.reasoning_budget is not None
                and not (self._past_reasoning or self._budget_hit)
                and n > self.reasoning_budget - self.reasoning_tokens
                or not stop_ids.isdisjoint(ids)
            ):
                return False
            events, _ = accept(batch, produced)
            if events:
                sink(calls.apply(events))
            return True

        return push

    def _id_pusher(
        self, sink: Callable[[list[Event]], None], text_sink: TextSink, produced: list[int]
    ) -> PushId | None:
        """`Backend.generate`'s `push_id`: one token id (an engine event with nothing else) that
        the parser's hot lane takes, the tool-call filter passes as it is and no limit stops on
        is counted as `_accept` counts it and its text goes to `text_sink` (or, where that
        cannot write it now, its event to `sink`; an id the parser adds to a call's held
        arguments sends nothing, as its empty batch would); any other id is declined, nothing taken
        (the backend then pushes it as a batch). None where the parser has no hot lane for ids,
        or stop strings are matched."""
        parser, calls = self.parser, self.calls
        take = getattr(parser, "take_id", None)
        if take is None or parser.stop_strings:
            return None
        passes = calls.passes_text

        def push_id(tid: int) -> bool:
            n = self.completion_tokens
            vocab_size = self.vocab_size
            if (
                self.max_tokens is not None and n >= self.max_tokens
                or vocab_size is not None and not 0 <= tid < vocab_size
                or self.reasoning_budget is not None
                and not (self._past_reasoning or self._budget_hit)
                and self.reasoning_tokens >= self.reasoning_budget
            ):
                return False
            text = take(tid)
            if text is None:
                return False
            m = self.metrics
            if m is not None:
                now = time.monotonic()
                if n:
                    m.inter_token.observe(now - self._last)
                else:
                    m.ttft.observe(now - self._started)
                self._last = now
            self.completion_tokens = n + 1
            produced.append(tid)
            if not self._past_reasoning:
                self.reasoning_tokens += 1
            if not text:  # whitespace the lane holds back, or added to a call's held arguments: nothing to send
                return True
            kind = parser.lane
            if kind == "content":
                self._past_reasoning = True
            if passes(kind):
                if not text_sink(kind, text):
                    sink([_DELTA[kind](text)])
            else:
                events = calls.apply([_DELTA[kind](text)])
                if events:
                    sink(events)
            return True

        lane = getattr(text_sink, "lane", None)
        if lane is not None:  # what push_id reads and writes, for the compiled lane (chatsieve._lane)
            m = self.metrics
            push_id.lane = IdLane(  # type: ignore[attr-defined]
                self, parser, calls, produced, lane,
                m.inter_token if m is not None and type(m.inter_token) is CheapHistogram else None,
                type(calls).passes_text is ToolCallFilter.passes_text,
            )  # fmt: skip
        return push_id

    def _feed(self, ids: list[int], lps: list | None) -> list[Event]:
        """Feed a batch of ids and count them; with stop strings, one by one, so that the tokens
        the engine sent past the stop (however it batched them) are not counted."""
        parser = self.parser
        if lps is None and len(ids) == 1:  # a paced engine's usual batch
            self.completion_tokens += 1
            events = parser.feed(token_ids=ids)
        elif len(ids) == 1 or not parser.stopped and not parser.stop_strings:
            self.completion_tokens += len(ids)
            events = parser.feed(token_ids=ids, logprobs=list(lps) if lps is not None else None)
        else:
            events = []
            for k, token in enumerate(ids):
                if parser.stopped:
                    break
                self.completion_tokens += 1
                events += parser.feed(token_ids=[token], logprobs=[lps[k]] if lps is not None else None)
        if not self._past_reasoning:
            self.reasoning_tokens += len(ids)
            for e in events:
                t = type(e)
                if t is ContentDelta or t is ToolCallStart:
                    self._past_reasoning = True
                    break
        return events

    @property
    def finish_reason(self) -> str:
        return finish_reason(self.parser.finish_reason, self.calls.kept)

    @property
    def outcome(self) -> Outcome:
        """How the generation ended, once `events()` is exhausted."""
        return Outcome(
            finish_reason=self.finish_reason,
            prompt_tokens=self.prompt_tokens,
            completion_tokens=self.completion_tokens,
            stop_sequence=self.parser.stop_sequence,
            cached_tokens=min(self.cached_tokens or 0, self.prompt_tokens),
        )
