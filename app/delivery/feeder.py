"""The feeder: lets producers' queued NORMAL and LOW work items into their work streams at
each producer's fair share, as the streams drain (``streams.delivery.fairness``).

Every worker process runs one loop per shard and fair priority. A loop whose queues are
empty looks again every ``idle_s``; one that moved items goes on at once; one whose stream
is full waits ``full_s`` for the lanes to drain some of it (a loop costs two round trips, so
polling often would cost the workers' CPU more than it gains). Loops of several processes
may feed the same stream: each move is one atomic script, so nothing is moved twice, and
each call starts the round with the next producer, so no producer is always first.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass

import structlog
from redis.asyncio import Redis
from redis.exceptions import RedisError

from streams.core.connection import being_cancelled
from streams.core.keys import ShardKeys
from streams.core.vocabulary import Priority
from streams.delivery.fairness import FAIR_PRIORITIES, Fairness, feed, waiting_producers

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class FeederTiming:
    # No producer has items queued: items queue only once a stream holds its whole
    # buffer, which takes the lanes far longer than this to drain.
    idle_s: float = 0.05
    # The stream had no room: a fraction of what its buffer lasts at thousands a second.
    full_s: float = 0.025


class Feeder:
    """Feeds one process's share of the fair work streams."""

    def __init__(
        self, redis: Redis, fairness: Fairness, timing: FeederTiming | None = None
    ) -> None:
        self.redis = redis
        self.fairness = fairness
        self.timing = timing or FeederTiming()

    async def run(self, shards: list[ShardKeys], stopping: asyncio.Event) -> None:
        """Feed every shard's fair streams until ``stopping`` is set."""
        loops = [
            self._feed(shard, priority, stopping)
            for shard in shards
            for priority in FAIR_PRIORITIES
        ]
        await asyncio.gather(*loops)

    async def _feed(self, shard: ShardKeys, priority: Priority, stopping: asyncio.Event) -> None:
        turn = 0
        while not stopping.is_set():
            try:
                producers = await waiting_producers(self.redis, shard, priority)
                if not producers:
                    await _pause(stopping, self.timing.idle_s)
                    continue
                turn = (turn + 1) % len(producers)
                order = producers[turn:] + producers[:turn]
                if not await feed(self.redis, shard, priority, order, self.fairness):
                    await _pause(stopping, self.timing.full_s)
            except RedisError as error:
                if being_cancelled():
                    return
                log.warning("feeder.failed", shard=shard.shard, priority=priority, error=str(error))
                await _pause(stopping, 1.0)


async def _pause(stopping: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stopping.wait(), seconds)
