"""Fair shares between producers within a priority (NORMAL and LOW; HIGH is never queued).

One producer's flood must not delay every other producer's notifications of the same
priority. So a work stream holds at most ``buffer`` items waiting or in flight: while it has
room, ingest appends a work item to it directly, as it always did; once it is full, or while
the producer already has items queued, the item waits in that producer's queue
(``ShardKeys.queued``, a list) instead. Feeders in the worker processes move queued items
into the stream as it drains, by deficit round robin (``fair_feed.lua``): every
producer with items queued gets its ``weight`` share of the room, so a producer with a
small backlog is through after its share of the stream's throughput, however much another
producer has queued before it.

The work streams, their consumer group and its crash recovery stay as they were: an item in
a queue is in no consumer group yet, and moving it is one atomic step. Retries, quiet hours
and replays go from ``delayed`` straight to the stream (those were let in before).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Final

import msgspec
from redis.asyncio import Redis

from streams.core import scripts
from streams.core.keys import ShardKeys
from streams.core.scripts import Call, KeyOrArg
from streams.core.vocabulary import Priority

# The priorities whose producers share fairly; HIGH goes straight to its stream, always.
FAIR_PRIORITIES: Final = (Priority.NORMAL, Priority.LOW)


class Fairness(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``[fairness]`` in the catalog."""

    # Items a NORMAL or LOW work stream may hold (waiting or in flight) before producers'
    # items queue: enough to keep every worker's lane busy, few enough that a producer's
    # first item is not far behind.
    buffer: Annotated[int, msgspec.Meta(ge=10, le=1_000_000)] = 2000
    # Items a producer of weight 1 moves into the stream per round.
    quantum: Annotated[int, msgspec.Meta(ge=1, le=10_000)] = 10
    default_weight: Annotated[int, msgspec.Meta(ge=1, le=1000)] = 1
    weights: dict[str, Annotated[int, msgspec.Meta(ge=1, le=1000)]] = {}

    def weight(self, producer: str) -> int:
        return self.weights.get(producer, self.default_weight)


def fair_feed_call(
    shard: ShardKeys, priority: Priority, producers: Sequence[str], fairness: Fairness
) -> Call:
    """The keys and arguments of one ``fair_feed.lua`` call, for ``producers`` in the
    order they take their turns."""
    keys: list[KeyOrArg] = [
        shard.work(priority),
        shard.queued_producers(priority),
        shard.fair_deficits(priority),
    ]
    args: list[KeyOrArg] = [fairness.buffer, fairness.quantum]
    for producer in producers:
        keys.append(shard.queued(priority, producer))
        args += [producer, fairness.weight(producer)]
    return keys, args


async def waiting_producers(redis: Redis, shard: ShardKeys, priority: Priority) -> list[str]:
    """The producers with items of ``priority`` queued on ``shard``, by name."""
    names: Any = await redis.smembers(shard.queued_producers(priority))
    return sorted(name.decode() for name in names)


async def feed(
    redis: Redis, shard: ShardKeys, priority: Priority, producers: Sequence[str], fairness: Fairness
) -> int:
    """Move queued items into the stream as far as it has room; how many moved."""
    if not producers:
        return 0
    moved: int = await scripts.FAIR_FEED(
        redis, *fair_feed_call(shard, priority, producers, fairness)
    )
    return moved
