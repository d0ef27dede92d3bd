"""The metrics recorder's flusher: it ends when cancelled, whatever the client makes of it."""

from __future__ import annotations

import asyncio

import fakeredis
from redis.exceptions import ConnectionError as RedisConnectionError

from streams.keys import KeySpace
from streams.metrics_recorder import MetricsRecorder


class CancellationTurnedError(MetricsRecorder):
    """A recorder whose flush, when cancelled mid-write, raises a connection error instead,
    as a Redis client may when a cancellation interrupts it."""

    async def flush(self) -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            raise RedisConnectionError("connection closed while reading") from None


async def test_a_cancelled_flusher_ends_though_the_client_made_the_cancellation_an_error() -> None:
    redis = fakeredis.FakeAsyncRedis()
    recorder = CancellationTurnedError(redis, KeySpace("t"), interval_s=0.01)
    task = asyncio.create_task(recorder.run())
    await asyncio.sleep(0.05)  # in the middle of a flush

    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=5)

    assert done, "the flusher kept looping after it was cancelled"
    await redis.aclose()


class CancellationSwallowed(MetricsRecorder):
    """A recorder whose flush, when cancelled mid-write, finishes anyway, as the Redis client
    did once in a few hundred stops of a delivery worker (its watchdog then kept it alive)."""

    async def flush(self) -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            return


async def test_a_cancelled_flusher_ends_though_the_client_swallowed_the_cancellation() -> None:
    redis = fakeredis.FakeAsyncRedis()
    recorder = CancellationSwallowed(redis, KeySpace("t"), interval_s=0.01)
    task = asyncio.create_task(recorder.run())
    await asyncio.sleep(0.05)  # in the middle of a flush

    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=5)

    assert done, "the flusher kept looping after it was cancelled"
    assert task.cancelled()
    await redis.aclose()
