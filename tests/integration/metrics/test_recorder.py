"""The metrics recorder against real Redis: counts survive a Redis that is away."""

from __future__ import annotations

import asyncio

import pytest
from redis.asyncio import Redis
from redis.exceptions import RedisError

from app.metrics import OPT_OUTS
from streams.core.keys import KeySpace
from streams.metrics.recorder import MetricsRecorder, read_counters
from tests.integration.delivery_support import wait_until


async def test_the_recorder_keeps_its_counts_while_redis_is_away(
    real_redis: Redis, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix)
    unreachable = Redis.from_url("redis://127.0.0.1:1/0")  # nothing listens on port 1
    recorder = MetricsRecorder(unreachable, keys, interval_s=0.05)
    recorder.inc(OPT_OUTS, ("marketing",), 2)
    with pytest.raises((RedisError, OSError)):
        await recorder.flush()
    flusher = asyncio.create_task(recorder.run())
    try:
        await asyncio.sleep(0.2)  # several failed flushes: the loop keeps going
        assert not flusher.done()
        recorder.inc(OPT_OUTS, ("marketing",), 1)
        recorder.redis = real_redis  # Redis is back

        async def flushed() -> bool:
            counters = await read_counters(real_redis, keys, [OPT_OUTS])
            return counters[OPT_OUTS.name] == {("marketing",): 3.0}

        await wait_until(flushed, within=5)
    finally:
        flusher.cancel()
        await asyncio.gather(flusher, return_exceptions=True)
        await unreachable.aclose()
