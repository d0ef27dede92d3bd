"""Rebuild the read model from the event history: PostgreSQL's, plus what Redis still holds.

The source, shard by shard in stream order: every event in ``delivery_event``, then the
``events`` entries Redis holds beyond the newest one PostgreSQL has (read with XRANGE, so no
consumer group is touched; they are added to ``delivery_event`` too). Rows are made and
written by the projector's own code, so a rebuild and the live projector cannot disagree.

Safe to run against a live system:

- ``notification`` and ``delivery`` are built afresh in the schema ``clarion_rebuild`` and
  swapped in by one transaction at the end. Until then readers see the old tables, after it
  the new ones; a rebuild that fails or is refused leaves the old ones untouched.
- For its whole duration the live projector is paused: a transaction holds the old tables in
  EXCLUSIVE mode, which lets reads through but makes the projector's next batch wait.
  Ingest and delivery never wait for the projector; what arrives meanwhile stays in Redis
  (retention keeps every entry the projector has not acknowledged) and is projected into
  the new tables after the swap.
- No history partition is created or dropped meanwhile: the partition lock is held.

History partitions already dropped by retention are gone: notifications whose every event
was in them are not in the rebuilt tables. ``RebuildSummary.lost`` counts them, and the
caller's ``confirm`` decides whether to swap anyway.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

import asyncpg
import msgspec
import structlog
from redis.asyncio import Redis

from projections.database import advisory_key
from projections.inbox_rows import redacted_inbox_message
from projections.partitions import PARTITION_LOCK_KEY
from projections.rebuild_schema import SCHEMA, RebuildError, create_indexes, create_tables
from projections.rows import Rows, rows_of, write_rows
from streams.core import codec
from streams.core.keys import KeySpace

log = structlog.get_logger(__name__)

BATCH = 2000  # events (history) or entries (Redis) per write transaction
REBUILD_LOCK_KEY = advisory_key("clarion.rebuild")

# delivery_event in stream order: shard, entry id (milliseconds, sequence), index in entry.
_HISTORY = """
SELECT event_id, body::text AS body FROM delivery_event
ORDER BY split_part(event_id, '-', 1)::integer, split_part(event_id, '-', 2)::bigint,
         split_part(event_id, '-', 3)::bigint, split_part(event_id, '-', 4)::integer
"""


# The old tables (by the default search path) against the new ones; SCHEMA is a constant.
_COUNTS = f"""
SELECT (SELECT count(*) FROM notification) AS notifications_before,
       (SELECT count(*) FROM {SCHEMA}.notification) AS notifications_after,
       (SELECT count(*) FROM delivery) AS deliveries_before,
       (SELECT count(*) FROM {SCHEMA}.delivery) AS deliveries_after,
       (SELECT count(*) FROM notification AS old WHERE NOT EXISTS
           (SELECT 1 FROM {SCHEMA}.notification AS new WHERE new.id = old.id)) AS lost
"""  # noqa: S608


# The rebuild's tables, quoted, parents first (SCHEMA is a constant).
_NEW_TABLES = f"""
SELECT quote_ident(relname) FROM pg_class
WHERE relnamespace = '{SCHEMA}'::regnamespace AND relkind IN ('r', 'p')
ORDER BY relkind DESC, relname
"""  # noqa: S608


class Progress(Protocol):
    """Told how far a rebuild is: ``phase`` starts with a ``total`` (an upper bound for
    ``redis``), then ``advance`` is called after every written batch."""

    def phase(self, name: str, total: int) -> None: ...

    def advance(self, count: int) -> None: ...


@dataclass(frozen=True, slots=True)
class RebuildSummary:
    """What a rebuild found and built, before the swap."""

    history_events: int
    oldest_event: datetime | None
    redis_entries: int
    # History events that no longer decode (logged; undecodable Redis entries are logged
    # by the projector's code).
    undecodable_events: int
    # Inbox messages whose text an erasure removed (``projections.inbox_rows``): expected,
    # so only counted; their delivery's row is rebuilt from them all the same.
    redacted_events: int
    notifications_before: int
    notifications_after: int
    deliveries_before: int
    deliveries_after: int
    # Notifications of the old tables with no event left to rebuild them from.
    lost: int
    swapped: bool = False


async def rebuild(
    database_url: str,
    redis: Redis,
    keys: KeySpace,
    *,
    progress: Progress | None = None,
    confirm: Callable[[RebuildSummary], bool] = lambda summary: True,
) -> RebuildSummary:
    """Rebuild ``notification`` and ``delivery`` and swap them in if ``confirm`` agrees."""
    guard = await asyncpg.connect(database_url)
    try:
        async with guard.transaction():
            if not await guard.fetchval("SELECT pg_try_advisory_xact_lock($1)", REBUILD_LOCK_KEY):
                raise RebuildError("another projection rebuild is running")
            # Waits for a projector batch in flight, then holds the projector off.
            await guard.execute("LOCK TABLE notification, delivery IN EXCLUSIVE MODE")
            await guard.execute("SELECT pg_advisory_xact_lock($1)", PARTITION_LOCK_KEY)
            live_schema: str = await guard.fetchval(
                "SELECT relnamespace::regnamespace::text FROM pg_class "
                "WHERE oid = 'notification'::regclass"
            )
            history, entries = await _build(database_url, redis, keys, live_schema, progress)
            counts = await guard.fetchrow(_COUNTS)
            summary = RebuildSummary(
                history_events=history.events,
                oldest_event=history.oldest,
                redis_entries=entries,
                undecodable_events=history.undecodable,
                redacted_events=history.redacted,
                **dict(counts or {}),
            )
            if not confirm(summary):
                await guard.execute(f"DROP SCHEMA {SCHEMA} CASCADE")
                return summary
            await guard.execute("DROP TABLE notification, delivery")
            # Every table of the schema: the two, and their partitions.
            for (table,) in await guard.fetch(_NEW_TABLES):
                await guard.execute(f"ALTER TABLE {SCHEMA}.{table} SET SCHEMA {live_schema}")
            await guard.execute(f"DROP SCHEMA {SCHEMA}")
        swapped = dataclasses.replace(summary, swapped=True)
        log.info("rebuild.swapped", **_loggable(swapped))
        return swapped
    finally:
        await guard.close()


async def _build(
    database_url: str,
    redis: Redis,
    keys: KeySpace,
    live_schema: str,
    progress: Progress | None,
) -> tuple[_History, int]:
    """Fill fresh tables in ``SCHEMA`` (committed, but invisible to the service).

    Returns what the history held and how many Redis entries were added to it.
    """
    # The projector's statements name their tables unqualified: this search path sends
    # notification and delivery into the new tables and delivery_event into the live one.
    writer = await asyncpg.connect(
        database_url, server_settings={"search_path": f"{SCHEMA}, {live_schema}"}
    )
    reader = await asyncpg.connect(database_url)
    try:
        await create_tables(writer, live_schema)
        history = await _project_history(reader, writer, progress)
        entries = await _project_redis(redis, keys, writer, history.newest, progress)
        await create_indexes(writer, live_schema)
        return history, entries
    finally:
        await reader.close()
        await writer.close()


@dataclass(slots=True)
class _History:
    events: int = 0
    undecodable: int = 0
    redacted: int = 0
    oldest: datetime | None = None
    newest: dict[int, str] = dataclasses.field(default_factory=dict)  # shard -> entry id


async def _project_history(
    reader: asyncpg.Connection, writer: asyncpg.Connection, progress: Progress | None
) -> _History:
    """Fold every event of ``delivery_event`` into the new tables, in stream order."""
    history = _History()
    async with reader.transaction(isolation="repeatable_read", readonly=True):
        total, history.oldest = await reader.fetchrow(
            "SELECT count(*), min(at) FROM delivery_event"
        )
        if progress:
            progress.phase("history", total)
        rows = Rows()
        async for record in reader.cursor(_HISTORY, prefetch=BATCH):
            shard, entry_id, _ = _parse_event_id(record["event_id"])
            history.newest[shard] = entry_id
            history.events += 1
            try:
                event = codec.decode_event(record["body"])
            except (msgspec.DecodeError, msgspec.ValidationError) as error:
                redacted = redacted_inbox_message(record["body"])
                if redacted is not None:
                    # Erasure removed its text: what it says about the delivery still counts.
                    history.redacted += 1
                    log.debug("rebuild.redacted_event", event_id=record["event_id"])
                    rows.add_redacted(record["event_id"], redacted)
                    continue
                history.undecodable += 1
                log.error(
                    "rebuild.undecodable_event", event_id=record["event_id"], error=str(error)
                )
                continue
            rows.add(record["event_id"], event)
            if len(rows.events) >= BATCH:
                await _write_history(writer, rows, progress)
                rows = Rows()
        await _write_history(writer, rows, progress)
    if history.redacted:
        log.info("rebuild.redacted_events", count=history.redacted)
    return history


async def _write_history(writer: asyncpg.Connection, rows: Rows, progress: Progress | None) -> None:
    # These events are in delivery_event already: only the other tables are written.
    async with writer.transaction():
        await write_rows(writer, dataclasses.replace(rows, events=[]))
    if progress:
        progress.advance(len(rows.events))


async def _project_redis(
    redis: Redis,
    keys: KeySpace,
    writer: asyncpg.Connection,
    newest: dict[int, str],
    progress: Progress | None,
) -> int:
    """Project the entries Redis holds beyond PostgreSQL's newest; return how many.

    Each stream is read up to its last entry when this starts: ingest goes on meanwhile, and
    chasing it might never end. What comes later, the paused projector has not projected
    either; it does so after the swap.
    """
    shards = keys.all_shards()
    ends: list[str | None] = [await _last_entry_id(redis, shard.events) for shard in shards]
    if progress:
        lengths = [await redis.xlen(shard.events) for shard in shards]
        progress.phase("redis", sum(lengths))
    read = 0
    for shard, end in zip(shards, ends, strict=True):
        start = f"({newest[shard.shard]}" if shard.shard in newest else "-"
        while end is not None:
            reply: Any = await redis.xrange(shard.events, min=start, max=end, count=BATCH)
            if not reply:
                break
            entries = [
                (_text(entry_id), fields.get(codec.EVENT_FIELD.encode(), b"[]"))
                for entry_id, fields in reply
            ]
            async with writer.transaction():
                await write_rows(writer, rows_of(shard.shard, entries))
            read += len(entries)
            if progress:
                progress.advance(len(entries))
            start = f"({entries[-1][0]}"
    return read


async def _last_entry_id(redis: Redis, stream: str) -> str | None:
    reply: Any = await redis.xrevrange(stream, max="+", min="-", count=1)
    return _text(reply[0][0]) if reply else None


def _parse_event_id(value: str) -> tuple[int, str, int]:
    """``<shard>-<ms>-<seq>-<index>`` as (shard, entry id, index)."""
    shard, milliseconds, sequence, index = value.split("-")
    return int(shard), f"{milliseconds}-{sequence}", int(index)


def _loggable(summary: RebuildSummary) -> dict[str, Any]:
    fields = dataclasses.asdict(summary)
    fields["oldest_event"] = summary.oldest_event.isoformat() if summary.oldest_event else None
    return fields


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
