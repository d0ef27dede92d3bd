"""The advisor's signals gathered from real Redis (``read_advice``): each state the tree
knows, built from the keys that show it."""

from __future__ import annotations

import msgspec
from redis.asyncio import Redis

from app.metrics import read_snapshot
from app.operations.advice import advice_view, read_advice, signals_of
from app.operations.advisor import NO_WORKER_TEXT, RETRY_STORM_RETRIES, Problem
from streams.core import codec
from streams.core.keys import KeySpace
from streams.core.vocabulary import Priority
from streams.delivery.delayed import delayed_member
from streams.metrics.heartbeats import Heartbeat, write_heartbeat
from tests.integration.metrics.test_backlog import redis_now_ms
from tests.unit.delivery_examples import ITEM


async def retries(redis: Redis, keys: KeySpace, count: int, now_ms: int) -> None:
    members = {
        delayed_member(
            Priority.NORMAL,
            codec.encode_work_item(
                msgspec.structs.replace(
                    ITEM, delivery_id=f"d{n}", attempts=1, created_ms=now_ms - 20_000
                )
            ),
        ): now_ms + 60_000
        for n in range(count)
    }
    await redis.zadd(keys.shard(0).delayed, members)


async def dead_letters(redis: Redis, keys: KeySpace, count: int, resolved: int = 0) -> None:
    ids = [await redis.xadd(keys.shard(0).dlq, {"reason": "test"}) for _ in range(count)]
    for entry_id in ids[:resolved]:
        await redis.hset(keys.shard(0).dlq_resolved, entry_id, b"{}")


async def worker(redis: Redis, keys: KeySpace, now_ms: int, cpu: float = 0.2) -> None:
    await write_heartbeat(
        redis, keys, "host-0", Heartbeat(at_ms=now_ms, window_ms=5000, cpu_share=cpu)
    )


async def problems(redis: Redis, keys: KeySpace) -> list[Problem]:
    return [hint.problem for hint in await read_advice(redis, keys, [])]


async def test_a_quiet_service_with_a_worker_is_stable(real_redis: Redis, key_prefix: str) -> None:
    keys = KeySpace(key_prefix)
    await worker(real_redis, keys, await redis_now_ms(real_redis))
    assert await problems(real_redis, keys) == [Problem.STABLE]


async def test_settled_dead_letters_do_not_count_open_ones_do(
    real_redis: Redis, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix)
    await dead_letters(real_redis, keys, 3, resolved=3)
    assert await problems(real_redis, keys) == [Problem.STABLE]
    await dead_letters(real_redis, keys, 1)
    [hint] = await read_advice(real_redis, keys, [])
    assert (hint.problem, hint.evidence) == (Problem.DEAD_LETTERS, "1 open")


async def test_retries_alone_then_with_dead_letters(real_redis: Redis, key_prefix: str) -> None:
    keys = KeySpace(key_prefix)
    now = await redis_now_ms(real_redis)
    await retries(real_redis, keys, RETRY_STORM_RETRIES, now)
    [storm] = await read_advice(real_redis, keys, [])
    assert storm.problem is Problem.RETRY_STORM
    assert storm.evidence.startswith(f"{RETRY_STORM_RETRIES} retries waiting, the oldest")
    await dead_letters(real_redis, keys, 2)
    assert await problems(real_redis, keys) == [Problem.DLQ_AND_RETRIES]


async def test_old_work_without_a_worker_is_lag_high_naming_the_missing_worker(
    real_redis: Redis, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix)
    now = await redis_now_ms(real_redis)
    high = keys.shard(0).work(Priority.HIGH)
    await real_redis.xadd(high, {"w": b"[]"}, id=f"{now - 8_000}-0")
    [lag] = advice_view(await read_advice(real_redis, keys, []))
    assert (lag.problem, lag.text) == ("lag high", NO_WORKER_TEXT)
    assert lag.evidence.startswith("HIGH: 1 waiting, the oldest 8.")
    # With a busy worker reporting and providers with room, the workers are the bottleneck.
    await worker(real_redis, keys, await redis_now_ms(real_redis), cpu=0.95)
    signals = signals_of(await read_snapshot(real_redis, keys, []))
    assert (signals.workers_reporting, signals.worker_cpu_share) == (1, 0.95)
    [lag] = advice_view(await read_advice(real_redis, keys, []))
    assert "add workers" in lag.text


async def test_a_producers_view_names_no_other_producer(real_redis: Redis, key_prefix: str) -> None:
    keys = KeySpace(key_prefix)
    now = await redis_now_ms(real_redis)
    await worker(real_redis, keys, now)
    await real_redis.xadd(keys.shard(0).work(Priority.NORMAL), {"w": b"[]"}, id=f"{now - 90_000}-0")
    await real_redis.sadd(keys.shard(0).queued_producers(Priority.NORMAL), "rival")
    await real_redis.rpush(keys.shard(0).queued(Priority.NORMAL, "rival"), b"x", b"y")
    [named] = await read_advice(real_redis, keys, [])
    [anonymous] = await read_advice(real_redis, keys, [], name_producers=False)
    assert "largest producer queue: rival (2)" in named.evidence
    assert "rival" not in anonymous.evidence
    assert anonymous.text == named.text
