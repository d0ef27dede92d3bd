"""The delivery workers' heartbeats in real Redis: fresh ones read, stale ones forgotten."""

from __future__ import annotations

from redis.asyncio import Redis

from streams.core.keys import KeySpace
from streams.metrics.heartbeats import (
    FORGET_MS,
    FRESH_MS,
    Heartbeat,
    forget_heartbeat,
    read_workers,
    write_heartbeat,
)

NOW_MS = 1_800_000_000_000


def beat(at_ms: int, cpu: float, **waits: int) -> Heartbeat:
    return Heartbeat(at_ms=at_ms, window_ms=5000, cpu_share=cpu, waits=waits)


async def test_fresh_reports_are_read_and_summed(real_redis: Redis, key_prefix: str) -> None:
    keys = KeySpace(key_prefix)
    await write_heartbeat(real_redis, keys, "a-0", beat(NOW_MS - 1000, 0.9, rate_limited=3))
    await write_heartbeat(real_redis, keys, "b-0", beat(NOW_MS, 0.7, rate_limited=1))
    # Older than fresh but not forgotten: kept, not read.
    await write_heartbeat(real_redis, keys, "c-0", beat(NOW_MS - FRESH_MS - 1, 0.1))

    workers = await read_workers(real_redis, keys, NOW_MS)

    assert sorted(workers.reports) == ["a-0", "b-0"]
    assert workers.reporting == 2
    assert round(workers.cpu_share, 3) == 0.8
    assert (workers.waits("rate_limited"), workers.waits("circuit_open")) == (4, 0)
    assert await real_redis.hexists(keys.worker_heartbeats, "c-0")


async def test_a_writer_forgets_stale_and_unreadable_reports(
    real_redis: Redis, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix)
    await write_heartbeat(real_redis, keys, "gone-0", beat(NOW_MS - FORGET_MS - 1, 0.5))
    await real_redis.hset(keys.worker_heartbeats, "garbled", b"{not json")
    await write_heartbeat(real_redis, keys, "live-0", beat(NOW_MS, 0.5))
    assert await real_redis.hkeys(keys.worker_heartbeats) == [b"live-0"]
    await forget_heartbeat(real_redis, keys, "live-0")
    assert (await read_workers(real_redis, keys, NOW_MS)).reporting == 0


async def test_no_report_is_no_worker(real_redis: Redis, key_prefix: str) -> None:
    workers = await read_workers(real_redis, KeySpace(key_prefix), NOW_MS)
    assert (workers.reporting, workers.cpu_share, workers.waits("rate_limited")) == (0, 0.0, 0)
