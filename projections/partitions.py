"""Daily partitions of ``delivery_event``: created ahead of time, dropped by retention.

A day's partition ``delivery_event_YYYYMMDD`` holds the events whose ``at`` falls in that
UTC day. Events outside every daily partition land in ``delivery_event_default``; when
their day's partition is created later, they are moved into it in the same transaction.
Creators and droppers serialise on one transaction-scoped advisory lock.
"""

from __future__ import annotations

import hashlib
import re
from datetime import UTC, date, datetime, time, timedelta

import asyncpg

PARENT = "delivery_event"
DEFAULT_PARTITION = "delivery_event_default"
PREFIX = "delivery_event_"
_DAILY = re.compile(r"^delivery_event_(\d{8})$")
# The same derivation as the migration lock key: the first 8 bytes of SHA-256, signed.
PARTITION_LOCK_KEY = int.from_bytes(
    hashlib.sha256(b"clarion.partitions").digest()[:8], "big", signed=True
)


def partition_name(day: date) -> str:
    """``delivery_event_YYYYMMDD`` for ``day``."""
    return f"{PREFIX}{day:%Y%m%d}"


def day_bounds(day: date) -> tuple[datetime, datetime]:
    """The UTC instants where ``day`` starts and the next day starts."""
    start = datetime.combine(day, time(), tzinfo=UTC)
    return start, start + timedelta(days=1)


def _literal(instant: datetime) -> str:
    # An explicit +00 offset: a bare date would be read in the session's TimeZone.
    return f"'{instant:%Y-%m-%d %H:%M:%S}+00'"


def _bounds_clause(day: date) -> str:
    start, end = day_bounds(day)
    return f"FOR VALUES FROM ({_literal(start)}) TO ({_literal(end)})"


async def _partitions(connection: asyncpg.Connection) -> set[str]:
    """Names of the tables attached to ``delivery_event`` as partitions."""
    rows = await connection.fetch(
        """
        SELECT child.relname
        FROM pg_inherits AS link
        JOIN pg_class AS child ON child.oid = link.inhrelid
        WHERE link.inhparent = $1::regclass
        """,
        PARENT,
    )
    return {str(row["relname"]) for row in rows}


async def ensure_partitions(
    connection: asyncpg.Connection, today: date, ahead_days: int = 3
) -> list[str]:
    """Ensure the partitions for ``today`` - 1 ... ``today`` + ``ahead_days`` exist.

    Returns the names of the partitions this call created.
    """
    if ahead_days < 0:
        raise ValueError(f"ahead_days must not be negative, got {ahead_days}")
    days = [today + timedelta(days=offset) for offset in range(-1, ahead_days + 1)]
    existing = await _partitions(connection)
    created: list[str] = []
    for day in days:
        if partition_name(day) not in existing and await _ensure_partition(connection, day):
            created.append(partition_name(day))
    return created


async def _ensure_partition(connection: asyncpg.Connection, day: date) -> bool:
    """Create ``day``'s partition unless it exists; True when this call created it."""
    name = partition_name(day)
    start, end = day_bounds(day)
    async with connection.transaction():
        await connection.execute("SELECT pg_advisory_xact_lock($1)", PARTITION_LOCK_KEY)
        if name in await _partitions(connection):
            return False  # another process created it while this one waited
        if await connection.fetchval("SELECT to_regclass($1) IS NOT NULL", name):
            raise RuntimeError(f"table {name} exists but is not a partition of {PARENT}")
        stranded = await connection.fetchval(
            "SELECT EXISTS (SELECT 1 FROM delivery_event_default WHERE at >= $1 AND at < $2)",
            start,
            end,
        )
        if not stranded:
            try:
                async with connection.transaction():  # a savepoint, for the fallback below
                    await connection.execute(
                        f"CREATE TABLE IF NOT EXISTS {name} PARTITION OF {PARENT} "
                        f"{_bounds_clause(day)}"
                    )
            except asyncpg.CheckViolationError:
                pass  # an event for this day reached the default partition meanwhile
            else:
                return True
        await _move_and_attach(connection, day)
        return True


async def _move_and_attach(connection: asyncpg.Connection, day: date) -> None:
    """Create ``day``'s table standalone, move its rows out of the default partition, attach it.

    Runs inside the caller's transaction. The default partition is locked first so that no
    event for this day can slip into it between the move and the attach.
    """
    name = partition_name(day)
    start, end = day_bounds(day)
    await connection.execute(f"LOCK TABLE {DEFAULT_PARTITION} IN ACCESS EXCLUSIVE MODE")
    rows = await connection.fetch(
        """
        SELECT attname FROM pg_attribute
        WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped
        ORDER BY attnum
        """,
        PARENT,
    )
    columns = ", ".join(_quote(str(row["attname"])) for row in rows)
    await connection.execute(
        f"CREATE TABLE {name} (LIKE {PARENT} INCLUDING DEFAULTS INCLUDING CONSTRAINTS)"
    )
    # Identifiers only: a name made from a date, and quoted column names from the catalog.
    move = (
        f"WITH moved AS (DELETE FROM {DEFAULT_PARTITION} WHERE at >= $1 AND at < $2 "  # noqa: S608
        f"RETURNING {columns}) INSERT INTO {name} ({columns}) SELECT {columns} FROM moved"
    )
    await connection.execute(move, start, end)
    # A constraint equal to the partition bound lets ATTACH skip its validation scan.
    await connection.execute(
        f"ALTER TABLE {name} ADD CONSTRAINT {name}_bound "
        f"CHECK (at IS NOT NULL AND at >= {_literal(start)} AND at < {_literal(end)})"
    )
    await connection.execute(f"ALTER TABLE {PARENT} ATTACH PARTITION {name} {_bounds_clause(day)}")
    await connection.execute(f"ALTER TABLE {name} DROP CONSTRAINT {name}_bound")


async def drop_expired_partitions(
    connection: asyncpg.Connection, today: date, retention_days: int
) -> list[str]:
    """Drop the daily partitions wholly older than ``today`` - ``retention_days``.

    Expired rows in the default partition are deleted too. Returns the dropped names, oldest
    first.
    """
    if retention_days < 0:
        raise ValueError(f"retention_days must not be negative, got {retention_days}")
    cutoff = today - timedelta(days=retention_days)
    dropped: list[str] = []
    async with connection.transaction():
        await connection.execute("SELECT pg_advisory_xact_lock($1)", PARTITION_LOCK_KEY)
        for name in sorted(await _partitions(connection)):
            day = _day_of(name)
            if day is not None and day < cutoff:
                await connection.execute(f"DROP TABLE {name}")
                dropped.append(name)
        await connection.execute(
            "DELETE FROM delivery_event_default WHERE at < $1", day_bounds(cutoff)[0]
        )
    return dropped


def _day_of(name: str) -> date | None:
    match = _DAILY.match(name)
    if match is None:
        return None
    try:
        return datetime.strptime(match.group(1), "%Y%m%d").replace(tzinfo=UTC).date()
    except ValueError:
        return None


def _quote(identifier: str) -> str:
    return '"' + identifier.replace('"', '""') + '"'
