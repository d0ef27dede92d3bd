"""Daily partitions of the read model's growing tables: created ahead, dropped by retention.

Three tables grow with every notification, and each is partitioned by UTC day, the partition
``<table>_YYYYMMDD`` holding one day:

- ``delivery_event`` (every event) by its time, ``at``;
- ``notification`` and ``delivery`` by ``id``. An id is a UUIDv7 whose first 48 bits are the
  millisecond it was made (``streams.core.ids``), so a day is a range of ids and a lookup by id
  reads one partition. A notification's deliveries get their ids in the same millisecond as
  it does, so they share its day.

Rows outside every daily partition land in ``<table>_default``; when their day's partition
is created later, they are moved into it in the same transaction. Creators and droppers
serialise on one transaction-scoped advisory lock.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

import asyncpg

# The same derivation as the migration lock key: the first 8 bytes of SHA-256, signed.
PARTITION_LOCK_KEY = int.from_bytes(
    hashlib.sha256(b"clarion.partitions").digest()[:8], "big", signed=True
)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_DAY_MS = 86_400_000
_MAX_UUID = (1 << 128) - 1


def day_bounds(day: date) -> tuple[datetime, datetime]:
    """The UTC instants where ``day`` starts and the next day starts."""
    start = datetime.combine(day, time(), tzinfo=UTC)
    return start, start + timedelta(days=1)


def first_id_at(instant: datetime) -> uuid.UUID:
    """The smallest UUIDv7 made at or after ``instant``: its millisecond, then zeros."""
    milliseconds = (instant - _EPOCH) // timedelta(milliseconds=1)
    return uuid.UUID(int=milliseconds << 80)


def ids_of_the_day_of(an_id: str | uuid.UUID) -> tuple[uuid.UUID, uuid.UUID]:
    """The range of ids made on the UTC day ``an_id`` was made: the bounds of its partition.

    A notification's deliveries are in it, so a query by ``notification_id`` that adds
    ``id >= low AND id < high`` reads one partition of ``delivery`` instead of every one.
    """
    milliseconds = uuid.UUID(str(an_id)).int >> 80
    start = milliseconds - milliseconds % _DAY_MS  # a UTC day is 86,400,000 Unix ms
    # Integers, not datetimes: an id of another kind may name a millisecond past year 9999.
    end = min((start + _DAY_MS) << 80, _MAX_UUID)
    return uuid.UUID(int=start << 80), uuid.UUID(int=end)


def _literal(value: datetime | uuid.UUID) -> str:
    """A bound's value (a time or an id) as an SQL literal."""
    if isinstance(value, datetime):
        # An explicit +00 offset: a bare date would be read in the session's TimeZone.
        return f"'{value:%Y-%m-%d %H:%M:%S}+00'"
    return f"'{value}'"


def _same(instant: datetime) -> datetime:
    return instant


@dataclass(frozen=True, slots=True)
class DailyTable:
    """A table partitioned by UTC day on one column."""

    parent: str
    column: str
    # The column's value where an instant's range starts (a time or an id).
    value_at: Callable[[datetime], Any]

    @property
    def default(self) -> str:
        """The partition of rows outside every daily one."""
        return f"{self.parent}_default"

    def name(self, day: date) -> str:
        """``<parent>_YYYYMMDD`` for ``day``."""
        return f"{self.parent}_{day:%Y%m%d}"

    def day_of(self, name: str) -> date | None:
        """The day a partition's name stands for; None for any other name."""
        digits = name.removeprefix(f"{self.parent}_")
        if len(digits) != 8 or not digits.isascii() or not digits.isdigit():
            return None  # not a day's name (the default partition, another parent's)
        try:
            return datetime.strptime(digits, "%Y%m%d").replace(tzinfo=UTC).date()
        except ValueError:
            return None

    def bounds(self, day: date) -> tuple[Any, Any]:
        """The column's values where ``day`` starts and where the next day starts."""
        start, end = day_bounds(day)
        return self.value_at(start), self.value_at(end)

    def bounds_clause(self, day: date) -> str:
        low, high = self.bounds(day)
        return f"FOR VALUES FROM ({_literal(low)}) TO ({_literal(high)})"


EVENTS = DailyTable("delivery_event", "at", _same)
NOTIFICATIONS = DailyTable("notification", "id", first_id_at)
DELIVERIES = DailyTable("delivery", "id", first_id_at)
TABLES = (EVENTS, NOTIFICATIONS, DELIVERIES)


async def partitions_of(connection: asyncpg.Connection, parent: str) -> set[str]:
    """Names of the tables attached to ``parent`` as partitions."""
    rows = await connection.fetch(
        """
        SELECT child.relname
        FROM pg_inherits AS link
        JOIN pg_class AS child ON child.oid = link.inhrelid
        WHERE link.inhparent = $1::regclass
        """,
        parent,
    )
    return {str(row["relname"]) for row in rows}


async def ensure_partitions(
    connection: asyncpg.Connection, today: date, ahead_days: int = 3
) -> list[str]:
    """Ensure every table's partitions for ``today`` - 1 ... ``today`` + ``ahead_days`` exist.

    Returns the names of the partitions this call created, table by table, oldest first.
    """
    if ahead_days < 0:
        raise ValueError(f"ahead_days must not be negative, got {ahead_days}")
    days = [today + timedelta(days=offset) for offset in range(-1, ahead_days + 1)]
    created: list[str] = []
    for table in TABLES:
        existing = await partitions_of(connection, table.parent)
        for day in days:
            if table.name(day) not in existing and await _ensure_partition(connection, table, day):
                created.append(table.name(day))
    return created


async def _ensure_partition(connection: asyncpg.Connection, table: DailyTable, day: date) -> bool:
    """Create ``day``'s partition unless it exists; True when this call created it."""
    name = table.name(day)
    start, end = table.bounds(day)
    async with connection.transaction():
        await connection.execute("SELECT pg_advisory_xact_lock($1)", PARTITION_LOCK_KEY)
        if name in await partitions_of(connection, table.parent):
            return False  # another process created it while this one waited
        if await connection.fetchval("SELECT to_regclass($1) IS NOT NULL", name):
            raise RuntimeError(f"table {name} exists but is not a partition of {table.parent}")
        # Names and columns are constants of this module, not input.
        stranded = await connection.fetchval(
            f"SELECT EXISTS (SELECT 1 FROM {table.default} "  # noqa: S608
            f"WHERE {table.column} >= $1 AND {table.column} < $2)",
            start,
            end,
        )
        if not stranded:
            try:
                async with connection.transaction():  # a savepoint, for the fallback below
                    await connection.execute(
                        f"CREATE TABLE IF NOT EXISTS {name} PARTITION OF {table.parent} "
                        f"{table.bounds_clause(day)}"
                    )
            except asyncpg.CheckViolationError:
                pass  # a row for this day reached the default partition meanwhile
            except asyncpg.InvalidObjectDefinitionError:
                # It would overlap another partition: the day is in the range of the rows
                # that were there before the table was partitioned (migration 006).
                return False
            else:
                return True
        await _move_and_attach(connection, table, day)
        return True


async def _move_and_attach(connection: asyncpg.Connection, table: DailyTable, day: date) -> None:
    """Create ``day``'s table standalone, move its rows out of the default partition, attach it.

    Runs inside the caller's transaction. The default partition is locked first so that no
    row for this day can slip into it between the move and the attach.
    """
    name, parent, column = table.name(day), table.parent, table.column
    low, high = table.bounds(day)
    await connection.execute(f"LOCK TABLE {table.default} IN ACCESS EXCLUSIVE MODE")
    rows = await connection.fetch(
        """
        SELECT attname FROM pg_attribute
        WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped
        ORDER BY attnum
        """,
        parent,
    )
    columns = ", ".join(_quote(str(row["attname"])) for row in rows)
    await connection.execute(
        f"CREATE TABLE {name} (LIKE {parent} INCLUDING DEFAULTS INCLUDING CONSTRAINTS)"
    )
    # Identifiers only: a name made from a date, and quoted column names from the catalog.
    move = (
        f"WITH moved AS (DELETE FROM {table.default} "  # noqa: S608
        f"WHERE {column} >= $1 AND {column} < $2 "
        f"RETURNING {columns}) INSERT INTO {name} ({columns}) SELECT {columns} FROM moved"
    )
    await connection.execute(move, low, high)
    # A constraint equal to the partition bound lets ATTACH skip its validation scan.
    await connection.execute(
        f"ALTER TABLE {name} ADD CONSTRAINT {name}_bound CHECK ({column} IS NOT NULL AND "
        f"{column} >= {_literal(low)} AND {column} < {_literal(high)})"
    )
    await connection.execute(
        f"ALTER TABLE {parent} ATTACH PARTITION {name} {table.bounds_clause(day)}"
    )
    await connection.execute(f"ALTER TABLE {name} DROP CONSTRAINT {name}_bound")


async def drop_expired_partitions(
    connection: asyncpg.Connection, today: date, retention_days: int
) -> list[str]:
    """Drop every table's daily partitions wholly older than ``today`` - ``retention_days``.

    Expired rows in the default partitions are deleted too. Returns the dropped names, table
    by table, oldest first.
    """
    if retention_days < 0:
        raise ValueError(f"retention_days must not be negative, got {retention_days}")
    cutoff = today - timedelta(days=retention_days)
    dropped: list[str] = []
    async with connection.transaction():
        await connection.execute("SELECT pg_advisory_xact_lock($1)", PARTITION_LOCK_KEY)
        for table in TABLES:
            for name in sorted(await partitions_of(connection, table.parent)):
                day = table.day_of(name)
                if day is not None and day < cutoff:
                    await connection.execute(f"DROP TABLE {name}")
                    dropped.append(name)
            await connection.execute(
                f"DELETE FROM {table.default} WHERE {table.column} < $1",  # noqa: S608
                table.bounds(cutoff)[0],
            )
    return dropped


def _quote(identifier: str) -> str:
    return '"' + identifier.replace('"', '""') + '"'
