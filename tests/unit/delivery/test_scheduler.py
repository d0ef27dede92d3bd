"""A worker's scheduler loop on fakeredis: it sleeps until the next member is due and moves it,
wakes at once when told to, moves members due every millisecond a tick at a time, and ends
when cancelled."""

from __future__ import annotations

import asyncio
import time

import pytest
from redis.asyncio import Redis

from app.delivery import scheduler as scheduler_module
from app.delivery.scheduler import Scheduler
from streams.core.keys import KeySpace, ShardKeys
from streams.core.vocabulary import Priority
from streams.delivery.delayed import MOVE_LIMIT, Moved, delayed_member, move_due


@pytest.fixture
def shard(key_prefix: str) -> ShardKeys:
    return KeySpace(key_prefix).shard(0)


async def now_ms(redis: Redis) -> int:
    seconds, micros = await redis.time()
    return int(seconds) * 1000 + int(micros) // 1000


async def queued_within(redis: Redis, shard: ShardKeys, seconds: float) -> float:
    """Seconds until the HIGH work stream has an entry; fails after ``seconds``."""
    started = time.monotonic()
    while not await redis.xlen(shard.work(Priority.HIGH)):
        assert time.monotonic() - started < seconds, "nothing was moved"
        await asyncio.sleep(0.01)
    return time.monotonic() - started


async def test_the_loop_sleeps_until_the_next_member_is_due(
    fake: Redis, shard: ShardKeys, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scheduler_module, "IDLE_S", 30.0)  # only the member's time wakes it
    due = await now_ms(fake) + 300
    await fake.zadd(shard.delayed, {delayed_member(Priority.HIGH, b"retry"): due})
    scheduler, stopping = Scheduler(fake, [shard]), asyncio.Event()
    loop = asyncio.create_task(scheduler.run(shard, stopping))
    try:
        waited = await queued_within(fake, shard, 5.0)
        assert waited >= 0.25  # not before it was due
        assert await now_ms(fake) >= due
        assert await fake.zcard(shard.delayed) == 0
    finally:
        stopping.set()
        scheduler.wake(shard)
        await asyncio.wait_for(loop, 5)


async def test_a_wake_moves_what_was_just_scheduled_at_once(
    fake: Redis, shard: ShardKeys, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scheduler_module, "IDLE_S", 30.0)  # asleep far longer than the test
    scheduler, stopping = Scheduler(fake, [shard]), asyncio.Event()
    loop = asyncio.create_task(scheduler.run(shard, stopping))
    try:
        await asyncio.sleep(0.05)
        await fake.zadd(shard.delayed, {delayed_member(Priority.HIGH, b"retry"): 0})
        scheduler.wake(shard)
        assert await queued_within(fake, shard, 2.0) < 2.0
    finally:
        stopping.set()
        scheduler.wake(shard)
        await asyncio.wait_for(loop, 5)


async def test_a_cancelled_loop_ends_at_once_even_while_asleep(
    fake: Redis, shard: ShardKeys, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scheduler_module, "IDLE_S", 30.0)
    scheduler, stopping = Scheduler(fake, [shard]), asyncio.Event()
    loop = asyncio.create_task(scheduler.run(shard, stopping))
    await asyncio.sleep(0.05)
    loop.cancel()  # what the worker does to its loops when it stops
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(loop, 2)


async def test_members_due_every_millisecond_are_moved_a_tick_at_a_time(
    fake: Redis, shard: ShardKeys, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []

    async def counted(redis: Redis, at: ShardKeys, limit: int = MOVE_LIMIT) -> Moved:
        moved = await move_due(redis, at, limit)
        calls.append(moved.count)
        return moved

    monkeypatch.setattr(scheduler_module, "move_due", counted)
    first = await now_ms(fake) + 50
    members = {delayed_member(Priority.HIGH, b"item-%d" % n): first + n for n in range(300)}
    await fake.zadd(shard.delayed, members)
    scheduler, stopping = Scheduler(fake, [shard]), asyncio.Event()
    loop = asyncio.create_task(scheduler.run(shard, stopping))
    try:
        started = time.monotonic()
        while await fake.zcard(shard.delayed):
            assert time.monotonic() - started < 5, "not all were moved"
            await asyncio.sleep(0.01)
        moving = [count for count in calls if count]
        # 300 ms of members, one a ms: a call every tick (10 ms) or so, not one a member.
        assert sum(moving) == 300
        assert len(moving) <= 300 / (scheduler_module.TICK_S * 1000) * 1.5
    finally:
        stopping.set()
        scheduler.wake(shard)
        await asyncio.wait_for(loop, 5)
