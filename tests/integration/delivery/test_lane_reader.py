"""Reading the lanes against real Redis: a restarted consumer drains its own pending entries
(each sent once), a Redis that is away at start, and groups Redis lost made again."""

from __future__ import annotations

import asyncio
import time

from redis.asyncio import Redis

from streams.core.consumer_groups import DELIVERY_GROUP, ensure_group
from streams.core.keys import KeySpace
from streams.core.vocabulary import Priority
from tests.integration.delivery_support import (
    accept,
    fast_catalog,
    final_state,
    otp,
    running_worker,
    sandbox_calls,
)
from tests.servers import free_port


async def test_a_restarted_consumer_drains_its_own_pending_entries(
    real_redis: Redis, key_prefix: str
) -> None:
    keys, catalog = KeySpace(key_prefix), fast_catalog()
    stream = keys.shard(0).work(Priority.HIGH)
    await ensure_group(real_redis, stream, DELIVERY_GROUP)
    ids = [
        (await accept(real_redis, keys, catalog, otp(str(n)), f"k{n}"))["deliveries"][0]["id"]
        for n in range(5)
    ]
    # "test-0" read them and died before doing anything.
    await real_redis.xreadgroup(DELIVERY_GROUP, "test-0", {stream: ">"}, count=10)
    started = time.monotonic()
    async with running_worker(real_redis, keys, catalog, consumer="test-0"):
        for delivery_id in ids:
            assert (await final_state(real_redis, keys, delivery_id))["status"] == "SENT"
    # Drained at start, not after the lease ran out and the reclaimer found them.
    assert time.monotonic() - started < 1.0


async def test_a_restarted_consumer_sends_each_of_its_pending_entries_once(
    real_redis: Redis, key_prefix: str
) -> None:
    keys, catalog = KeySpace(key_prefix), fast_catalog(idempotent=False)
    stream = keys.shard(0).work(Priority.HIGH)
    await ensure_group(real_redis, stream, DELIVERY_GROUP)
    ids = [
        (await accept(real_redis, keys, catalog, otp(str(n), {"latency_ms": 300}), f"k{n}"))[
            "deliveries"
        ][0]["id"]
        for n in range(5)
    ]
    await real_redis.xreadgroup(DELIVERY_GROUP, "test-0", {stream: ">"}, count=10)
    async with running_worker(real_redis, keys, catalog, consumer="test-0"):
        for delivery_id in ids:
            assert (await final_state(real_redis, keys, delivery_id))["status"] == "SENT"
    # The entries stay pending while their sends are in flight: reading the pending list
    # again from its start would send them again.
    calls = await sandbox_calls(real_redis, keys)
    assert sorted(c["delivery_id"] for c in calls) == sorted(ids)


async def test_a_worker_started_while_redis_is_away_waits_for_it(key_prefix: str) -> None:
    # Nothing listens on this port: the worker must keep trying, not exit, and still stop.
    unreachable = Redis.from_url(f"redis://127.0.0.1:{free_port()}/0")
    keys, catalog = KeySpace(key_prefix), fast_catalog()
    try:
        async with running_worker(unreachable, keys, catalog):
            await asyncio.sleep(0.5)
        # Leaving the block stops the worker and awaits run(): a worker that had given up
        # would raise its connection error here.
    finally:
        await unreachable.aclose()


async def test_a_worker_makes_its_groups_again_when_redis_lost_them(
    real_redis: Redis, key_prefix: str
) -> None:
    """After Redis restarted empty, workers logged NOGROUP for ever and a new OTP accepted
    with 202 was never delivered."""
    keys, catalog = KeySpace(key_prefix), fast_catalog()
    first = (await accept(real_redis, keys, catalog, otp(), "k1"))["deliveries"][0]["id"]
    async with running_worker(real_redis, keys, catalog):
        assert (await final_state(real_redis, keys, first))["status"] == "SENT"
        for key in [k async for k in real_redis.scan_iter(match=f"{key_prefix}:*")]:
            await real_redis.delete(key)  # an empty Redis, as after a restart without AOF
        second = (await accept(real_redis, keys, catalog, otp(), "k2"))["deliveries"][0]["id"]
        assert (await final_state(real_redis, keys, second))["status"] == "SENT"
