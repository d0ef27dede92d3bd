"""Stream retention: Redis keeps a bounded hot window of every stream, PostgreSQL the rest.

An entry of ``events`` or ``work:<priority>`` is trimmed only when it is older than the
retention *and* every consumer group on its stream is done with it: no group still has it
pending, and every group has been given it. A slow or stopped projector (or status-webhooks
process) therefore keeps every entry it has not acknowledged, however old, and a stream
whose groups do not all exist yet is not trimmed at all. The dead-letter stream and the
sandbox's record have no group: age alone bounds them. Each stream is trimmed by one script
call (``trim_stream.lua``), so a group cannot move between the look and the trim.

The dead-letter stream's ``dlq:resolved`` hash marks entries by id; a mark goes once its entry
has been trimmed, so the hash is bounded by the stream.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

import structlog
from redis.asyncio import Redis
from redis.exceptions import RedisError

from streams.core import scripts
from streams.core.codec import as_text
from streams.core.connection import being_cancelled
from streams.core.consumer_groups import DELIVERY_GROUP, EVENTS_GROUPS
from streams.core.keys import KeySpace
from streams.core.scripts import Call

log = structlog.get_logger(__name__)

_MARKS_PAGE = 1000  # hash fields asked for per HSCAN call


@dataclass(frozen=True, slots=True)
class StreamRetention:
    """How long one stream keeps entries, and the groups that must exist before it is trimmed."""

    stream: str
    retention_ms: int
    groups: tuple[str, ...] = ()
    # A hash whose fields are ids of this stream's entries (the DLQ's resolved marks): a
    # field is removed once its entry is trimmed.
    marks: str = ""


@dataclass(frozen=True, slots=True)
class Trimmed:
    """What one trim did: entries removed, the id kept from, or the group that was missing."""

    stream: str
    removed: int
    kept_from: str
    missing_group: str
    marks_removed: int = 0


def policies(
    keys: KeySpace, *, stream_retention_ms: int, dlq_retention_ms: int
) -> list[StreamRetention]:
    """The retention of every stream of a deployment."""
    found: list[StreamRetention] = []
    for shard in keys.all_shards():
        found.append(StreamRetention(shard.events, stream_retention_ms, EVENTS_GROUPS))
        found += [
            StreamRetention(stream, stream_retention_ms, (DELIVERY_GROUP,))
            for stream in shard.work_streams
        ]
        found.append(StreamRetention(shard.dlq, dlq_retention_ms, marks=shard.dlq_resolved))
    found.append(StreamRetention(keys.sandbox_sent, stream_retention_ms))
    return found


async def trim(redis: Redis, policy: StreamRetention) -> Trimmed:
    """Trim one stream to what its groups still need and its retention keeps."""
    removed, kept_from, missing = await scripts.TRIM_STREAM(redis, *trim_stream_call(policy))
    marks_removed = 0
    if policy.marks and int(removed):
        marks_removed = await forget_marks(redis, policy.marks, as_text(kept_from))
    return Trimmed(policy.stream, int(removed), as_text(kept_from), as_text(missing), marks_removed)


def trim_stream_call(policy: StreamRetention) -> Call:
    """The keys and arguments of one ``trim_stream.lua`` call.

    KEYS: the stream. ARGV: its retention (ms), then the groups that must exist before
    anything is trimmed.
    """
    return [policy.stream], [policy.retention_ms, *policy.groups]


async def forget_marks(redis: Redis, marks: str, kept_from: str) -> int:
    """Remove the fields of ``marks`` that name an entry older than ``kept_from`` (trimmed).

    Read in pages with HSCAN, so Redis is never blocked by a large hash; a field that is not
    an entry id is left alone. A mark written meanwhile for a trimmed entry goes next time.
    """
    bound = _entry_id(kept_from)
    if bound is None:
        return 0
    removed = 0
    cursor = 0
    while True:
        cursor, page = await redis.hscan(marks, cursor, count=_MARKS_PAGE)
        old = []
        for field in page:
            entry = _entry_id(field)
            if entry is not None and entry < bound:
                old.append(field)
        if old:
            removed += await redis.hdel(marks, *old)
        if cursor == 0:
            return removed


async def trim_all(redis: Redis, retention: Sequence[StreamRetention]) -> list[Trimmed]:
    """Trim every stream once; streams are independent, so one call per stream."""
    return [await trim(redis, policy) for policy in retention]


async def keep_trimmed(
    redis: Redis, retention: Sequence[StreamRetention], interval_s: float
) -> None:
    """Trim every ``interval_s`` until cancelled; a failure is logged and retried next time."""
    while True:
        try:
            for result in await trim_all(redis, retention):
                if result.removed:
                    log.info(
                        "retention.trimmed",
                        stream=result.stream,
                        removed=result.removed,
                        marks_removed=result.marks_removed,
                    )
                elif result.missing_group:
                    log.debug(
                        "retention.untouched", stream=result.stream, missing=result.missing_group
                    )
        except (RedisError, OSError) as error:
            if being_cancelled():
                raise asyncio.CancelledError from error
            log.warning("retention.trim_failed", error=str(error), retry_in=interval_s)
        await asyncio.sleep(interval_s)


def _entry_id(value: bytes | str) -> tuple[int, int] | None:
    """A stream entry id ("<ms>-<seq>") as numbers to compare, or None if it is not one."""
    ms, dash, seq = as_text(value).partition("-")
    if not (dash and ms.isdigit() and seq.isdigit()):
        return None
    return int(ms), int(seq)
