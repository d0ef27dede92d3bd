"""Bringing steps forward on real Redis: a step's ``delayed`` member found at its due time
is made due now; a member taken meanwhile is not put back, one already due sooner is left,
and other deliveries' members are untouched."""

from __future__ import annotations

from redis.asyncio import Redis

from streams.core.keys import KeySpace
from streams.core.vocabulary import Priority
from streams.delivery.delayed import delayed_member
from streams.delivery.early_steps import bring_forward

NOW = 1_000_000


def member(delivery_id: str) -> bytes:
    return delayed_member(Priority.NORMAL, f'["{delivery_id}","n","comment","PUSH"]'.encode())


async def test_only_the_steps_still_waiting_come_due_now(
    real_redis: Redis, key_prefix: str
) -> None:
    shard = KeySpace(key_prefix).shard(0)
    await real_redis.zadd(shard.delayed, {
        member("push"): NOW + 900_000, member("email"): NOW + 3_600_000,
        member("other"): NOW + 900_000,
    })  # fmt: skip
    steps = [("push", NOW + 900_000), ("email", NOW + 3_600_000), ("taken", NOW + 900_000)]
    assert await bring_forward(real_redis, shard, steps, NOW) == 2
    scores = dict(await real_redis.zrange(shard.delayed, 0, -1, withscores=True))
    assert scores == {member("push"): NOW, member("email"): NOW, member("other"): NOW + 900_000}
    # Asked again (a second read): nothing is found at the old times, nothing moves.
    assert await bring_forward(real_redis, shard, steps, NOW + 5) == 0
    assert await real_redis.zcard(shard.delayed) == 3


async def test_a_step_due_already_or_gone_is_left_as_it_is(
    real_redis: Redis, key_prefix: str
) -> None:
    shard = KeySpace(key_prefix).shard(0)
    assert await bring_forward(real_redis, shard, [("push", NOW - 1)], NOW) == 0
    assert await bring_forward(real_redis, shard, [("push", NOW + 10)], NOW) == 0
    assert await real_redis.zcard(shard.delayed) == 0  # a member gone is not put back
