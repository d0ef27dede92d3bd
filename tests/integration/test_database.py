"""The read-model database on real PostgreSQL: creation, migrations, and a connection pool
that finds everything prepared."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

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
from projections.partitions import (
    DELIVERIES,
    EVENTS,
    NOTIFICATIONS,
    drop_expired_partitions,
    ensure_partitions,
)
from streams.core.ids import new_ids
from tests.integration.partition_support import daily_partitions, days, insert_event
from tests.pg import TEST_SERVER_URL, drop_database, throwaway_database, throwaway_name
from tests.pg import with_database as url_for
from tests.servers import free_port


@pytest.fixture
async def database_url() -> AsyncIterator[str]:
    async with throwaway_database() as url:
        yield url


async def database_exists(name: str) -> bool:
    server = await asyncpg.connect(TEST_SERVER_URL)
    try:
        return bool(await server.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", name))
    finally:
        await server.close()


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


# Every shipped migration's version, in order.
VERSIONS = [migration.version for migration in load_migrations()]


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


async def test_rows_are_kept_when_notification_and_delivery_become_partitioned(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    connection = await asyncpg.connect(database_url)
    try:
        earlier = [m for m in load_migrations() if m.version < 6]
        monkeypatch.setattr(database, "load_migrations", lambda: earlier)
        await migrate(connection)
        now = datetime.now(UTC)
        made = {}  # age in days -> (notification id, delivery id)
        for age in (0, 1, 3):
            at = now - timedelta(days=age)
            made[age] = new_ids(1, 2, int(at.timestamp() * 1000))
            await connection.execute(
                "INSERT INTO notification VALUES ($1, 'p', $2, 't', 'HIGH', 'r', 'en', $3, $3)",
                made[age][0],
                f"k{age}",
                at,
            )
            await connection.execute(
                "INSERT INTO delivery (id, notification_id, status, updated_at, version) "
                "VALUES ($1, $2, 'FAILED', $3, 1)",
                made[age][1],
                made[age][0],
                at,
            )
        monkeypatch.undo()

        assert await migrate(connection) == [v for v in VERSIONS if v >= 6]
        await ensure_partitions(connection, now.date())

        for table, column in (("notification", 0), ("delivery", 1)):
            rows = await connection.fetch(
                f"SELECT id::text, tableoid::regclass::text AS p FROM {table}"
            )
            where = {row["id"]: row["p"] for row in rows}
            # Today's and yesterday's rows moved into their days' partitions; the old table
            # holds the older ones as one partition, named after its last day (for retention).
            assert where == {
                made[0][column]: f"{table}_{now:%Y%m%d}",
                made[1][column]: f"{table}_{now - timedelta(days=1):%Y%m%d}",
                made[3][column]: f"{table}_{now - timedelta(days=2):%Y%m%d}",
            }
        failed = await connection.fetch(
            "SELECT d.id::text FROM delivery d JOIN notification n ON n.id = d.notification_id "
            "WHERE d.status = 'FAILED' ORDER BY d.updated_at DESC, d.id"
        )
        assert [row["id"] for row in failed] == [made[age][1] for age in (0, 1, 3)]
        # A day inside the old table's range is not made again, whoever asks for it.
        assert await ensure_partitions(connection, now.date() - timedelta(days=5)) == [
            f"delivery_event_{now - timedelta(days=days):%Y%m%d}" for days in (6, 5, 4, 3, 2)
        ]
        # It leaves whole once its last day has passed the retention.
        dropped = await drop_expired_partitions(connection, now.date(), retention_days=1)
        assert f"notification_{now - timedelta(days=2):%Y%m%d}" in dropped
        assert f"delivery_{now - timedelta(days=2):%Y%m%d}" in dropped
    finally:
        await connection.close()


async def test_rows_of_every_partition_are_kept_when_their_words_become_checked(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    connection = await asyncpg.connect(database_url)
    try:
        earlier = [m for m in load_migrations() if m.version < 7]
        monkeypatch.setattr(database, "load_migrations", lambda: earlier)
        await migrate(connection)
        now = datetime.now(UTC)
        await ensure_partitions(connection, now.date())
        for age, (status, channel, priority) in enumerate(
            [("SENT", "EMAIL", "HIGH"), ("READ", "IN_APP", "LOW"), ("FAILED", None, None)]
        ):
            at = now - timedelta(days=age)
            notification_id, delivery_id = new_ids(1, 2, int(at.timestamp() * 1000))
            await connection.execute(
                "INSERT INTO notification VALUES ($1, 'p', $2, 't', 'NORMAL', 'r', 'en', $3, $3)",
                notification_id,
                f"k{age}",
                at,
            )
            await connection.execute(
                "INSERT INTO delivery (id, notification_id, status, channel, priority, "
                "updated_at, version) VALUES ($1, $2, $3, $4, $5, $6, 1)",
                delivery_id,
                notification_id,
                status,
                channel,
                priority,
                at,
            )
        monkeypatch.undo()

        assert await migrate(connection) == [7, 8, 9, 10, 11, 12]
        assert await connection.fetchval("SELECT count(*) FROM delivery") == 3
        # Each row got its notification's recipient (008), in every partition.
        recipients = await connection.fetch("SELECT DISTINCT recipient_id FROM delivery")
        assert [row[0] for row in recipients] == ["r"]
        # A word no enum has is refused, in whichever partition the row would go.
        notification_id, delivery_id = new_ids(1, 2)
        for status, channel, refused_by in (
            ("ACCEPTED", "SMS", "delivery_status_known"),
            ("SENT", "FAX", "delivery_channel_known"),
        ):
            with pytest.raises(asyncpg.CheckViolationError, match=refused_by):
                await connection.execute(
                    "INSERT INTO delivery (id, notification_id, status, channel, updated_at, "
                    "version) VALUES ($1, $2, $3, $4, now(), 1)",
                    delivery_id,
                    notification_id,
                    status,
                    channel,
                )
    finally:
        await connection.close()


async def test_migrate_accepts_a_pool(database_url: str) -> None:
    async with asyncpg.create_pool(database_url, min_size=1, max_size=2) as pool:
        assert await migrate(pool) == VERSIONS
        assert await migrate(pool) == []


async def test_concurrent_migrations_apply_the_schema_once(database_url: str) -> None:
    connections = [await asyncpg.connect(database_url) for _ in range(3)]
    try:
        results = await asyncio.gather(*(migrate(c) for c in connections))
        assert sorted(results) == [[], [], VERSIONS]
        count = await connections[0].fetchval("SELECT count(*) FROM schema_migration")
        assert count == len(VERSIONS)
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
        assert await asyncio.wait_for(task, 10) == VERSIONS
    finally:
        await holder.close()
        await starter.close()


async def test_a_failing_migration_rolls_back_and_releases_the_lock(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = load_migrations()
    broken = Migration(
        len(real) + 1, "broken", "CREATE TABLE half_done (id int); SELECT no_such_function();"
    )
    monkeypatch.setattr(database, "load_migrations", lambda: [*real, broken])
    first = await asyncpg.connect(database_url)
    second = await asyncpg.connect(database_url)
    try:
        with pytest.raises(asyncpg.UndefinedFunctionError):
            await migrate(first)
        applied = await first.fetchval(
            "SELECT array_agg(version ORDER BY version) FROM schema_migration"
        )
        assert applied == VERSIONS
        assert await first.fetchval("SELECT to_regclass('half_done')") is None
        monkeypatch.setattr(database, "load_migrations", lambda: real)
        # The lock was released: another starter is not blocked.
        assert await asyncio.wait_for(migrate(second), 10) == []
    finally:
        await first.close()
        await second.close()


# Connecting


async def test_connect_prepares_everything_and_routes_todays_events(database_url: str) -> None:
    pool = await connect(database_url, min_size=1, max_size=2)
    try:
        async with pool.acquire() as connection:
            today = datetime.now(UTC).date()
            for table in (EVENTS, NOTIFICATIONS, DELIVERIES):
                assert await daily_partitions(connection, table) == days(
                    today - timedelta(1), today + timedelta(3), table
                )
            landed = await insert_event(connection, datetime.now(UTC), "0-1-0")
            assert landed == EVENTS.name(datetime.now(UTC).date())
            assert await connection.fetchval("SELECT count(*) FROM schema_migration") == len(
                VERSIONS
            )
    finally:
        await pool.close()
    # Starting again migrates and creates nothing.
    again = await connect(database_url, min_size=1, max_size=1)
    await again.close()
