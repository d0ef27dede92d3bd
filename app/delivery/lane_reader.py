"""Reading a priority lane: one reader task per shard and priority of a delivery worker.

A reader takes every free place in its lane (``lanes``), reads that many entries of
``work:<priority>`` with the consumer group ``delivery`` and gives back the places it did
not fill. It starts from this consumer's own pending entries and switches to new ones once
they are drained; each batch read goes to the worker's handler in one call, and so do the
entries recovery took over, a lane's room at a time. The consumer groups are made here, at
start and again when Redis lost them, waiting out a Redis that is briefly away.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import structlog
from redis.asyncio import Redis
from redis.exceptions import RedisError

from app.delivery.lanes import Lanes
from streams.core.codec import as_text
from streams.core.consumer_groups import DELIVERY_GROUP, Entry, ensure_group, is_missing_group
from streams.core.keys import ShardKeys
from streams.core.vocabulary import Priority

log = structlog.get_logger(__name__)

READ_BLOCK_MS = 1000

# Takes a batch read: the entries' shard, their lane and the entries, each in a lane place.
HandleEntries = Callable[[ShardKeys, Priority, Sequence[Entry]], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class LaneReader:
    """The reader loops of one consumer, sharing its lanes and its stop flag; ``handle``
    takes each batch read."""

    redis: Redis
    consumer: str
    lanes: Lanes
    stopping: asyncio.Event
    handle: HandleEntries

    async def ensure_groups(self, shards: Sequence[ShardKeys]) -> None:
        """Create the consumer groups, waiting out a Redis that is briefly away: a worker
        (re)started while Redis restarts must wait for it, not exit."""
        delay = 0.1
        while not self.stopping.is_set():
            try:
                for shard in shards:
                    for stream in shard.work_streams:
                        await ensure_group(self.redis, stream, DELIVERY_GROUP)
                return
            except (RedisError, OSError) as error:
                log.warning("worker.redis_unavailable", error=type(error).__name__, retry_in=delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)

    async def read_lane(self, shard: ShardKeys, priority: Priority) -> None:
        """Read the shard's lane of ``priority`` until the worker stops."""
        stream = shard.work(priority)
        cursor = "0"  # first this consumer's own pending entries, then new ones
        # Every loop also checks the flag: a client library that turns a cancellation into
        # an error of its own must not keep a stopping worker alive.
        while not self.stopping.is_set():
            try:
                entries = await self._read(stream, cursor, priority)
                if cursor != ">":
                    if not entries:
                        cursor = ">"
                        continue
                    # Go on after what was just read: these entries stay pending while they
                    # are sent, and reading them again would send them again.
                    cursor = entries[-1][0]
                await self.handle(shard, priority, entries)
            except asyncio.CancelledError:
                raise
            except Exception as error:
                # Whatever was read stays pending and is read again first (a refused write,
                # an out-of-memory Redis say, leased nothing: it costs the entries nothing).
                # A group or stream that vanished (Redis restarted empty) is made again.
                cursor = "0"
                if is_missing_group(error):
                    log.warning("worker.group_missing", stream=stream)
                    await self.ensure_groups([shard])
                    continue
                log.exception("worker.read_failed", stream=stream)
                await asyncio.sleep(1)

    async def handle_taken_over(
        self, shard: ShardKeys, priority: Priority, entries: Sequence[Entry]
    ) -> None:
        """Entries recovery took over, handled a lane's room at a time (see ``lanes``)."""
        done = 0
        while done < len(entries):
            places = await self.lanes.take(priority, len(entries) - done)
            await self.handle(shard, priority, entries[done : done + places])
            done += places

    async def _read(self, stream: str, cursor: str, priority: Priority) -> list[Entry]:
        """Entries after ``cursor``, each in a lane place taken for it (the rest go back)."""
        places = await self.lanes.take(priority)
        entries: list[Entry] = []
        try:
            reply: Any = await self.redis.xreadgroup(
                DELIVERY_GROUP,
                self.consumer,
                {stream: cursor},
                count=places,
                block=None if cursor != ">" else READ_BLOCK_MS,
            )
            read = reply[0][1] if reply else []
            entries = [(as_text(entry_id), fields) for entry_id, fields in read]
            return entries
        finally:
            self.lanes.give_back(priority, places - len(entries))
