"""Retries waiting in ``delayed`` read from real Redis: per priority, first deferrals left out,
bounded per shard."""

from __future__ import annotations

import msgspec
import pytest
from redis.asyncio import Redis

from streams.core import codec
from streams.core.keys import KeySpace
from streams.core.vocabulary import Priority
from streams.delivery.delayed import delayed_member
from streams.metrics import retries as retries_module
from streams.metrics.retries import PriorityRetries, read_retries
from tests.unit.delivery_examples import ITEM

NOW_MS = 1_800_000_000_000


async def put(
    redis: Redis, keys: KeySpace, shard: int, priority: Priority, attempts: int, created_ms: int
) -> None:
    item = msgspec.structs.replace(
        ITEM,
        delivery_id=f"d-{shard}-{priority}-{attempts}-{created_ms}",
        priority=priority,
        attempts=attempts,
        created_ms=created_ms,
        data={"a": "long template data, with, commas and ] brackets"},
    )
    member = delayed_member(priority, codec.encode_work_item(item))
    await redis.zadd(keys.shard(shard).delayed, {member: NOW_MS + 5_000})


async def test_retries_are_counted_per_priority_over_all_shards(
    real_redis: Redis, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix, shards=2)
    await put(real_redis, keys, 0, Priority.HIGH, 2, NOW_MS - 30_000)
    await put(real_redis, keys, 1, Priority.HIGH, 1, NOW_MS - 90_000)
    await put(real_redis, keys, 1, Priority.NORMAL, 1, NOW_MS - 1_000)
    # A first deferral (quiet hours, a rate limit) is no retry; nor is a member nobody reads.
    await put(real_redis, keys, 0, Priority.LOW, 0, NOW_MS - 500_000)
    await real_redis.zadd(keys.shard(0).delayed, {b"high not-a-work-item": NOW_MS})
    await real_redis.zadd(keys.shard(0).delayed, {b"urgent [1]": NOW_MS})

    found = await read_retries(real_redis, keys, NOW_MS)

    assert found.by_priority == {
        Priority.HIGH: PriorityRetries(2, 90_000),
        Priority.NORMAL: PriorityRetries(1, 1_000),
        Priority.LOW: PriorityRetries(0, 0),
    }
    assert (found.count, found.oldest_age_ms, found.capped) == (3, 90_000, False)


async def test_nothing_delayed_is_no_retry(real_redis: Redis, key_prefix: str) -> None:
    found = await read_retries(real_redis, KeySpace(key_prefix), NOW_MS)
    assert (found.count, found.oldest_age_ms, found.capped) == (0, 0, False)
    assert set(found.by_priority) == set(Priority)


async def test_each_shard_is_read_up_to_its_limit_earliest_due_first(
    real_redis: Redis, key_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(retries_module, "RETRY_SCAN_LIMIT", 3)
    keys = KeySpace(key_prefix)
    for n in range(5):
        await put(real_redis, keys, 0, Priority.NORMAL, 1, NOW_MS - n)
    found = await read_retries(real_redis, keys, NOW_MS)
    assert (found.count, found.capped) == (3, True)
