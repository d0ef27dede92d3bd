"""The read-model database on real PostgreSQL: creation, migrations, daily partitions."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import UTC, date, datetime, timedelta

import asyncpg
import pytest

from projections import database
from projections.database import (
    MIGRATION_LOCK_KEY,
    DatabaseNotReady,
    Migration,
    connect,
    ensure_database,
    load_migrations,
    migrate,
)
from projections.partitions import drop_expired_partitions, ensure_partitions, partition_name
from tests.pg import TEST_SERVER_URL, drop_database, throwaway_database, throwaway_name
from tests.pg import with_database as url_for
from tests.servers import free_port

DAY = date(2026, 6, 1)


@pytest.fixture
async def database_url() -> AsyncIterator[str]:
    async with throwaway_database() as url:
        yield url


@pytest.fixture
async def conn(database_url: str) -> AsyncIterator[asyncpg.Connection]:
    """A connection to a fresh, migrated database (no daily partitions yet)."""
    connection = await asyncpg.connect(database_url)
    await migrate(connection)
    yield connection
    await connection.close()


async def database_exists(name: str) -> bool:
    server = await asyncpg.connect(TEST_SERVER_URL)
    try:
        return bool(await server.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", name))
    finally:
        await server.close()


async def daily_partitions(connection: asyncpg.Connection) -> list[str]:
    rows = await connection.fetch(
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
        "WHERE i.inhparent = 'delivery_event'::regclass ORDER BY c.relname"
    )
    return [row["relname"] for row in rows if row["relname"] != "delivery_event_default"]


async def insert_event(connection: asyncpg.Connection, at: datetime, event_id: str) -> str:
    """Insert one event; return the partition it landed in."""
    return str(
        await connection.fetchval(
            "INSERT INTO delivery_event (event_id, at, type, body) VALUES ($1, $2, 'sent', $3) "
            "RETURNING tableoid::regclass::text",
            event_id,
            at,
            json.dumps({"id": event_id}),
        )
    )


async def where_is(connection: asyncpg.Connection, event_id: str) -> str | None:
    value = await connection.fetchval(
        "SELECT tableoid::regclass::text FROM delivery_event WHERE event_id = $1", event_id
    )
    return None if value is None else str(value)


def days(first: date, last: date) -> list[str]:
    return [partition_name(first + timedelta(n)) for n in range((last - first).days + 1)]


# Creating the database


async def test_missing_database_is_created_with_a_quoted_name() -> None:
    name = f'{throwaway_name()}_Odd "Name"'  # needs quoting: capitals, space, quotes
    url = url_for(TEST_SERVER_URL, name)
    assert not await database_exists(name)
    try:
        await ensure_database(url)
        assert await database_exists(name)
        await ensure_database(url)  # exists now: nothing to do
        connection = await asyncpg.connect(url)
        assert await connection.fetchval("SELECT current_database()") == name
        await connection.close()
    finally:
        await drop_database(name)


async def test_concurrent_creators_all_succeed() -> None:
    name = throwaway_name()
    url = url_for(TEST_SERVER_URL, name)
    try:
        await asyncio.gather(*(ensure_database(url) for _ in range(6)))
        assert await database_exists(name)
    finally:
        await drop_database(name)


async def test_unreachable_server_names_the_url_without_its_password() -> None:
    port = free_port()
    url = f"postgresql://clarion:s3cret-pw@127.0.0.1:{port}/clarion"
    for attempt in (ensure_database, connect):
        with pytest.raises(DatabaseNotReady) as refused:
            await attempt(url)
        message = str(refused.value)
        assert f"postgresql://clarion@127.0.0.1:{port}/clarion" in message
        assert "s3cret-pw" not in message
        assert "not reachable" in message


async def test_password_in_query_is_not_shown_either() -> None:
    port = free_port()
    url = f"postgresql://clarion@127.0.0.1:{port}/clarion?password=s3cret-pw&sslmode=disable"
    with pytest.raises(DatabaseNotReady) as refused:
        await ensure_database(url)
    assert "s3cret-pw" not in str(refused.value)
    assert f"127.0.0.1:{port}/clarion?sslmode=disable" in str(refused.value)


# Migrations


def test_migrations_ship_with_the_package() -> None:
    migrations = load_migrations()
    assert [(m.version, m.name) for m in migrations][:1] == [(1, "read_model")]
    assert "CREATE TABLE delivery_event" in migrations[0].sql


async def test_migrations_apply_once(database_url: str) -> None:
    connection = await asyncpg.connect(database_url)
    try:
        versions = [m.version for m in load_migrations()]
        assert await migrate(connection) == versions
        assert await migrate(connection) == []
        rows = await connection.fetch("SELECT version, name, applied_at FROM schema_migration")
        assert [(r["version"], r["name"]) for r in rows][:1] == [(1, "read_model")]
        assert all(r["applied_at"] is not None for r in rows)
        tables = await connection.fetch(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1"
        )
        assert {"notification", "delivery", "projection_checkpoint"} <= {
            t["tablename"] for t in tables
        }
    finally:
        await connection.close()


async def test_migrate_accepts_a_pool(database_url: str) -> None:
    async with asyncpg.create_pool(database_url, min_size=1, max_size=2) as pool:
        assert await migrate(pool) == [1]
        assert await migrate(pool) == []


async def test_concurrent_migrations_apply_the_schema_once(database_url: str) -> None:
    connections = [await asyncpg.connect(database_url) for _ in range(3)]
    try:
        results = await asyncio.gather(*(migrate(c) for c in connections))
        assert sorted(results) == [[], [], [1]]
        count = await connections[0].fetchval("SELECT count(*) FROM schema_migration")
        assert count == 1
    finally:
        for connection in connections:
            await connection.close()


async def test_migrate_waits_for_the_advisory_lock(database_url: str) -> None:
    holder = await asyncpg.connect(database_url)
    starter = await asyncpg.connect(database_url)
    try:
        await holder.execute("SELECT pg_advisory_lock($1)", MIGRATION_LOCK_KEY)
        task = asyncio.create_task(migrate(starter))
        await asyncio.sleep(0.3)
        assert not task.done()  # blocked behind the holder
        await holder.execute("SELECT pg_advisory_unlock($1)", MIGRATION_LOCK_KEY)
        assert await asyncio.wait_for(task, 10) == [1]
    finally:
        await holder.close()
        await starter.close()


async def test_a_failing_migration_rolls_back_and_releases_the_lock(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = load_migrations()
    broken = Migration(2, "broken", "CREATE TABLE half_done (id int); SELECT no_such_function();")
    monkeypatch.setattr(database, "load_migrations", lambda: [*real, broken])
    first = await asyncpg.connect(database_url)
    second = await asyncpg.connect(database_url)
    try:
        with pytest.raises(asyncpg.UndefinedFunctionError):
            await migrate(first)
        assert await first.fetchval("SELECT array_agg(version) FROM schema_migration") == [1]
        assert await first.fetchval("SELECT to_regclass('half_done')") is None
        monkeypatch.setattr(database, "load_migrations", lambda: real)
        # The lock was released: another starter is not blocked.
        assert await asyncio.wait_for(migrate(second), 10) == []
    finally:
        await first.close()
        await second.close()


# Partitions


async def test_connect_prepares_everything_and_routes_todays_events(database_url: str) -> None:
    pool = await connect(database_url, min_size=1, max_size=2)
    try:
        async with pool.acquire() as connection:
            today = datetime.now(UTC).date()
            assert await daily_partitions(connection) == days(
                today - timedelta(1), today + timedelta(3)
            )
            landed = await insert_event(connection, datetime.now(UTC), "0-1-0")
            assert landed == partition_name(datetime.now(UTC).date())
            assert await connection.fetchval("SELECT count(*) FROM schema_migration") == 1
    finally:
        await pool.close()
    # Starting again migrates and creates nothing.
    again = await connect(database_url, min_size=1, max_size=1)
    await again.close()


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
