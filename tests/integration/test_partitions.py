"""Daily partitions of the event history on real PostgreSQL: created ahead once, UTC days,
late events moved in, expired ones dropped."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import UTC, date, datetime, timedelta

import asyncpg
import pytest

from projections.database import migrate
from projections.partitions import drop_expired_partitions, ensure_partitions, partition_name
from tests.integration.partition_support import daily_partitions, days, insert_event

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
    assert created == days(DAY - timedelta(1), DAY + timedelta(3))
    assert await ensure_partitions(conn, DAY) == []
    assert await ensure_partitions(conn, DAY + timedelta(1)) == [partition_name(DAY + timedelta(4))]
    assert await daily_partitions(conn) == days(DAY - timedelta(1), DAY + timedelta(4))


async def test_concurrent_partition_creators_both_succeed(
    conn: asyncpg.Connection, database_url: str
) -> None:
    other = await asyncpg.connect(database_url)
    try:
        results = await asyncio.gather(ensure_partitions(conn, DAY), ensure_partitions(other, DAY))
        created = [name for result in results for name in result]
        assert sorted(created) == days(DAY - timedelta(1), DAY + timedelta(3))
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

    assert created == [partition_name(future - timedelta(1)), partition_name(future)]
    assert await where_is(conn, "future") == partition_name(future)
    assert await where_is(conn, "next") == "delivery_event_default"
    assert await where_is(conn, "past") == "delivery_event_default"
    body = await conn.fetchval("SELECT body FROM delivery_event WHERE event_id = 'future'")
    assert json.loads(body) == {"id": "future"}
    # The moved-into partition carries the parent's primary key and indexes.
    with pytest.raises(asyncpg.UniqueViolationError):
        await insert_event(conn, noon, "future")
    indexes = await conn.fetchval(
        "SELECT count(*) FROM pg_indexes WHERE tablename = $1", partition_name(future)
    )
    assert indexes == 2
    assert await insert_event(conn, noon + timedelta(hours=1), "later") == partition_name(future)


async def test_drop_expired_partitions(conn: asyncpg.Connection) -> None:
    today = DAY
    await ensure_partitions(conn, today - timedelta(days=10))  # today-11 … today-7
    await ensure_partitions(conn, today)  # today-1 … today+3
    for offset in (-11, -8, -7, -1, 0):
        day = today + timedelta(days=offset)
        at = datetime(day.year, day.month, day.day, 6, tzinfo=UTC)
        assert await insert_event(conn, at, f"day{offset}") == partition_name(day)
    ancient = datetime(2020, 1, 1, tzinfo=UTC)
    assert await insert_event(conn, ancient, "ancient") == "delivery_event_default"
    far = datetime(2030, 1, 1, tzinfo=UTC)
    assert await insert_event(conn, far, "far") == "delivery_event_default"

    dropped = await drop_expired_partitions(conn, today, retention_days=7)

    assert dropped == days(today - timedelta(11), today - timedelta(8))
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
    await conn.execute(f"CREATE TABLE {partition_name(DAY)} (id int)")  # not a partition
    with pytest.raises(RuntimeError, match=f"{partition_name(DAY)} exists but is not a partition"):
        await ensure_partitions(conn, DAY)
    assert await daily_partitions(conn) == [partition_name(DAY - timedelta(1))]
