"""Moving due ``delayed`` members back to their work streams, in every worker process.

One loop per shard calls the scheduler script (``streams.delivery.delayed.move_due``), then sleeps
until the next member is due, at most ``IDLE_S``: members other processes add are seen that
late at the latest. A worker that schedules a retry itself wakes the loop at once.

It sleeps at least ``TICK_S``: when members come due every millisecond (10,000 notifications
sent later a second), a loop that woke for each would call the script a thousand times a
second, each call moving a handful, and spend more CPU on its wake-ups (in the worker and in
Redis) than on moving; ticking, each call moves what came due during the tick, which costs a
member ``TICK_S`` of lateness at most (``bench/schedule.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence

import structlog
from redis.asyncio import Redis

from streams.core.keys import ShardKeys
from streams.delivery.delayed import MOVE_LIMIT, move_due

log = structlog.get_logger(__name__)

IDLE_S = 1.0  # longest sleep
TICK_S = 0.01  # shortest sleep


class Scheduler:
    """The scheduler loops of one worker process."""

    def __init__(self, redis: Redis, shards: Sequence[ShardKeys]) -> None:
        self.redis = redis
        self._wake = {shard: asyncio.Event() for shard in shards}

    def wake(self, shard: ShardKeys) -> None:
        """Look at ``shard``'s ``delayed`` set now: something was just added to it."""
        self._wake[shard].set()

    async def run(self, shard: ShardKeys, stopping: asyncio.Event) -> None:
        """Move ``shard``'s due members until ``stopping`` is set (or cancelled)."""
        wake = self._wake[shard]
        while not stopping.is_set():
            try:
                moved = await move_due(self.redis, shard)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("scheduler.failed", shard=shard.shard)
                await asyncio.sleep(1)
                continue
            if moved.count >= MOVE_LIMIT:
                continue  # more is due right now
            sleep = IDLE_S
            if moved.next_due_in_ms is not None:
                sleep = min(sleep, max(TICK_S, moved.next_due_in_ms / 1000))
            wake.clear()
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a
            # cancellation that coincides with the wake-up, and the worker would never stop.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(sleep):
                    await wake.wait()
