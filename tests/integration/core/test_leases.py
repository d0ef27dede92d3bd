"""A lease: one holder at a time, renewed by its holder, free again when handed back or run
out (on real Redis and on fakeredis)."""

from __future__ import annotations

import asyncio

from redis.asyncio import Redis

from streams.core.leases import Lease


async def test_one_holder_at_a_time(redis: Redis, key_prefix: str) -> None:
    key = f"{key_prefix}:{{hooks}}:lease"
    first, second = Lease(redis, key, "a", 60_000), Lease(redis, key, "b", 60_000)
    assert await first.take()
    assert not await second.take()
    assert await first.take()  # renewed by its holder
    assert not await second.release()  # only the holder hands it back
    assert await first.release()
    assert await second.take()


async def test_a_lease_its_holder_stopped_renewing_runs_out(redis: Redis, key_prefix: str) -> None:
    key = f"{key_prefix}:{{hooks}}:lease"
    assert await Lease(redis, key, "dead", 100).take()
    waiting = Lease(redis, key, "standby", 100)
    assert not await waiting.take()
    await asyncio.sleep(0.2)
    assert await waiting.take()
