"""Small helpers shared by benchmarks that need PostgreSQL or look into the events streams.

- a throwaway database on the local (or ``CLARION_BENCH_DATABASE_URL``'s) server, created as
  ``clarion_bench_<hex>`` and dropped ``WITH (FORCE)`` afterwards;
- row counts of the read model;
- the entries and events of an ``events`` stream, counted by event type.
"""

from __future__ import annotations

import os
import secrets
from collections import Counter
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import asyncpg
import msgspec
from redis.asyncio import Redis

from projections.database import ensure_database, quote_identifier
from streams import codec

# A URL naming a database that exists on the server (the maintenance database by default).
SERVER_URL = os.environ.get(
    "CLARION_BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)
READ_MODEL_TABLES = ("notification", "delivery", "delivery_event", "projection_checkpoint")
SCAN_CHUNK = 10_000


def with_database(url: str, name: str) -> str:
    """``url`` naming database ``name`` instead of its own."""
    parts = urlsplit(url)
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    query = urlencode([(k, v) for k, v in pairs if k not in {"dbname", "database"}])
    return urlunsplit((parts.scheme, parts.netloc, "/" + quote(name, safe=""), query, ""))


@dataclass(frozen=True, slots=True)
class Throwaway:
    """A benchmark's own database: its name and the URL the services connect with."""

    name: str
    url: str
    server_url: str


async def create_database(server_url: str = SERVER_URL) -> Throwaway:
    """Create an empty ``clarion_bench_<hex>`` database (tables come with ``connect``)."""
    name = f"clarion_bench_{secrets.token_hex(6)}"
    url = with_database(server_url, name)
    await ensure_database(url)
    return Throwaway(name, url, server_url)


async def drop_database(database: Throwaway) -> None:
    """Drop the database, disconnecting whoever still uses it."""
    connection = await asyncpg.connect(database.server_url)
    try:
        await connection.execute(
            f"DROP DATABASE IF EXISTS {quote_identifier(database.name)} WITH (FORCE)"
        )
    finally:
        await connection.close()


async def truncate_read_model(pool: asyncpg.Pool) -> None:
    """Empty every read-model table (the schema and partitions stay)."""
    async with pool.acquire() as connection:
        await connection.execute(f"TRUNCATE {', '.join(READ_MODEL_TABLES)}")


async def row_counts(pool: asyncpg.Pool) -> dict[str, Any]:
    """Rows per read-model table, and deliveries per status."""
    async with pool.acquire() as connection:
        counts: dict[str, Any] = {
            table: await connection.fetchval(f"SELECT count(*) FROM {table}")
            for table in READ_MODEL_TABLES
        }
        statuses = await connection.fetch(
            "SELECT status, count(*) AS n FROM delivery GROUP BY status ORDER BY status"
        )
    counts["delivery_by_status"] = {row["status"]: row["n"] for row in statuses}
    return counts


class _Tagged(msgspec.Struct):
    type: str  # the event's tag; every other field is skipped


_tags = msgspec.json.Decoder(list[_Tagged])


@dataclass
class StreamEvents:
    """What an ``events`` stream holds."""

    entries: int = 0
    events: int = 0
    by_type: Counter[str] = field(default_factory=Counter)
    events_per_entry: Counter[int] = field(default_factory=Counter)

    def summary(self) -> dict[str, Any]:
        return {
            "entries": self.entries,
            "events": self.events,
            "events_by_type": dict(self.by_type.most_common()),
            "entries_by_event_count": dict(sorted(self.events_per_entry.items())),
        }


async def stream_events(redis: Redis, stream: str) -> StreamEvents:
    """Count the entries and events of ``stream`` (each entry a JSON array of events)."""
    found = StreamEvents()
    start = "-"
    name = codec.EVENT_FIELD.encode()
    while True:
        chunk: Any = await redis.xrange(stream, start, "+", count=SCAN_CHUNK)
        for _, fields in chunk:
            tags = _tags.decode(fields.get(name, b"[]"))
            found.entries += 1
            found.events += len(tags)
            found.events_per_entry[len(tags)] += 1
            found.by_type.update(tag.type for tag in tags)
        if len(chunk) < SCAN_CHUNK:
            return found
        last = chunk[-1][0]
        start = f"({last.decode() if isinstance(last, bytes) else last}"
