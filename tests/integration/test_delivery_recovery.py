"""Recovery with a real worker and real Redis: entries nobody can read, and entries handed out
too often, go to the dead-letter queue while the rest flows."""

from __future__ import annotations

from redis.asyncio import Redis

from streams.consumer_groups import DELIVERY_GROUP, ensure_group
from streams.keys import KeySpace
from streams.vocabulary import Priority
from tests.integration.delivery_support import (
    accept,
    dead_letters,
    fast_catalog,
    final_state,
    otp,
    running_worker,
    sandbox_calls,
    state,
    wait_until,
)


async def test_a_poison_entry_goes_to_the_dlq_while_the_rest_flows(
    real_redis: Redis, key_prefix: str
) -> None:
    keys, catalog = KeySpace(key_prefix), fast_catalog()
    stream = keys.shard(0).work(Priority.HIGH)
    await ensure_group(real_redis, stream, DELIVERY_GROUP)
    await real_redis.xadd(stream, {"w": b"\x00not a work item"})
    await real_redis.xadd(stream, {"unexpected": b"field"})
    delivery_id = (await accept(real_redis, keys, catalog, otp(), "k"))["deliveries"][0]["id"]
    async with running_worker(real_redis, keys, catalog):
        assert (await final_state(real_redis, keys, delivery_id))["status"] == "SENT"
        await wait_until(lambda: _dlq_size(real_redis, keys, 2))
    letters = await dead_letters(real_redis, keys)
    assert {letter["error_class"] for letter in letters} == {"POISON"}
    assert any(letter.get("raw_w", "").endswith("not a work item") for letter in letters)
    assert (await real_redis.xpending(stream, DELIVERY_GROUP))["pending"] == 0


async def _dlq_size(redis: Redis, keys: KeySpace, size: int) -> bool:
    return int(await redis.xlen(keys.shard(0).dlq)) >= size


async def test_an_entry_delivered_too_often_is_dead_lettered(
    real_redis: Redis, key_prefix: str
) -> None:
    keys, catalog = KeySpace(key_prefix), fast_catalog()
    delivery_id = (await accept(real_redis, keys, catalog, otp(), "k"))["deliveries"][0]["id"]
    stream = keys.shard(0).work(Priority.HIGH)
    await ensure_group(real_redis, stream, DELIVERY_GROUP)
    # Six consumers read it and vanish, as crashing workers would.
    for n in range(6):
        await real_redis.xreadgroup(
            DELIVERY_GROUP, f"ghost-{n}", {stream: ">" if n == 0 else "0"}, count=1
        )
        await real_redis.xclaim(stream, DELIVERY_GROUP, f"ghost-{n + 1}", 0, [
            (await real_redis.xpending_range(stream, DELIVERY_GROUP, "-", "+", 1))[0]["message_id"]
        ])  # fmt: skip
    async with running_worker(real_redis, keys, catalog):
        await wait_until(lambda: _dlq_size(real_redis, keys, 1), within=10)
    [letter] = await dead_letters(real_redis, keys)
    assert letter["error_class"] == "POISON"
    assert "delivered" in letter["last_error"]
    assert letter["delivery_id"] == delivery_id
    assert (await real_redis.xpending(stream, DELIVERY_GROUP))["pending"] == 0
    assert await sandbox_calls(real_redis, keys) == []
    # The delivery ended: left QUEUED, it would be "in progress" for ever.
    ended = await state(real_redis, keys, delivery_id)
    assert (ended["status"], ended["error_class"]) == ("FAILED", "POISON")
