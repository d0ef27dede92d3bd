"""The ``delayed`` set: work items waiting for a retry, a rate-limit slot or quiet hours.

A member is ``"<high|normal|low> <encoded work item>"`` (``Priority.stream_name``) scored by
its due time in ms; the prefix names the work stream it returns to. ``move_due`` moves what
is due, by the Redis clock, atomically (``schedule_due.lua``).
"""

from __future__ import annotations

from dataclasses import dataclass

from redis.asyncio import Redis

from streams.core import scripts
from streams.core.keys import ShardKeys
from streams.core.scripts import Call
from streams.core.vocabulary import Priority

MOVE_LIMIT = 1000  # members one call moves at most


def delayed_member(priority: Priority, work_item: bytes) -> bytes:
    """The ``delayed`` member of a work item that returns to ``priority``'s stream."""
    return priority.stream_name.encode() + b" " + work_item


def work_item_of_member(member: bytes) -> bytes:
    """The encoded work item inside a ``delayed`` member."""
    return member.partition(b" ")[2]


@dataclass(frozen=True, slots=True)
class Moved:
    count: int
    # How long until the next member is due (ms, 0 if it is due already), or None when
    # nothing waits.
    next_due_in_ms: int | None


async def move_due(redis: Redis, shard: ShardKeys, limit: int = MOVE_LIMIT) -> Moved:
    """Move up to ``limit`` members that are due back to their work streams."""
    count, next_due_in = await scripts.SCHEDULE_DUE(redis, *schedule_due_call(shard, limit))
    wait = int(next_due_in)
    return Moved(int(count), None if wait < 0 else wait)


def schedule_due_call(shard: ShardKeys, limit: int) -> Call:
    """The keys and arguments of one ``schedule_due.lua`` call.

    KEYS: delayed, the three work streams, dlq (for a member it cannot read). ARGV: the most
    members to move.
    """
    return [shard.delayed, *shard.work_streams, shard.dlq], [limit]
