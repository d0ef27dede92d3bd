"""``clarion projection rebuild`` against real Redis and PostgreSQL: rebuilt equals live."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import Any

import asyncpg
import structlog
from redis.asyncio import Redis

from projections.database import connect
from projections.inbox_rows import InboxRows
from projections.projector import Projector
from projections.rebuild import RebuildSummary, rebuild
from projections.rows import apply, rows_of
from streams.campaigns.ids import notification_key
from streams.core.consumer_groups import DELIVERY_GROUP, PROJECTOR_GROUP
from streams.core.events import RecipientErased
from streams.core.keys import KeySpace
from streams.core.retention import StreamRetention, trim
from tests.integration.delivery_support import accept, fast_catalog, running_worker, wait_until
from tests.pg import throwaway_database

BODIES: list[dict[str, Any]] = [
    {"recipient": {"id": "u-1", "phone": "+4915112345678"}, "type": "otp",
     "data": {"code": "1", "sandbox": {"SMS": {"fail_transient": 1}}}},
    {"recipient": {"id": "u-2", "email": "a@example.com"}, "type": "order_confirmed",
     "data": {"order_id": "7", "sandbox": {"EMAIL": {"fail_permanent": "no such box"}}}},
    {"recipient": {"id": "u-3", "email": "b@example.com", "push_tokens": ["t1", "t2"]},
     "type": "order_confirmed", "data": {"order_id": "8"}},
    {"recipient": {"id": "u-4"}, "type": "order_confirmed", "data": {"order_id": "9"}},
]  # fmt: skip
TABLES = ("notification", "delivery", "delivery_event")


async def snapshot(pool: asyncpg.Pool) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of the read model, in key order."""
    async with pool.acquire() as connection:
        return {
            table: [
                tuple(row) for row in await connection.fetch(f"SELECT * FROM {table} ORDER BY 1, 2")
            ]
            for table in TABLES
        }


async def indexes(pool: asyncpg.Pool) -> list[tuple[str, str]]:
    async with pool.acquire() as connection:
        rows = await connection.fetch(
            "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'public' "
            "AND tablename IN ('notification', 'delivery') ORDER BY 1"
        )
    return [(row["indexname"], row["indexdef"]) for row in rows]


async def partitions(pool: asyncpg.Pool) -> list[tuple[str, str, str, str]]:
    """Each partition of notification and delivery: its schema, name, parent and bounds."""
    async with pool.acquire() as connection:
        rows = await connection.fetch(
            "SELECT c.relnamespace::regnamespace::text, c.relname::text, "
            "i.inhparent::regclass::text, pg_get_expr(c.relpartbound, c.oid) "
            "FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid "
            "WHERE i.inhparent IN ('notification'::regclass, 'delivery'::regclass) ORDER BY 2"
        )
    return [tuple(row) for row in rows]


async def partitions_holding_rows(pool: asyncpg.Pool) -> set[str]:
    async with pool.acquire() as connection:
        rows = await connection.fetch(
            "SELECT tableoid::regclass::text AS p FROM notification "
            "UNION SELECT tableoid::regclass::text FROM delivery"
        )
    return {row["p"] for row in rows}


async def project_everything(redis: Redis, pool: asyncpg.Pool, keys: KeySpace) -> None:
    """Accept ``BODIES``, deliver them and project every event; the projector is stopped after."""
    catalog = fast_catalog()
    for n, body in enumerate(BODIES):
        await accept(redis, keys, catalog, body, f"k{n}")
    # A cancelled campaign's notification: its delivery ends CANCELLED, the row names it.
    await redis.set(keys.shard(0).campaign_cancelled("c-1"), "1")
    await accept(redis, keys, catalog, BODIES[0], notification_key("c-1", "u-1"))
    projector = Projector(redis, pool, keys, consumer="p")
    task = asyncio.create_task(projector.run())
    async with running_worker(redis, keys, catalog):
        await wait_until(lambda: _settled(redis, pool, keys), within=20)
    projector.stop()
    await task


async def _settled(redis: Redis, pool: asyncpg.Pool, keys: KeySpace) -> bool:
    """Nothing left to deliver, and every event projected."""
    shard = keys.shard(0)
    streams = [(shard.events, PROJECTOR_GROUP)] + [
        (stream, DELIVERY_GROUP) for stream in shard.work_streams
    ]
    for stream, group in streams:
        if not await redis.exists(stream):
            continue
        done = [
            info["pending"] == 0 and info["lag"] == 0
            for info in await redis.xinfo_groups(stream)
            if info["name"].decode() == group
        ]
        if done != [True]:
            return False
    if await redis.zcard(shard.delayed):
        return False
    async with pool.acquire() as connection:
        active = await connection.fetchval(
            "SELECT count(*) FROM delivery "
            "WHERE status NOT IN ('SENT', 'FAILED', 'SUPPRESSED', 'CANCELLED')"
        )
        empty = await connection.fetchval("SELECT count(*) = 0 FROM delivery")
    return bool(active == 0 and not empty)


async def test_a_rebuild_from_the_history_in_postgresql_equals_the_live_projection(
    real_redis: Redis, key_prefix: str, pool: asyncpg.Pool, database_url: str
) -> None:
    keys = KeySpace(key_prefix)
    await project_everything(real_redis, pool, keys)
    live, live_indexes = await snapshot(pool), await indexes(pool)
    live_partitions, live_holders = await partitions(pool), await partitions_holding_rows(pool)
    # Five days and the default partition of each table; the rows are all in today's.
    assert len(live_partitions) == 12
    assert len(live_holders) == 2
    assert {row[6] for row in live["delivery"]} == {"SENT", "FAILED", "SUPPRESSED", "CANCELLED"}
    # The columns added last: campaign_id, recipient_id, due_at, step, fallback_of.
    assert {row[-5] for row in live["delivery"]} == {None, "c-1"}  # campaign_id
    assert {row[-4] for row in live["delivery"]} == {"u-1", "u-2", "u-3", "u-4"}  # recipient_id
    # Redis forgets everything the projector acknowledged: only PostgreSQL has it now.
    events = keys.shard(0).events
    await trim(real_redis, StreamRetention(events, 0, (PROJECTOR_GROUP,)))
    assert await real_redis.xlen(events) == 0
    async with pool.acquire() as connection:  # a read model gone wrong
        await connection.execute("UPDATE delivery SET status = 'QUEUED', attempts = 99")
        await connection.execute("DELETE FROM notification WHERE recipient_id = 'u-1'")

    summary = await rebuild(database_url, real_redis, keys)

    assert summary.swapped
    assert summary.history_events == len(live["delivery_event"])
    assert summary.redis_entries == 0
    assert await snapshot(pool) == live
    assert await indexes(pool) == live_indexes
    # Partitioned as before, every partition in the live schema, rows in their days'.
    assert await partitions(pool) == live_partitions
    assert await partitions_holding_rows(pool) == live_holders
    async with pool.acquire() as connection:
        assert await connection.fetchval("SELECT to_regnamespace('clarion_rebuild')") is None


async def test_events_postgresql_lost_are_taken_from_redis(
    real_redis: Redis, key_prefix: str, pool: asyncpg.Pool, database_url: str
) -> None:
    keys = KeySpace(key_prefix)
    await project_everything(real_redis, pool, keys)
    live = await snapshot(pool)
    # As if PostgreSQL were restored from a backup taken halfway through: the newer half of
    # the history is missing there, Redis still holds it.
    entries = await real_redis.xrange(keys.shard(0).events)
    newer = [f"0-{entry_id.decode()}-%" for entry_id, _ in entries[len(entries) // 2 :]]
    async with pool.acquire() as connection:
        await connection.execute("DELETE FROM delivery_event WHERE event_id LIKE ANY($1)", newer)
        await connection.execute("DELETE FROM delivery")

    summary = await rebuild(database_url, real_redis, keys)

    assert summary.redis_entries == len(newer)
    assert await snapshot(pool) == live


async def test_a_rebuild_that_would_lose_notifications_can_be_refused(
    real_redis: Redis, key_prefix: str, pool: asyncpg.Pool, database_url: str
) -> None:
    keys = KeySpace(key_prefix)
    await project_everything(real_redis, pool, keys)
    await trim(real_redis, StreamRetention(keys.shard(0).events, 0, (PROJECTOR_GROUP,)))
    async with pool.acquire() as connection:  # its history partition was dropped
        await connection.execute(
            "DELETE FROM delivery_event WHERE notification_id = "
            "(SELECT id FROM notification WHERE recipient_id = 'u-2')"
        )
    before = await snapshot(pool)
    asked: list[RebuildSummary] = []

    summary = await rebuild(
        database_url, real_redis, keys, confirm=lambda found: asked.append(found) is not None
    )

    assert asked == [summary]
    assert summary.lost == 1
    assert summary.notifications_after == summary.notifications_before - 1
    assert not summary.swapped
    assert await snapshot(pool) == before
    async with pool.acquire() as connection:
        assert await connection.fetchval("SELECT to_regnamespace('clarion_rebuild')") is None


async def test_a_rebuild_while_everything_runs_loses_nothing(
    real_redis: Redis, key_prefix: str, pool: asyncpg.Pool, database_url: str
) -> None:
    keys, catalog = KeySpace(key_prefix), fast_catalog()
    sending = asyncio.Event()

    async def produce() -> None:
        n = 0
        while not sending.is_set():
            await accept(real_redis, keys, catalog, BODIES[n % len(BODIES)], f"live-{n}")
            n += 1
            await asyncio.sleep(0.005)

    projector = Projector(real_redis, pool, keys, consumer="p")
    projecting = asyncio.create_task(projector.run())
    async with running_worker(real_redis, keys, catalog):
        producing = asyncio.create_task(produce())
        await asyncio.sleep(0.5)
        summary = await rebuild(database_url, real_redis, keys)
        await asyncio.sleep(0.5)
        sending.set()
        await producing
        await wait_until(lambda: _settled(real_redis, pool, keys), within=30)
    projector.stop()
    await projecting
    assert summary.swapped
    assert summary.notifications_after > 0

    # The reference: every entry of the stream projected in one go into a fresh database.
    entries = [
        (entry_id.decode(), fields[b"e"])
        for entry_id, fields in await real_redis.xrange(keys.shard(0).events)
    ]
    async with throwaway_database() as reference_url:
        reference = await connect(reference_url)
        try:
            await apply(reference, "reference", rows_of(0, entries))
            assert await snapshot(pool) == await snapshot(reference)
        finally:
            await reference.close()


async def test_the_swap_is_logged_as_done(
    real_redis: Redis, key_prefix: str, pool: asyncpg.Pool, database_url: str
) -> None:
    keys = KeySpace(key_prefix)
    await project_everything(real_redis, pool, keys)

    with structlog.testing.capture_logs() as logs:
        summary = await rebuild(database_url, real_redis, keys)

    assert summary.swapped
    swapped = [entry for entry in logs if entry["event"] == "rebuild.swapped"]
    assert len(swapped) == 1
    assert swapped[0]["swapped"] is True
    assert swapped[0]["notifications_after"] == summary.notifications_after


async def test_inbox_messages_an_erasure_redacted_are_no_alarm_but_garbage_is(
    real_redis: Redis, key_prefix: str, pool: asyncpg.Pool, database_url: str
) -> None:
    keys = KeySpace(key_prefix)
    await project_everything(real_redis, pool, keys)  # u-3's order_confirmed went to its inbox
    async with pool.acquire() as connection:
        # What projecting u-3's RecipientErased does to its inbox messages' events.
        rows = InboxRows()
        rows.add(RecipientErased(at=datetime.now(UTC), recipient_id="u-3"))
        await rows.write(connection)
        redacted = await connection.fetch(
            "SELECT event_id, body::text FROM delivery_event "
            "WHERE type = 'InboxMessageCreated' AND body->>'recipient_id' = 'u-3'"
        )
        assert redacted
        assert all("title" not in json.loads(row["body"]) for row in redacted)
        garbage = '{"type": "DeliverySent", "at": "yesterday"}'
        await connection.execute(
            "INSERT INTO delivery_event VALUES ($1, now(), 'DeliverySent', NULL, NULL, NULL, $2)",
            "0-99999999999999-0-0", garbage,
        )  # fmt: skip
    live = await snapshot(pool)

    with structlog.testing.capture_logs() as logs:
        summary = await rebuild(database_url, real_redis, keys)

    assert summary.redacted_events == len(redacted)
    assert summary.undecodable_events == 1
    errors = [entry for entry in logs if entry["log_level"] == "error"]
    assert [entry["event"] for entry in errors] == ["rebuild.undecodable_event"]
    assert errors[0]["event_id"] == "0-99999999999999-0-0"
    quiet = [entry for entry in logs if entry["event"] == "rebuild.redacted_event"]
    assert {entry["event_id"] for entry in quiet} == {row["event_id"] for row in redacted}
    assert {entry["log_level"] for entry in quiet} == {"debug"}
    counted = [entry for entry in logs if entry["event"] == "rebuild.redacted_events"]
    assert [(entry["log_level"], entry["count"]) for entry in counted] == [("info", len(redacted))]
    # A redacted message still counts for its delivery's row: rebuilt equals live.
    assert await snapshot(pool) == live
