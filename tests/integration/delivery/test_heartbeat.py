"""A worker's heartbeat: its CPU share over each window and the provider waits it counted,
written to real Redis while it runs and taken back when it stops."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from app.delivery import heartbeat
from app.delivery.heartbeat import HeartbeatWriter
from streams.core import clock
from streams.core.keys import KeySpace
from streams.metrics.heartbeats import read_workers
from tests.integration.delivery_support import (
    accept,
    fast_catalog,
    final_state,
    otp,
    running_worker,
)


class Clocks:
    def __init__(self) -> None:
        self.cpu_s = 10.0
        self.wall_ms = 1_800_000_000_000


async def test_each_beat_reports_its_window_and_starts_the_next(
    real_redis: Redis, key_prefix: str
) -> None:
    clocks = Clocks()
    writer = HeartbeatWriter(
        real_redis,
        KeySpace(key_prefix),
        "host-0",
        cpu_seconds=lambda: clocks.cpu_s,
        now_ms=lambda: clocks.wall_ms,
    )
    clocks.cpu_s += 4.5  # 4.5 s of CPU in 5 s: 90 % of one core
    clocks.wall_ms += 5000
    writer.deferred("rate_limited")
    writer.deferred("rate_limited")
    writer.deferred("quiet_hours")
    first = writer.beat()
    assert (first.window_ms, first.cpu_share) == (5000, 0.9)
    assert first.waits == {"rate_limited": 2, "quiet_hours": 1}
    clocks.wall_ms += 2000
    second = writer.beat()
    assert (second.window_ms, second.cpu_share, second.waits) == (2000, 0.0, {})


async def test_a_running_writer_reports_and_takes_its_report_back_when_stopped(
    real_redis: Redis, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix)
    writer = HeartbeatWriter(real_redis, keys, "host-1", interval_s=0.05)
    running = asyncio.create_task(writer.run())
    for _ in range(100):
        await asyncio.sleep(0.02)
        workers = await read_workers(real_redis, keys, clock.now_ms())
        if workers.reporting:
            break
    assert list(workers.reports) == ["host-1"]
    running.cancel()
    await asyncio.gather(running, return_exceptions=True)
    assert not await real_redis.exists(keys.worker_heartbeats)


async def test_a_workers_heartbeat_counts_the_deliveries_a_rate_limit_held_back(
    real_redis: Redis, key_prefix: str
) -> None:
    limit = "rate_limit = { per_second = 5, burst = 1 }"
    keys, catalog = KeySpace(key_prefix), fast_catalog(rate_limit=limit)
    ids = [
        (await accept(real_redis, keys, catalog, otp(str(n)), f"k{n}"))["deliveries"][0]["id"]
        for n in range(4)
    ]
    async with running_worker(real_redis, keys, catalog) as worker:
        for delivery_id in ids:
            await final_state(real_redis, keys, delivery_id)
        beat = worker.heartbeat.beat()
    assert beat.waits.get("rate_limited", 0) >= 1
    assert set(beat.waits) <= {"rate_limited"}


async def test_a_cancellation_that_reaches_it_as_a_redis_error_still_stops_it(
    real_redis: Redis, key_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    writing = asyncio.Event()

    async def write_swallowing_the_cancellation(*_: object) -> None:
        writing.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            raise RedisConnectionError("Connection closed by server.") from None

    monkeypatch.setattr(heartbeat, "write_heartbeat", write_swallowing_the_cancellation)
    writer = HeartbeatWriter(real_redis, KeySpace(key_prefix), "host-1", interval_s=0.01)
    task = asyncio.create_task(writer.run())
    await asyncio.wait_for(writing.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 5)


async def test_a_cancellation_the_client_swallows_still_stops_it(
    real_redis: Redis, key_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    writing = asyncio.Event()

    async def write_ignoring_the_cancellation(*_: object) -> None:
        if writing.is_set():
            return  # only the first write swallows it: a later cancel ends even a bad writer
        writing.set()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(30)  # the report goes through all the same

    monkeypatch.setattr(heartbeat, "write_heartbeat", write_ignoring_the_cancellation)
    writer = HeartbeatWriter(real_redis, KeySpace(key_prefix), "host-1", interval_s=0.01)
    task = asyncio.create_task(writer.run())
    await asyncio.wait_for(writing.wait(), 5)
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=5)  # wait_for would wait on for ever
    assert task in done, "the writer went on reporting after it was cancelled"
    assert task.cancelled()
