"""Deliveries waiting for an address, on real Redis and on fakeredis: the look schedule, the
recipient's index a worker keeps (``await_address.lua`` "wait") and its release by a profile
change ("release"), which must never be missed between a worker's read and its wait."""

from __future__ import annotations

import pytest
from redis.asyncio import Redis

from streams.core.keys import KeySpace, ShardKeys
from streams.core.vocabulary import Priority
from streams.delivery import address_waits
from streams.delivery.delayed import delayed_member

RECIPIENT = "user-42"


@pytest.fixture
def keys(key_prefix: str) -> KeySpace:
    return KeySpace(key_prefix, shards=2)


async def redis_now_ms(redis: Redis) -> int:
    seconds, micros = await redis.time()
    return int(seconds) * 1000 + int(micros) // 1000


async def put_waiting(
    redis: Redis, shard: ShardKeys, item: bytes, *, due_in_ms: int, version: int = 0
) -> bytes:
    """A member in ``delayed`` as a worker's finish leaves it, then indexed as it indexes it."""
    now = await redis_now_ms(redis)
    member = delayed_member(Priority.NORMAL, item)
    await redis.zadd(shard.delayed, {member: now + due_in_ms})
    changed = await address_waits.wait(
        redis, shard, recipient_id=RECIPIENT, member=member, until_ms=now + 60_000,
        settings_version=version,
    )  # fmt: skip
    assert changed is False
    return member


async def score(redis: Redis, key: str, member: bytes) -> float:
    """A member's due time; it must be there."""
    value = await redis.zscore(key, member)
    assert value is not None, member
    return float(value)


def test_looks_come_after_as_long_as_it_waited_capped_at_a_minute_and_the_bound() -> None:
    created = 1_000_000
    assert address_waits.next_look_ms(created, created + 10, created + 3_600_000) == created + 1_010
    assert (
        address_waits.next_look_ms(created, created + 1_000, created + 3_600_000) == created + 2_000
    )
    assert (
        address_waits.next_look_ms(created, created + 4_000, created + 3_600_000) == created + 8_000
    )
    late = created + 600_000
    assert address_waits.next_look_ms(created, late, created + 3_600_000) == late + 60_000
    assert address_waits.next_look_ms(created, created + 4_000, created + 5_000) == created + 5_000


async def test_a_release_makes_the_recipients_waiting_members_due_now_on_every_shard(
    redis: Redis, keys: KeySpace
) -> None:
    first, second = keys.all_shards()
    one = await put_waiting(redis, first, b'["a"]', due_in_ms=30_000)
    two = await put_waiting(redis, second, b'["b"]', due_in_ms=30_000)
    other = delayed_member(Priority.NORMAL, b'["someone else"]')
    await redis.zadd(first.delayed, {other: await redis_now_ms(redis) + 30_000})

    assert await address_waits.release(redis, keys, RECIPIENT) == 2

    now = await redis_now_ms(redis)
    for shard, member in ((first, one), (second, two)):
        due = await score(redis, shard.delayed, member)
        assert due <= now
        assert not await redis.exists(shard.awaiting(RECIPIENT))
    due = await score(redis, first.delayed, other)
    assert due > now + 20_000


async def test_a_release_never_puts_back_a_member_taken_since(redis: Redis, keys: KeySpace) -> None:
    shard = keys.shard(0)
    member = await put_waiting(redis, shard, b'["a"]', due_in_ms=30_000)
    await redis.zrem(shard.delayed, member)  # moved to its work stream meanwhile

    assert await address_waits.release(redis, keys, RECIPIENT) == 0
    assert await redis.zscore(shard.delayed, member) is None


async def test_a_profile_change_between_the_workers_read_and_its_wait_makes_it_due_now(
    redis: Redis, keys: KeySpace
) -> None:
    shard = keys.shard(0)
    await redis.hset(shard.recipient(RECIPIENT), "v", 3)  # the worker read version 2
    now = await redis_now_ms(redis)
    member = delayed_member(Priority.NORMAL, b'["a"]')
    await redis.zadd(shard.delayed, {member: now + 30_000})

    changed = await address_waits.wait(
        redis, shard, recipient_id=RECIPIENT, member=member, until_ms=now + 60_000,
        settings_version=2,
    )  # fmt: skip

    assert changed is True
    due = await score(redis, shard.delayed, member)
    assert due <= await redis_now_ms(redis)


async def test_the_same_version_leaves_it_waiting_indexed_until_its_bound(
    redis: Redis, keys: KeySpace
) -> None:
    shard = keys.shard(0)
    await redis.hset(shard.recipient(RECIPIENT), "v", 2)
    member = await put_waiting(redis, shard, b'["a"]', due_in_ms=30_000, version=2)

    index = shard.awaiting(RECIPIENT)
    now = await redis_now_ms(redis)
    assert await redis.zrange(index, 0, -1) == [member]
    assert 55_000 < await redis.pttl(index) <= 61_000  # its bound and a second
    due = await score(redis, shard.delayed, member)
    assert due > now + 20_000


async def test_the_index_is_bounded_and_drops_waits_that_are_over(
    redis: Redis, keys: KeySpace
) -> None:
    shard = keys.shard(0)
    index = shard.awaiting(RECIPIENT)
    now = await redis_now_ms(redis)
    await redis.zadd(index, {b"over": now - 1})
    for n in range(address_waits.MAX_INDEXED + 5):
        await put_waiting(redis, shard, f'["{n}"]'.encode(), due_in_ms=30_000)

    assert await redis.zcard(index) == address_waits.MAX_INDEXED
    assert await redis.zscore(index, b"over") is None
    # One already indexed is still taken (its bound renewed) when the index is full.
    first = delayed_member(Priority.NORMAL, b'["0"]')
    assert await address_waits.wait(
        redis, shard, recipient_id=RECIPIENT, member=first, until_ms=now + 90_000,
        settings_version=0,
    ) is False  # fmt: skip
    assert await redis.zscore(index, first) == now + 90_000
