"""Bringing escalation steps forward: once a notification was read, the steps waiting on
that (``unless = "read"``) come due at once, and the worker that takes them up ends them
SKIPPED (``app.delivery.steps``) instead of letting them wait out their time.

A step waits in ``delayed`` as a member naming its delivery id first, scored by its due time,
which the notification's record keeps (``DeliveryAtAcceptance.due_ms``). Each member found
is given the score ``now`` with ``ZADD XX LT``: only a member still there is moved, and only
sooner, so a member the scheduler took meanwhile is not put back, and nothing is ever sent
twice by it. A step not found (taken up already, or parked in PostgreSQL because it is due
hours ahead) is decided when it comes due as usual.
"""

from __future__ import annotations

from collections.abc import Sequence

from redis.asyncio import Redis

from streams.core.keys import ShardKeys
from streams.delivery.delayed import work_item_of_member


async def bring_forward(
    redis: Redis, shard: ShardKeys, steps: Sequence[tuple[str, int]], now_ms: int
) -> int:
    """Make the ``delayed`` members of ``steps`` (delivery id, due ms) on ``shard`` due at
    ``now_ms``; how many were moved."""
    due_times = sorted({due for _, due in steps if due > now_ms})
    if not due_times:
        return 0
    async with redis.pipeline(transaction=False) as pipe:
        for due in due_times:
            pipe.zrangebyscore(shard.delayed, due, due)
        found: list[list[bytes]] = await pipe.execute()
    wanted = {delivery_id.encode() for delivery_id, _ in steps}
    members = [member for at_due in found for member in at_due if _delivery_id(member) in wanted]
    if not members:
        return 0
    moved = await redis.zadd(
        shard.delayed, dict.fromkeys(members, now_ms), xx=True, lt=True, ch=True
    )
    return int(moved or 0)


def _delivery_id(member: bytes) -> bytes:
    """The delivery id a ``delayed`` member names first (its work item is a JSON array)."""
    return work_item_of_member(member)[2:].partition(b'"')[0]
