"""The metrics recorder's flusher: it ends when cancelled, whatever the client makes of it."""

from __future__ import annotations

import asyncio

import fakeredis
import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from streams.core.keys import KeySpace
from streams.metrics.recorder import MetricsRecorder


class CancellationTurnedError(MetricsRecorder):
    """A recorder whose flush, when cancelled mid-write, raises a connection error instead,
    as a Redis client may when a cancellation interrupts it."""

    async def flush(self) -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            raise RedisConnectionError("connection closed while reading") from None


class CancellationSwallowed(MetricsRecorder):
    """A recorder whose flush, when cancelled mid-write, finishes anyway, as the Redis client
    did once in a few hundred stops of a delivery worker (its watchdog then kept it alive)."""

    async def flush(self) -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            return


@pytest.mark.parametrize(
    "recorder_class",
    [CancellationTurnedError, CancellationSwallowed],
    ids=["client-made-it-an-error", "client-swallowed-it"],
)
async def test_a_cancelled_flusher_ends_whatever_the_client_made_of_the_cancellation(
    recorder_class: type[MetricsRecorder],
) -> None:
    redis = fakeredis.FakeAsyncRedis()
    recorder = recorder_class(redis, KeySpace("t"), interval_s=0.01)
    task = asyncio.create_task(recorder.run())
    await asyncio.sleep(0.05)  # in the middle of a flush

    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=5)

    assert done, "the flusher kept looping after it was cancelled"
    assert task.cancelled()
    await redis.aclose()
