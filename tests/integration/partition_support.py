"""The daily partitions of the event history, and where an event lands among them."""

from __future__ import annotations

import json
from datetime import date, datetime, timedelta

import asyncpg

from projections.partitions import partition_name


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


def days(first: date, last: date) -> list[str]:
    return [partition_name(first + timedelta(n)) for n in range((last - first).days + 1)]
