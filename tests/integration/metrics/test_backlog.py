"""The backlog read from Redis: lengths, pending entries, lag and ages per group, dead letters
and delayed work per shard."""

from __future__ import annotations

from redis.asyncio import Redis

from streams.core.consumer_groups import DELIVERY_GROUP, ensure_group
from streams.core.keys import KeySpace
from streams.core.vocabulary import Priority
from streams.metrics.backlog import Backlog, GroupBacklog, read_backlog


async def test_lag_is_counted_when_redis_cannot_say(real_redis: Redis, key_prefix: str) -> None:
    keys = KeySpace(key_prefix)
    high = keys.shard(0).work(Priority.HIGH)
    await ensure_group(real_redis, high, DELIVERY_GROUP)
    ids = [await real_redis.xadd(high, {"w": b"x"}) for _ in range(5)]
    await real_redis.xreadgroup(DELIVERY_GROUP, "c", {high: ">"}, count=1)
    await real_redis.xdel(high, ids[2])  # a hole in the unread range: XINFO lag is nil
    [info] = await real_redis.xinfo_groups(high)
    assert info["lag"] is None
    backlog = await read_backlog(real_redis, keys)
    [row] = [g for g in backlog.groups if g.stream == "work:high"]
    assert (row.length, row.pending, row.lag) == (4, 1, 3)


async def redis_now_ms(redis: Redis) -> int:
    seconds, micros = await redis.time()
    return int(seconds) * 1000 + int(micros) // 1000


def row(backlog: Backlog, stream: str, shard: int = 0, group: str = "") -> GroupBacklog:
    [found] = [
        g
        for g in backlog.groups
        if g.stream == stream and g.shard == shard and group in ("", g.group)
    ]
    return found


async def test_every_stream_of_every_shard_is_reported_with_its_group(
    redis: Redis, key_prefix: str
) -> None:
    backlog = await read_backlog(redis, KeySpace(key_prefix, shards=2))
    expected = [
        (stream, shard, group)
        for shard in (0, 1)
        for stream, group in [("events", "projector"), ("events", "status-webhooks"),
                              ("work:high", "delivery"), ("work:normal", "delivery"),
                              ("work:low", "delivery")]
    ]  # fmt: skip
    assert [(g.stream, g.shard, g.group) for g in backlog.groups] == expected
    assert all((g.length, g.pending, g.lag) == (0, 0, 0) for g in backlog.groups)
    assert [(s.shard, s.dlq_size, s.delayed_size) for s in backlog.shards] == [(0, 0, 0), (1, 0, 0)]


async def test_before_its_group_exists_everything_is_unread_and_ages_by_the_redis_clock(
    redis: Redis, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix)
    now = await redis_now_ms(redis)
    events = keys.shard(0).events
    for ms in (now - 10_000, now - 4_000):  # entry ids stamped by a clock 10 s and 4 s ago
        await redis.xadd(events, {"e": b"[]"}, id=f"{ms}-0")

    backlog = await read_backlog(redis, keys)
    projector = row(backlog, "events", group="projector")
    assert row(backlog, "events", group="status-webhooks").lag == 2  # each group on its own

    assert (projector.group, projector.length, projector.pending, projector.lag) == (
        "projector", 2, 0, 2,
    )  # fmt: skip
    assert 10_000 <= projector.oldest_unread_age_ms < 15_000
    assert projector.oldest_pending_age_ms == 0
    assert projector.oldest_waiting_age_ms == projector.oldest_unread_age_ms


async def test_pending_entries_age_until_they_are_acknowledged(
    redis: Redis, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix)
    high = keys.shard(0).work(Priority.HIGH)
    now = await redis_now_ms(redis)
    await ensure_group(redis, high, DELIVERY_GROUP)
    first = await redis.xadd(high, {"w": b"x"}, id=f"{now - 8_000}-0")
    await redis.xadd(high, {"w": b"x"}, id=f"{now - 3_000}-0")
    await redis.xreadgroup(DELIVERY_GROUP, "slow", {high: ">"}, count=1)

    work = row(await read_backlog(redis, keys), "work:high")
    assert (work.length, work.pending, work.lag) == (2, 1, 1)
    assert 8_000 <= work.oldest_pending_age_ms < 13_000
    assert 3_000 <= work.oldest_unread_age_ms < 8_000
    assert work.oldest_waiting_age_ms == work.oldest_pending_age_ms

    await redis.xack(high, DELIVERY_GROUP, first)
    work = row(await read_backlog(redis, keys), "work:high")
    assert (work.pending, work.oldest_pending_age_ms) == (0, 0)


async def test_dead_letters_and_overdue_delayed_work_are_counted_per_shard(
    redis: Redis, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix, shards=3)
    now = await redis_now_ms(redis)
    for _ in range(3):
        await redis.xadd(keys.shard(1).dlq, {"reason": b"x"})
    await redis.zadd(keys.shard(0).delayed, {b"high due": now - 6_000, b"low later": now + 60_000})
    await redis.zadd(keys.shard(1).delayed, {b"normal later": now + 60_000})
    await redis.zadd(keys.shard(2).delayed, {b"low due": now - 2_000})

    backlog = await read_backlog(redis, keys)

    zero, one, two = backlog.shards
    assert (zero.dlq_size, zero.delayed_size, one.dlq_size, one.delayed_size) == (0, 2, 3, 1)
    assert 6_000 <= zero.delayed_overdue_ms < 11_000
    assert one.delayed_overdue_ms == 0  # its earliest member is not due yet
    assert 2_000 <= two.delayed_overdue_ms < zero.delayed_overdue_ms
    assert (backlog.dlq_size, backlog.delayed_size) == (3, 4)
    assert backlog.delayed_overdue_ms == zero.delayed_overdue_ms  # the most overdue shard


async def test_items_queued_for_their_producers_turn_are_counted(
    real_redis: Redis, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix, shards=2)
    for shard, producer, count in ((0, "a", 3), (1, "a", 2), (1, "b", 4)):
        queue = keys.shard(shard).queued(Priority.LOW, producer)
        await real_redis.rpush(queue, *[b"w"] * count)
        await real_redis.sadd(keys.shard(shard).queued_producers(Priority.LOW), producer)
    await real_redis.rpush(keys.shard(0).queued(Priority.NORMAL, "b"), b"w")
    await real_redis.sadd(keys.shard(0).queued_producers(Priority.NORMAL), "b")
    backlog = await read_backlog(real_redis, keys)
    assert [s.queued for s in backlog.shards] == [{"a": 3, "b": 1}, {"a": 2, "b": 4}]
    assert backlog.queued == {"a": 5, "b": 5}
