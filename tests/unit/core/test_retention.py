"""The trimmer loop: it outlives Redis outages, and ends when cancelled."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import fakeredis
import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from streams.core import retention
from streams.core.retention import StreamRetention, Trimmed


async def test_a_cancelled_trimmer_ends_though_the_client_made_the_cancellation_an_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def trim_interrupted(redis: object, policies: Sequence[StreamRetention]) -> list[Trimmed]:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            raise RedisConnectionError("connection closed while reading") from None
        return []

    monkeypatch.setattr(retention, "trim_all", trim_interrupted)
    redis = fakeredis.FakeAsyncRedis()
    task = asyncio.create_task(retention.keep_trimmed(redis, [], interval_s=0.01))
    await asyncio.sleep(0.05)  # in the middle of a trim

    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=5)

    assert done, "the trimmer kept looping after it was cancelled"
    await redis.aclose()


async def test_a_redis_outage_does_not_end_the_trimmer(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = 0

    async def failing(redis: object, policies: Sequence[StreamRetention]) -> list[Trimmed]:
        nonlocal calls
        calls += 1
        raise RedisConnectionError("Redis is restarting")

    monkeypatch.setattr(retention, "trim_all", failing)
    redis = fakeredis.FakeAsyncRedis()
    task = asyncio.create_task(retention.keep_trimmed(redis, [], interval_s=0.01))
    await asyncio.sleep(0.1)
    assert not task.done()
    assert calls > 1  # it tried again after each failure
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    await redis.aclose()
