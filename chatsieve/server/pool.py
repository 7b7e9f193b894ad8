"""Several replicas of one engine behind one `chatsieve serve`: each generation goes to the
least-loaded healthy replica; one that refuses the connection is marked down and the request
goes to another (nothing had reached it); a background health check (``GET /health``, which
vLLM, SGLang and llama.cpp all serve) skips replicas that fail it until they pass again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass

from chatsieve.server.backends import Backend, BackendError, GenerationRequest, Push, PushId, TokenBatch
from chatsieve.server.client import ClientError, EngineHTTP

log = logging.getLogger("chatsieve.server")

HEALTH_INTERVAL = 5.0  # seconds between health checks of each replica
HEALTH_TIMEOUT = 5.0


@dataclass(eq=False)
class Replica:
    backend: Backend
    health_url: str
    in_flight: int = 0  # generations streaming from it now
    healthy: bool = True


class ReplicaPool:
    """`generate` like a Backend, spread over replicas (one replica: it is simply used)."""

    def __init__(
        self, backends: list[Backend], client: EngineHTTP, *, health_interval: float = HEALTH_INTERVAL
    ) -> None:
        if not backends:
            raise ValueError("a replica pool needs at least one backend")
        self.replicas = [Replica(b, b.base_url + "/health") for b in backends]
        self.client = client
        self.health_interval = health_interval
        self._health_task: asyncio.Task | None = None

    def pick(self, exclude: set[Replica]) -> Replica | None:
        """The least-loaded healthy replica not in `exclude`; if none is healthy, the least-loaded
        of the rest (a request is still tried rather than refused); None when all were tried."""
        left = [r for r in self.replicas if r not in exclude]
        if not left:
            return None
        healthy = [r for r in left if r.healthy] or left
        return min(healthy, key=lambda r: r.in_flight)

    def generate(
        self, req: GenerationRequest, push: Push | None = None, push_id: PushId | None = None
    ) -> AsyncIterator[TokenBatch]:
        """The batches of one generation. One replica: its own stream, unwrapped (a layer
        less on every engine event; it has no other replica to retry on), and `push` and
        `push_id` as `Backend.generate` takes them. Several: no pushing (a retry starts another
        stream)."""
        if len(self.replicas) == 1:
            return self.replicas[0].backend.generate(req, push, push_id)
        return self._spread(req)

    async def _spread(self, req: GenerationRequest) -> AsyncIterator[TokenBatch]:
        tried: set[Replica] = set()
        failures: list[BackendError] = []
        while True:
            replica = self.pick(tried)
            if replica is None:  # every replica refused the connection
                raise failures[-1]
            tried.add(replica)
            replica.in_flight += 1
            started = False
            try:
                async with contextlib.aclosing(replica.backend.generate(req)) as stream:
                    async for batch in stream:
                        started = True
                        yield batch
                return
            except BackendError as e:
                if not e.unreachable or started or len(self.replicas) == 1:
                    raise
                log.warning("replica %s is unreachable, trying another: %s", replica.backend.base_url, e)
                replica.healthy = False
                failures.append(e)
            finally:
                replica.in_flight -= 1

    # ---- health checks

    def start(self) -> None:
        if len(self.replicas) > 1 and self._health_task is None:
            self._health_task = asyncio.get_running_loop().create_task(self._health_loop())

    async def stop(self) -> None:
        if self._health_task is not None:
            self._health_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._health_task
            self._health_task = None

    async def _health_loop(self) -> None:
        while True:
            await asyncio.gather(*(self.check(r) for r in self.replicas))
            await asyncio.sleep(self.health_interval)

    async def check(self, replica: Replica) -> bool:
        """Ask the replica's /health; mark it healthy on a 200, down otherwise."""
        try:
            async with asyncio.timeout(HEALTH_TIMEOUT):
                resp = await self.client.get(replica.health_url)
                async with resp:
                    await resp.read(1 << 16)
                ok = resp.status == 200
        except (ClientError, TimeoutError):
            ok = False
        if ok != replica.healthy:
            log.warning(
                "replica %s is %s", replica.backend.base_url, "back" if ok else "failing its health check"
            )
        replica.healthy = ok
        return ok
