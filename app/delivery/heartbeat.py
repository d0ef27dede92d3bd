"""A worker process's heartbeat: its CPU share and the provider waits it saw, every few
seconds (``streams.metrics.heartbeats``). The advisor adds workers to its advice only when
these say the workers are the bottleneck: busy CPUs, providers with room."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import Callable

import structlog
from redis.asyncio import Redis
from redis.exceptions import RedisError

from streams.core import clock
from streams.core.keys import KeySpace
from streams.metrics.heartbeats import (
    HEARTBEAT_INTERVAL_S,
    Heartbeat,
    forget_heartbeat,
    write_heartbeat,
)

log = structlog.get_logger(__name__)


class HeartbeatWriter:
    """Counts deferrals as they happen (a dict update) and reports every interval."""

    def __init__(
        self,
        redis: Redis,
        keys: KeySpace,
        consumer: str,
        *,
        interval_s: float = HEARTBEAT_INTERVAL_S,
        cpu_seconds: Callable[[], float] = time.process_time,
        now_ms: Callable[[], int] = clock.now_ms,
    ) -> None:
        self.redis = redis
        self.keys = keys
        self.consumer = consumer
        self.interval_s = interval_s
        self._cpu_seconds = cpu_seconds
        self._now_ms = now_ms
        self._waits: Counter[str] = Counter()
        self._cpu_at = cpu_seconds()
        self._wall_at = now_ms()

    def deferred(self, reason: str) -> None:
        """Count one delivery deferred for ``reason`` (``DeferReason``)."""
        self._waits[reason] += 1

    def beat(self) -> Heartbeat:
        """The report of the window since the last one; starts the next window."""
        cpu, wall = self._cpu_seconds(), self._now_ms()
        window_ms = max(1, wall - self._wall_at)
        beat = Heartbeat(
            at_ms=wall,
            window_ms=window_ms,
            cpu_share=round(max(0.0, cpu - self._cpu_at) * 1000 / window_ms, 3),
            waits=dict(self._waits),
        )
        self._cpu_at, self._wall_at = cpu, wall
        self._waits.clear()
        return beat

    async def run(self) -> None:
        """Report every interval until cancelled; then take the report back (a stopped
        worker is no worker). A Redis that fails skips a report, never the worker."""
        try:
            while True:
                await asyncio.sleep(self.interval_s)
                try:
                    await write_heartbeat(self.redis, self.keys, self.consumer, self.beat())
                except (RedisError, OSError) as error:
                    if not _cancelling():
                        log.warning("worker.heartbeat_failed", error=type(error).__name__)
                if _cancelling():
                    # The client let the cancellation out as a connection error, or swallowed
                    # it and the report went through (both seen under callgrind, where
                    # everything is slow): the next sleep would never be cancelled.
                    raise asyncio.CancelledError
        finally:
            with contextlib.suppress(RedisError, OSError, asyncio.CancelledError):
                await asyncio.wait_for(forget_heartbeat(self.redis, self.keys, self.consumer), 2)


def _cancelling() -> bool:
    """Whether the running task was asked to stop, whether or not the request arrived as a
    CancelledError."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0
