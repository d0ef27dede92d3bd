"""Far-future work items out of Redis: the ``delayed`` members due beyond a horizon are
parked in PostgreSQL (``projections.parking``) and put back ahead of their time.

Here, the Redis half: the members due beyond a time (``far_members``), taking parked ones out
of ``delayed`` once PostgreSQL has them (``forget``), and putting them back
(``promote``, ``promote.lua``), which drops an item whose delivery moved on meanwhile.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec
from redis.asyncio import Redis

from streams.core import scripts
from streams.core.keys import ShardKeys
from streams.core.scripts import Call, KeyOrArg
from streams.delivery.delayed import work_item_of_member


class Parked(msgspec.Struct, frozen=True):
    """A ``delayed`` member and when it is due."""

    delivery_id: str
    due_ms: int
    member: bytes


def delivery_of(member: bytes) -> str:
    """The delivery id a ``delayed`` member's work item names first."""
    item = work_item_of_member(member)
    return item[2 : item.index(b'"', 2)].decode()


async def far_members(redis: Redis, shard: ShardKeys, after_ms: int, limit: int) -> list[Parked]:
    """Up to ``limit`` of the shard's ``delayed`` members due after ``after_ms``."""
    found: list[tuple[bytes, float]] = await redis.zrangebyscore(  # type: ignore[assignment]
        shard.delayed, f"({after_ms}", "+inf", start=0, num=limit, withscores=True
    )
    return [Parked(delivery_of(member), int(score), member) for member, score in found]


async def forget(redis: Redis, shard: ShardKeys, parked: Sequence[Parked]) -> None:
    """Take members PostgreSQL keeps now out of ``delayed``."""
    if parked:
        await redis.zrem(shard.delayed, *[p.member for p in parked])


async def promote(redis: Redis, shard: ShardKeys, parked: Sequence[Parked]) -> int:
    """Put parked members back into ``delayed``; how many went back."""
    if not parked:
        return 0
    return int(await scripts.PROMOTE(redis, *promote_call(shard, parked)))


def promote_call(shard: ShardKeys, parked: Sequence[Parked]) -> Call:
    """The keys and arguments of one ``promote.lua`` call.

    KEYS: delayed, then per item its delivery's state hash. ARGV: per item its due time and
    member.
    """
    keys: list[KeyOrArg] = [shard.delayed]
    args: list[KeyOrArg] = []
    for item in parked:
        keys.append(shard.delivery(item.delivery_id))
        args += [item.due_ms, item.member]
    return keys, args
