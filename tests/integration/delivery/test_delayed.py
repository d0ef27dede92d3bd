"""The ``delayed`` set on real Redis and on fakeredis: what is due by the Redis clock moves back
to its work stream, the wait until the next member, and members nobody can read."""

from __future__ import annotations

import pytest
from redis.asyncio import Redis

from streams.core.keys import KeySpace, ShardKeys
from streams.core.vocabulary import Priority
from streams.delivery.delayed import Moved, delayed_member, move_due, work_item_of_member


@pytest.fixture
def shard(key_prefix: str) -> ShardKeys:
    return KeySpace(key_prefix).shard(0)


async def redis_now_ms(redis: Redis) -> int:
    seconds, micros = await redis.time()
    return int(seconds) * 1000 + int(micros) // 1000


async def work(redis: Redis, shard: ShardKeys, priority: Priority) -> list[bytes]:
    return [fields[b"w"] for _, fields in await redis.xrange(shard.work(priority))]


def test_a_member_names_the_stream_it_returns_to_in_front_of_its_work_item() -> None:
    member = delayed_member(Priority.NORMAL, b'["item with spaces"]')
    assert member == b'normal ["item with spaces"]'
    assert work_item_of_member(member) == b'["item with spaces"]'


async def test_due_members_move_to_their_streams_and_the_rest_wait(
    redis: Redis, shard: ShardKeys
) -> None:
    now = await redis_now_ms(redis)
    await redis.zadd(
        shard.delayed,
        {
            delayed_member(Priority.HIGH, b"retry"): now - 1_000,
            delayed_member(Priority.LOW, b"quiet hours over"): now - 10,
            delayed_member(Priority.NORMAL, b"tomorrow"): now + 60_000,
        },
    )

    moved = await move_due(redis, shard)

    assert moved.count == 2
    assert moved.next_due_in_ms is not None
    assert 55_000 < moved.next_due_in_ms <= 60_000
    assert await work(redis, shard, Priority.HIGH) == [b"retry"]
    assert await work(redis, shard, Priority.LOW) == [b"quiet hours over"]
    assert await work(redis, shard, Priority.NORMAL) == []
    assert await redis.zrange(shard.delayed, 0, -1) == [
        delayed_member(Priority.NORMAL, b"tomorrow")
    ]


async def test_nothing_waiting_means_no_next_due_time(redis: Redis, shard: ShardKeys) -> None:
    assert await move_due(redis, shard) == Moved(count=0, next_due_in_ms=None)


async def test_a_call_moves_at_most_its_limit_and_says_more_is_due(
    redis: Redis, shard: ShardKeys
) -> None:
    now = await redis_now_ms(redis)
    await redis.zadd(
        shard.delayed,
        {delayed_member(Priority.HIGH, f"item-{n}".encode()): now - 100 + n for n in range(5)},
    )
    assert await move_due(redis, shard, limit=2) == Moved(count=2, next_due_in_ms=0)
    assert await work(redis, shard, Priority.HIGH) == [b"item-0", b"item-1"]  # oldest first
    assert await move_due(redis, shard) == Moved(count=3, next_due_in_ms=None)


async def test_an_unreadable_member_is_parked_in_the_dlq(redis: Redis, shard: ShardKeys) -> None:
    now = await redis_now_ms(redis)
    await redis.zadd(shard.delayed, {b"nonsense": now - 10, b"urgent item": now - 5})

    assert (await move_due(redis, shard)).count == 2

    parked = [fields for _, fields in await redis.xrange(shard.dlq)]
    assert parked == [
        {b"reason": b"unreadable delayed member", b"member": b"nonsense"},
        {b"reason": b"unreadable delayed member", b"member": b"urgent item"},
    ]
    assert await redis.zcard(shard.delayed) == 0
    for priority in Priority:
        assert await work(redis, shard, priority) == []
