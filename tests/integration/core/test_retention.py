"""Stream retention against real Redis: trimming never removes what a group still needs."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable
from typing import Any

import asyncpg
import pytest
import structlog
from redis.asyncio import Redis

from projections.projector import Projector
from streams.core.consumer_groups import DELIVERY_GROUP, PROJECTOR_GROUP, STATUS_WEBHOOK_GROUP
from streams.core.keys import KeySpace
from streams.core.retention import (
    StreamRetention,
    forget_marks,
    keep_trimmed,
    policies,
    trim,
    trim_all,
)
from streams.core.vocabulary import Priority
from tests.integration.delivery_support import (
    FAST,
    accept,
    fast_catalog,
    running_worker,
    wait_until,
)

HOUR_MS = 3600 * 1000


async def add_old(redis: Redis, stream: str, count: int, age_ms: int) -> list[str]:
    """``count`` entries whose ids say they were added ``age_ms`` ago."""
    start = time.time_ns() // 1_000_000 - age_ms
    return [
        (await redis.xadd(stream, {"n": n}, id=f"{start + n}-0")).decode() for n in range(count)
    ]


async def ids(redis: Redis, stream: str) -> list[str]:
    return [entry_id.decode() for entry_id, _ in await redis.xrange(stream)]


async def read(redis: Redis, stream: str, group: str, count: int) -> list[str]:
    reply: Any = await redis.xreadgroup(group, "c", {stream: ">"}, count=count)
    return [entry_id.decode() for entry_id, _ in reply[0][1]]


async def test_only_entries_every_group_is_done_with_and_older_than_retention_go(
    real_redis: Redis, key_prefix: str
) -> None:
    stream = KeySpace(key_prefix).shard(0).events
    old = await add_old(real_redis, stream, 10, age_ms=3 * HOUR_MS)
    await real_redis.xgroup_create(stream, PROJECTOR_GROUP, id="0")
    delivered = await read(real_redis, stream, PROJECTOR_GROUP, 6)
    await real_redis.xack(stream, PROJECTOR_GROUP, *delivered[:3])  # 3..5 stay pending
    fresh = [(await real_redis.xadd(stream, {"n": "new"})).decode() for _ in range(2)]
    await read(real_redis, stream, PROJECTOR_GROUP, 100)  # everything delivered now
    await real_redis.xack(stream, PROJECTOR_GROUP, *old[6:], *fresh)

    result = await trim(real_redis, StreamRetention(stream, HOUR_MS, (PROJECTOR_GROUP,)))

    # Acknowledged and old: gone. Pending (however old): kept. Acknowledged but young: kept.
    assert await ids(real_redis, stream) == old[3:] + fresh
    assert result.removed == 3
    assert result.kept_from == old[3]


async def test_a_stopped_projector_keeps_every_entry_it_has_not_acknowledged(
    real_redis: Redis, key_prefix: str
) -> None:
    stream = KeySpace(key_prefix).shard(0).events
    old = await add_old(real_redis, stream, 20, age_ms=5 * HOUR_MS)
    await real_redis.xgroup_create(stream, PROJECTOR_GROUP, id="0")
    done = await read(real_redis, stream, PROJECTOR_GROUP, 5)
    await real_redis.xack(stream, PROJECTOR_GROUP, *done)  # then it stopped

    await trim(real_redis, StreamRetention(stream, 0, (PROJECTOR_GROUP,)))

    assert await ids(real_redis, stream) == old[5:]  # never given to it: all kept


async def test_the_slowest_group_decides(real_redis: Redis, key_prefix: str) -> None:
    stream = KeySpace(key_prefix).shard(0).events
    old = await add_old(real_redis, stream, 10, age_ms=2 * HOUR_MS)
    for group, done in ((PROJECTOR_GROUP, 8), ("audit", 4)):
        await real_redis.xgroup_create(stream, group, id="0")
        await real_redis.xack(stream, group, *await read(real_redis, stream, group, done))

    await trim(real_redis, StreamRetention(stream, HOUR_MS, (PROJECTOR_GROUP,)))

    assert await ids(real_redis, stream) == old[4:]


async def test_a_stream_without_its_group_is_untouched(real_redis: Redis, key_prefix: str) -> None:
    stream = KeySpace(key_prefix).shard(0).events
    old = await add_old(real_redis, stream, 5, age_ms=48 * HOUR_MS)

    result = await trim(real_redis, StreamRetention(stream, HOUR_MS, (PROJECTOR_GROUP,)))

    assert await ids(real_redis, stream) == old
    assert result.missing_group == PROJECTOR_GROUP
    assert result.removed == 0


async def test_streams_without_groups_are_bounded_by_age_alone(
    real_redis: Redis, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix)
    dlq = keys.shard(0).dlq
    ancient = await add_old(real_redis, dlq, 3, age_ms=10 * 24 * HOUR_MS)
    recent = await add_old(real_redis, dlq, 2, age_ms=2 * HOUR_MS)
    sent = await add_old(real_redis, keys.sandbox_sent, 4, age_ms=2 * HOUR_MS)
    retention = policies(
        keys, stream_retention_ms=HOUR_MS,
        dlq_retention_ms=7 * 24 * HOUR_MS,
    )  # fmt: skip

    results = {r.stream: r for r in await trim_all(real_redis, retention)}

    assert await ids(real_redis, dlq) == recent  # the DLQ keeps its own, longer window
    assert results[dlq].removed == len(ancient)
    assert await ids(real_redis, keys.sandbox_sent) == []
    assert results[keys.sandbox_sent].removed == len(sent)
    # Streams that do not exist are no error, and get nothing created.
    assert not await real_redis.exists(keys.shard(0).work(Priority.LOW))


async def test_resolved_marks_go_with_their_dead_letters(
    real_redis: Redis, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix)
    shard = keys.shard(0)
    ancient = await add_old(real_redis, shard.dlq, 3, age_ms=10 * 24 * HOUR_MS)
    recent = await add_old(real_redis, shard.dlq, 2, age_ms=2 * HOUR_MS)
    marks = dict.fromkeys([*ancient[:2], recent[0]], '{"outcome": "replayed"}')
    marks["not-an-entry-id"] = "{}"
    await real_redis.hset(shard.dlq_resolved, mapping=marks)
    retention = policies(
        keys, stream_retention_ms=HOUR_MS,
        dlq_retention_ms=7 * 24 * HOUR_MS,
    )  # fmt: skip
    [policy] = [policy for policy in retention if policy.stream == shard.dlq]

    result = await trim(real_redis, policy)

    assert result.removed == len(ancient)
    assert result.marks_removed == 2
    left = {field.decode() for field in await real_redis.hkeys(shard.dlq_resolved)}
    assert left == {recent[0], "not-an-entry-id"}


async def test_marks_are_read_in_pages(real_redis: Redis, key_prefix: str) -> None:
    marks = f"{key_prefix}:marks"
    await real_redis.hset(marks, mapping={f"{ms}-0": "x" for ms in range(1, 2501)})

    assert await forget_marks(real_redis, marks, "2001-0") == 2000
    assert await real_redis.hlen(marks) == 500


async def test_a_stopped_projector_keeps_its_entries_while_delivered_work_is_trimmed(
    real_redis: Redis, key_prefix: str, pool: asyncpg.Pool
) -> None:
    keys, catalog = KeySpace(key_prefix), fast_catalog()
    shard = keys.shard(0)
    retention = policies(keys, stream_retention_ms=0, dlq_retention_ms=HOUR_MS)
    await real_redis.xgroup_create(shard.events, STATUS_WEBHOOK_GROUP, id="0", mkstream=True)
    projector = Projector(real_redis, pool, keys, consumer="p")
    first_run = asyncio.create_task(projector.run())
    await wait_until(lambda: _has_group(real_redis, shard.events, PROJECTOR_GROUP))
    projector.stop()
    await first_run
    body = {"recipient": {"id": "u-1", "email": "a@example.com"}, "type": "order_confirmed",
            "data": {"order_id": "7"}}  # fmt: skip
    for n in range(5):
        await accept(real_redis, keys, catalog, body, f"k{n}")
    work = shard.work(Priority.NORMAL)
    async with running_worker(real_redis, keys, catalog):
        await wait_until(lambda: _all_acknowledged(real_redis, work, DELIVERY_GROUP))
    events_before = await ids(real_redis, shard.events)

    await trim_all(real_redis, retention)

    assert await ids(real_redis, work) == []  # delivered and acknowledged: gone at once
    assert await ids(real_redis, shard.events) == events_before  # the projector's: all kept

    projector = Projector(real_redis, pool, keys, consumer="p")
    second_run = asyncio.create_task(projector.run())
    await wait_until(lambda: _all_acknowledged(real_redis, shard.events, PROJECTOR_GROUP))
    projector.stop()
    await second_run
    async with pool.acquire() as connection:
        projected = await connection.fetchval(
            "SELECT count(DISTINCT notification_id) FROM delivery"
        )
    assert projected == 5  # nothing it needed was trimmed before it came back

    await trim_all(real_redis, retention)
    # The status-webhooks group has read nothing yet: it needs every entry still.
    assert await ids(real_redis, shard.events) == events_before

    await real_redis.xack(
        shard.events, STATUS_WEBHOOK_GROUP,
        *await read(real_redis, shard.events, STATUS_WEBHOOK_GROUP, 1000),
    )  # fmt: skip
    await trim_all(real_redis, retention)

    assert await ids(real_redis, shard.events) == []


async def test_events_wait_for_the_status_webhooks_group_too(
    real_redis: Redis, key_prefix: str
) -> None:
    shard = KeySpace(key_prefix).shard(0)
    [events] = [
        policy
        for policy in policies(KeySpace(key_prefix), stream_retention_ms=0, dlq_retention_ms=0)
        if policy.stream == shard.events
    ]
    old = await add_old(real_redis, shard.events, 4, age_ms=3 * HOUR_MS)
    await real_redis.xgroup_create(shard.events, PROJECTOR_GROUP, id="0")
    await real_redis.xack(
        shard.events, PROJECTOR_GROUP, *await read(real_redis, shard.events, PROJECTOR_GROUP, 10)
    )
    # The projector is done, but the status-webhooks group does not exist yet.
    assert (await trim(real_redis, events)).missing_group == STATUS_WEBHOOK_GROUP
    await real_redis.xgroup_create(shard.events, STATUS_WEBHOOK_GROUP, id="0")
    await real_redis.xack(
        shard.events, STATUS_WEBHOOK_GROUP,
        *(await read(real_redis, shard.events, STATUS_WEBHOOK_GROUP, 2)),
    )  # fmt: skip

    await trim(real_redis, events)

    assert await ids(real_redis, shard.events) == old[2:]  # what it has not read stays


async def test_the_trim_loop_survives_an_unreachable_redis() -> None:
    unreachable = Redis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=0.2)
    retention = [StreamRetention("nowhere", HOUR_MS)]
    with structlog.testing.capture_logs() as logs:
        loop = asyncio.create_task(keep_trimmed(unreachable, retention, interval_s=0.05))
        await asyncio.sleep(0.3)
        assert not loop.done()
        loop.cancel()
        with pytest.raises(asyncio.CancelledError):
            await loop
    await unreachable.aclose()
    failures = [line for line in logs if line["event"] == "retention.trim_failed"]
    assert len(failures) >= 2  # tried again after the first failure


async def _has_group(redis: Redis, stream: str, group: str) -> bool:
    if not await redis.exists(stream):
        return False
    return any(g["name"].decode() == group for g in await redis.xinfo_groups(stream))


async def _all_acknowledged(redis: Redis, stream: str, group: str) -> bool:
    for info in await redis.xinfo_groups(stream):
        if info["name"].decode() == group:
            return bool(info["pending"] == 0 and info["lag"] == 0)
    return False


async def test_an_ended_delivery_state_expires_and_one_in_progress_does_not(
    real_redis: Redis, key_prefix: str
) -> None:
    keys, catalog = KeySpace(key_prefix), fast_catalog()
    shard = keys.shard(0)
    bodies = {
        "sent": {"recipient": {"id": "u-1", "phone": "+4915112345678"}, "type": "otp",
                 "data": {"code": "1"}},
        "failed": {"recipient": {"id": "u-2", "phone": "+4915112345679"}, "type": "otp",
                   "data": {"code": "2", "sandbox": {"SMS": {"fail_permanent": "no"}}}},
        "sending": {"recipient": {"id": "u-3", "phone": "+4915112345670"}, "type": "otp",
                    "data": {"code": "3", "sandbox": {"SMS": {"latency_ms": 3000}}}},
    }  # fmt: skip
    delivery = {}
    for name, body in bodies.items():
        answer = await accept(real_redis, keys, catalog, body, name)
        delivery[name] = shard.delivery(answer["deliveries"][0]["id"])
    options = dataclasses.replace(FAST, state_retention_ms=60_000, failed_state_retention_ms=90_000)

    async def status(name: str) -> str | None:
        value = await real_redis.hget(delivery[name], "status")  # type: ignore[misc]
        return value.decode() if value else None

    async with running_worker(real_redis, keys, catalog, options=options):
        await wait_until(lambda: _is(status("sent"), "SENT"))
        await wait_until(lambda: _is(status("failed"), "FAILED"))
        await wait_until(lambda: _is(status("sending"), "SENDING"))
        assert await real_redis.pttl(delivery["sending"]) == -1  # no expiry while in progress
        assert 0 < await real_redis.pttl(delivery["sent"]) <= 60_000
        # A FAILED delivery's state stays as long as its dead letter may be replayed.
        assert 60_000 < await real_redis.pttl(delivery["failed"]) <= 90_000
        await wait_until(lambda: _is(status("sending"), "SENT"))
    assert 0 < await real_redis.pttl(delivery["sending"]) <= 60_000


async def _is(value: Awaitable[str | None], expected: str) -> bool:
    return await value == expected
