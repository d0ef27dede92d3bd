"""The Redis half of parking: the members due beyond a time, and putting parked ones back,
which drops an item whose delivery moved on (ended, or with a worker)."""

from __future__ import annotations

from redis.asyncio import Redis

from streams.core.keys import KeySpace
from streams.delivery import parking
from streams.delivery.parking import Parked, delivery_of

ITEM = b'normal ["01a2-d-1","01a2-n-1","order_confirmed","EMAIL","NORMAL","u","a@b.c","en"]'


def member(delivery_id: str) -> bytes:
    return ITEM.replace(b"01a2-d-1", delivery_id.encode())


def test_a_member_names_its_delivery_first() -> None:
    assert delivery_of(member("d-9")) == "d-9"


async def test_far_members_are_those_due_after_the_time(real_redis: Redis, key_prefix: str) -> None:
    shard = KeySpace(key_prefix).shard(0)
    await real_redis.zadd(shard.delayed, {member("d-1"): 1_000, member("d-2"): 5_000})
    assert await parking.far_members(real_redis, shard, 1_000, 10) == [
        Parked("d-2", 5_000, member("d-2"))
    ]
    await parking.forget(real_redis, shard, [Parked("d-2", 5_000, member("d-2"))])
    assert await real_redis.zrange(shard.delayed, 0, -1) == [member("d-1")]


async def test_promotion_puts_back_only_what_still_waits(
    real_redis: Redis, key_prefix: str
) -> None:
    shard = KeySpace(key_prefix).shard(0)
    states = {"d-w": "SCHEDULED", "d-c": "CANCELLED", "d-s": "SENDING"}
    for delivery_id, status in states.items():
        await real_redis.hset(shard.delivery(delivery_id), "status", status)
    items = [Parked(d, 9_000, member(d)) for d in ("d-new", "d-w", "d-c", "d-s")]
    assert await parking.promote(real_redis, shard, items) == 2
    assert sorted(await real_redis.zrange(shard.delayed, 0, -1)) == sorted(
        [member("d-new"), member("d-w")]
    )
    assert await parking.promote(real_redis, shard, items) == 0  # a repeat adds nothing
