"""The feeder loop against real Redis: it refills a drained stream from the queues, and
stops when asked."""

from __future__ import annotations

import asyncio

from redis.asyncio import Redis

from app.delivery.feeder import Feeder, FeederTiming
from streams.core.keys import KeySpace
from streams.core.vocabulary import Priority
from streams.delivery.fairness import Fairness
from tests.integration.delivery_support import wait_until


async def test_the_feeder_refills_a_drained_stream_and_stops(
    real_redis: Redis, key_prefix: str
) -> None:
    shard = KeySpace(key_prefix).shard(0)
    stream = shard.work(Priority.NORMAL)
    for producer in ("a", "b"):
        await real_redis.rpush(shard.queued(Priority.NORMAL, producer), *[b"x"] * 15)
        await real_redis.sadd(shard.queued_producers(Priority.NORMAL), producer)
    feeder = Feeder(real_redis, Fairness(buffer=10), FeederTiming(idle_s=0.01, full_s=0.01))
    stopping = asyncio.Event()
    running = asyncio.create_task(feeder.run([shard], stopping))

    async def stream_holds(count: int) -> bool:
        return await real_redis.xlen(stream) == count

    await wait_until(lambda: stream_holds(10))
    for _ in range(2):  # the lanes take what is there; the feeder lets in the next 10
        await real_redis.delete(stream)
        await wait_until(lambda: stream_holds(10))
    stopping.set()
    await asyncio.wait_for(running, 2)
    assert await real_redis.llen(shard.queued(Priority.NORMAL, "a")) == 0
    assert await real_redis.smembers(shard.queued_producers(Priority.NORMAL)) == set()
