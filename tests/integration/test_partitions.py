"""Daily partitions of the read model on real PostgreSQL: created ahead once, UTC days,
late rows moved in, expired ones dropped; notifications and deliveries by their ids' days."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, date, datetime, timedelta

import asyncpg
import pytest

from projections.database import migrate
from projections.partitions import (
    EVENTS,
    NOTIFICATIONS,
    drop_expired_partitions,
    ensure_partitions,
    first_id_at,
    ids_of_the_day_of,
)
from streams.core.ids import new_ids
from tests.integration.partition_support import (
    daily_partitions,
    days,
    every_table_days,
    insert_event,
)

DAY = date(2026, 6, 1)


@pytest.fixture
async def conn(database_url: str) -> AsyncIterator[asyncpg.Connection]:
    """A connection to a fresh, migrated database (no daily partitions yet)."""
    connection = await asyncpg.connect(database_url)
    await migrate(connection)
    yield connection
    await connection.close()


async def where_is(connection: asyncpg.Connection, event_id: str) -> str | None:
    value = await connection.fetchval(
        "SELECT tableoid::regclass::text FROM delivery_event WHERE event_id = $1", event_id
    )
    return None if value is None else str(value)


async def test_partitions_are_created_once(conn: asyncpg.Connection) -> None:
    created = await ensure_partitions(conn, DAY)
    assert created == every_table_days(DAY - timedelta(1), DAY + timedelta(3))
    assert await ensure_partitions(conn, DAY) == []
    assert await ensure_partitions(conn, DAY + timedelta(1)) == every_table_days(
        DAY + timedelta(4), DAY + timedelta(4)
    )
    assert await daily_partitions(conn) == days(DAY - timedelta(1), DAY + timedelta(4))


async def test_concurrent_partition_creators_both_succeed(
    conn: asyncpg.Connection, database_url: str
) -> None:
    other = await asyncpg.connect(database_url)
    try:
        results = await asyncio.gather(ensure_partitions(conn, DAY), ensure_partitions(other, DAY))
        created = [name for result in results for name in result]
        assert sorted(created) == sorted(every_table_days(DAY - timedelta(1), DAY + timedelta(3)))
    finally:
        await other.close()


async def test_day_boundaries_are_utc_whatever_the_session_time_zone(
    conn: asyncpg.Connection,
) -> None:
    await conn.execute("SET TIME ZONE 'Pacific/Kiritimati'")  # UTC+14
    await ensure_partitions(conn, DAY)
    start = datetime(2026, 6, 1, tzinfo=UTC)
    assert await insert_event(conn, start, "a") == "delivery_event_20260601"
    assert await insert_event(conn, start - timedelta(microseconds=1), "b") == (
        "delivery_event_20260531"
    )
    assert await insert_event(conn, start + timedelta(hours=23, minutes=59), "c") == (
        "delivery_event_20260601"
    )
    assert await insert_event(conn, start + timedelta(days=1), "d") == "delivery_event_20260602"


async def test_far_future_event_waits_in_default_then_moves_to_its_partition(
    conn: asyncpg.Connection,
) -> None:
    await ensure_partitions(conn, DAY)
    future = DAY + timedelta(days=30)
    noon = datetime(future.year, future.month, future.day, 12, tzinfo=UTC)
    assert await insert_event(conn, noon, "future") == "delivery_event_default"
    # The next day's midnight belongs to the next day: it must stay in the default partition.
    assert await insert_event(conn, noon + timedelta(hours=12), "next") == "delivery_event_default"
    assert await insert_event(conn, noon - timedelta(days=400), "past") == "delivery_event_default"

    created = await ensure_partitions(conn, future, ahead_days=0)

    assert created == every_table_days(future - timedelta(1), future)
    assert await where_is(conn, "future") == EVENTS.name(future)
    assert await where_is(conn, "next") == "delivery_event_default"
    assert await where_is(conn, "past") == "delivery_event_default"
    body = await conn.fetchval("SELECT body FROM delivery_event WHERE event_id = 'future'")
    assert json.loads(body) == {"id": "future"}
    # The moved-into partition carries the parent's primary key and indexes.
    with pytest.raises(asyncpg.UniqueViolationError):
        await insert_event(conn, noon, "future")
    indexes = await conn.fetchval(
        "SELECT count(*) FROM pg_indexes WHERE tablename = $1", EVENTS.name(future)
    )
    assert indexes == 2
    assert await insert_event(conn, noon + timedelta(hours=1), "later") == EVENTS.name(future)


async def test_drop_expired_partitions(conn: asyncpg.Connection) -> None:
    today = DAY
    await ensure_partitions(conn, today - timedelta(days=10))  # today-11 … today-7
    await ensure_partitions(conn, today)  # today-1 … today+3
    for offset in (-11, -8, -7, -1, 0):
        day = today + timedelta(days=offset)
        at = datetime(day.year, day.month, day.day, 6, tzinfo=UTC)
        assert await insert_event(conn, at, f"day{offset}") == EVENTS.name(day)
    ancient = datetime(2020, 1, 1, tzinfo=UTC)
    assert await insert_event(conn, ancient, "ancient") == "delivery_event_default"
    far = datetime(2030, 1, 1, tzinfo=UTC)
    assert await insert_event(conn, far, "far") == "delivery_event_default"

    dropped = await drop_expired_partitions(conn, today, retention_days=7)

    assert dropped == every_table_days(today - timedelta(11), today - timedelta(8))
    assert await daily_partitions(conn) == [
        *days(today - timedelta(7), today - timedelta(7)),
        *days(today - timedelta(1), today + timedelta(3)),
    ]
    remaining = {r["event_id"] for r in await conn.fetch("SELECT event_id FROM delivery_event")}
    assert remaining == {"day-7", "day-1", "day0", "far"}
    assert await drop_expired_partitions(conn, today, retention_days=7) == []


async def test_negative_arguments_are_refused(conn: asyncpg.Connection) -> None:
    with pytest.raises(ValueError, match="retention_days"):
        await drop_expired_partitions(conn, DAY, retention_days=-1)
    with pytest.raises(ValueError, match="ahead_days"):
        await ensure_partitions(conn, DAY, ahead_days=-1)


async def test_a_table_in_the_way_of_a_partition_is_refused_by_name(
    conn: asyncpg.Connection,
) -> None:
    await conn.execute(f"CREATE TABLE {EVENTS.name(DAY)} (id int)")  # not a partition
    with pytest.raises(RuntimeError, match=f"{EVENTS.name(DAY)} exists but is not a partition"):
        await ensure_partitions(conn, DAY)
    assert await daily_partitions(conn) == [EVENTS.name(DAY - timedelta(1))]


# Notifications and deliveries, partitioned by their ids' days


async def insert_notification(connection: asyncpg.Connection, made: datetime) -> tuple[str, str]:
    """A notification and one delivery with ids made at ``made``; the partitions they landed
    in."""
    notification_id, delivery_id = new_ids(7, 2, int(made.timestamp() * 1000))
    notification = await connection.fetchval(
        "INSERT INTO notification VALUES ($1, 'p', $2, 't', 'HIGH', 'r', 'en', $3, $3) "
        "RETURNING tableoid::regclass::text",
        notification_id,
        notification_id,
        made,
    )
    delivery = await connection.fetchval(
        "INSERT INTO delivery (id, notification_id, status, updated_at, version) "
        "VALUES ($1, $2, 'QUEUED', $3, 1) RETURNING tableoid::regclass::text",
        delivery_id,
        notification_id,
        made,
    )
    return str(notification), str(delivery)


async def test_notifications_and_deliveries_land_in_their_ids_utc_day(
    conn: asyncpg.Connection,
) -> None:
    await ensure_partitions(conn, DAY)
    midnight = datetime(2026, 6, 1, tzinfo=UTC)
    assert await insert_notification(conn, midnight) == (
        "notification_20260601",
        "delivery_20260601",
    )
    last_of_may = midnight - timedelta(milliseconds=1)
    assert await insert_notification(conn, last_of_may) == (
        "notification_20260531",
        "delivery_20260531",
    )
    assert await insert_notification(conn, midnight + timedelta(days=1)) == (
        "notification_20260602",
        "delivery_20260602",
    )
    far = midnight + timedelta(days=40)
    assert await insert_notification(conn, far) == ("notification_default", "delivery_default")
    created = await ensure_partitions(conn, far.date(), ahead_days=0)
    assert "notification_20260711" in created
    moved = await conn.fetch(
        "SELECT tableoid::regclass::text AS p FROM delivery WHERE id >= $1", first_id_at(far)
    )
    assert [row["p"] for row in moved] == ["delivery_20260711"]


async def test_a_lookup_by_id_reads_one_partition(conn: asyncpg.Connection) -> None:
    await ensure_partitions(conn, DAY)
    made = datetime(2026, 6, 1, 15, tzinfo=UTC)
    notification_id, _ = new_ids(7, 2, int(made.timestamp() * 1000))
    for table in ("notification", "delivery"):
        plan = await conn.fetch(
            f"EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) "
            f"SELECT * FROM {table} WHERE id = $1",
            notification_id,
        )
        lines = "\n".join(row[0] for row in plan)
        # Of six partitions (five days and the default), one is read.
        assert lines.count(f" on {table}_") == 1, lines
        assert f" on {table}_20260601" in lines, lines


async def test_expired_notifications_and_deliveries_are_dropped_with_their_days(
    conn: asyncpg.Connection,
) -> None:
    today = DAY
    await ensure_partitions(conn, today - timedelta(days=10))
    await ensure_partitions(conn, today)
    old = datetime(2026, 5, 22, 6, tzinfo=UTC)  # today - 10
    kept = datetime(2026, 5, 25, 6, tzinfo=UTC)  # today - 7
    ancient = datetime(2020, 1, 1, tzinfo=UTC)
    for made in (old, kept, ancient):
        await insert_notification(conn, made)

    dropped = await drop_expired_partitions(conn, today, retention_days=7)

    assert "notification_20260522" in dropped
    assert "delivery_20260522" in dropped
    for table in ("notification", "delivery"):
        rows = await conn.fetch(f"SELECT tableoid::regclass::text AS p FROM {table}")
        assert [row["p"] for row in rows] == [f"{table}_20260525"]


def test_the_ids_of_an_ids_day_are_its_partitions_bounds() -> None:
    first = datetime(2026, 6, 1, tzinfo=UTC)
    last = first + timedelta(days=1) - timedelta(milliseconds=1)
    low, high = NOTIFICATIONS.bounds(DAY)
    for made in (first, last):
        an_id = new_ids(3, 1, int(made.timestamp() * 1000))[0]
        assert ids_of_the_day_of(an_id) == (low, high)
        assert low <= uuid.UUID(an_id) < high
    assert ids_of_the_day_of(new_ids(3, 1, int(last.timestamp() * 1000) + 1)[0])[0] == high
    # Not a UUIDv7 (a caller's guess): a range all the same, even past the year 9999.
    low, high = ids_of_the_day_of("ffffffff-ffff-4fff-bfff-ffffffffffff")
    assert low < uuid.UUID("ffffffff-ffff-4fff-bfff-ffffffffffff") <= high
