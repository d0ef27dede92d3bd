"""The ``delayed`` set: work items waiting for a retry, a rate-limit slot or quiet hours.

A member is ``"<high|normal|low> <encoded work item>"`` scored by its due time in ms; the
prefix names the work stream it returns to. ``move_due`` moves what is due atomically.
"""

from __future__ import annotations

from dataclasses import dataclass

from redis.asyncio import Redis

from streams import scripts
from streams.keys import ShardKeys


def delayed_member(priority: str, work_item: bytes) -> bytes:
    """The ``delayed`` member of a work item that returns to ``priority``'s stream."""
    return priority.lower().encode() + b" " + work_item


def work_item_of_member(member: bytes) -> bytes:
    """The encoded work item inside a ``delayed`` member."""
    return member.partition(b" ")[2]


@dataclass(frozen=True, slots=True)
class Moved:
    count: int
    # When the next member is due (ms since the epoch), or None when nothing waits.
    next_due_ms: int | None


async def move_due(redis: Redis, shard: ShardKeys, now_ms: int, limit: int = 1000) -> Moved:
    """Move up to ``limit`` members due at ``now_ms`` back to their work streams."""
    count, next_due = await scripts.SCHEDULE_DUE(
        redis,
        [
            shard.delayed,
            *shard.work_streams,
            shard.dlq,
        ],
        [now_ms, limit],
    )
    due = int(float(next_due))
    return Moved(int(count), None if due < 0 else due)
