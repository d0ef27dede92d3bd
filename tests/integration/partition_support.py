"""The read model's daily partitions, and where an event lands among them."""

from __future__ import annotations

import json
from datetime import date, datetime, timedelta

import asyncpg

from projections.partitions import EVENTS, TABLES, DailyTable


async def daily_partitions(connection: asyncpg.Connection, table: DailyTable = EVENTS) -> list[str]:
    rows = await connection.fetch(
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
        "WHERE i.inhparent = $1::regclass ORDER BY c.relname",
        table.parent,
    )
    return [row["relname"] for row in rows if row["relname"] != table.default]


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


def days(first: date, last: date, table: DailyTable = EVENTS) -> list[str]:
    return [table.name(first + timedelta(n)) for n in range((last - first).days + 1)]


def every_table_days(first: date, last: date) -> list[str]:
    """The partitions of ``first`` … ``last`` of every table, as ``ensure_partitions`` lists
    what it created."""
    return [name for table in TABLES for name in days(first, last, table)]
