"""What a deployed `chatsieve serve` exposes to be watched: `GET /metrics` in Prometheus' text format.

One `Metrics` per app (its own registry): requests by route and status, tokens in and out, time
to first token and inter-token latency, engine errors, refused requests by reason, open streams.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.metrics_core import HistogramMetricFamily, Metric
from prometheus_client.utils import INF, floatToGoString
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["CONTENT_TYPE_LATEST", "Metrics", "MetricsMiddleware"]

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_GAP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class Metrics:
    """The server's counters, histograms and gauges, in a registry of their own."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter("chatsieve_requests", "HTTP requests answered, by route and status",
                                ["route", "status"], registry=r)
        self.prompt_tokens = Counter("chatsieve_prompt_tokens", "prompt tokens sent to the engine", registry=r)
        self.completion_tokens = Counter("chatsieve_completion_tokens", "tokens the engine generated",
                                         registry=r)
        self.ttft = Histogram("chatsieve_time_to_first_token_seconds",
                              "from the engine request to its first token", buckets=_LATENCY_BUCKETS, registry=r)
        self.inter_token = CheapHistogram("chatsieve_inter_token_latency_seconds",
                                          "between two batches of tokens from the engine, per token",
                                          _GAP_BUCKETS, r)
        self.engine_errors = Counter("chatsieve_engine_errors", "generations the engine failed or garbled",
                                     registry=r)
        self.refused = Counter("chatsieve_refused_requests", "requests refused, by reason (the error code)",
                               ["reason"], registry=r)
        self.in_flight = Gauge("chatsieve_in_flight_generations", "generations being streamed from the engine",
                               registry=r)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class CheapHistogram:
    """A Prometheus histogram for a value observed once per engine event: `observe` is one bisect
    and two additions (prometheus_client's Histogram takes a lock and two counter updates per
    observation: about a tenth of a paced stream's per-event work). Observed from the event loop's
    thread only; exposed through the registry as a custom collector, in the same text form."""

    # what the compiled lane (chatsieve/_lane.c) reads and writes per token: slots, which it reaches
    # by their offsets; any other attribute is in the instance's __dict__
    __slots__ = ("bounds", "counts", "sum", "__dict__", "__weakref__")

    def __init__(self, name: str, documentation: str, buckets: tuple[float, ...], registry: CollectorRegistry):
        self.name, self.documentation = name, documentation
        self.bounds = buckets
        self.counts = [0] * (len(buckets) + 1)  # per bucket, not cumulative; the last is +Inf
        self.sum = 0.0
        registry.register(self)

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1  # le: a value on a bound is in its bucket
        self.sum += value

    def collect(self) -> Iterator[Metric]:
        cumulative, total = [], 0
        for bound, n in zip((*self.bounds, INF), self.counts):
            total += n
            cumulative.append((floatToGoString(bound), total))
        yield HistogramMetricFamily(self.name, self.documentation, buckets=cumulative, sum_value=self.sum)

    def describe(self) -> Iterator[Metric]:
        yield HistogramMetricFamily(self.name, self.documentation)


class MetricsMiddleware:
    """Serves `GET /metrics` and counts each HTTP response by route (the app's route paths;
    anything else is `other`, so a client cannot mint label values) and status."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics
        self._routes: frozenset[str] | None = None

    def _route(self, scope: Scope) -> str:
        if self._routes is None:
            app = scope.get("app")
            self._routes = frozenset(getattr(r, "path", "") for r in getattr(app, "routes", ()))
        path = scope.get("path", "")
        if path in self._routes or path == "/metrics":
            return path
        return "/v1/models/{model}" if path.startswith("/v1/models/") else "other"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["path"] == "/metrics" and scope["method"] == "GET":
            self.metrics.requests.labels(route="/metrics", status="200").inc()
            body = self.metrics.exposition()
            await send({"type": "http.response.start", "status": 200, "headers": [
                (b"content-type", CONTENT_TYPE_LATEST.encode()), (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body, "more_body": False})
            return
        status = [0]

        async def counting(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, counting)
        finally:
            self.metrics.requests.labels(route=self._route(scope), status=str(status[0] or 499)).inc()


def observe_refusal(metrics: Metrics | None, reason: Any) -> None:
    """Count one refused request under its error code."""
    if metrics is not None:
        metrics.refused.labels(reason=str(reason or "invalid_request")).inc()
