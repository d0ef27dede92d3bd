"""From every shard's ``events`` to the producers' outboxes.

One consumer group, ``status-webhooks``, on each shard's ``events`` stream; one reader task
per shard. It first takes over every pending entry, its own and those of the process that was
active before (only the lease holder reads, so their owner is gone), and handles them in
stream order; then it reads new ones. An entry still pending under another consumer after 30
s (a process that lost the lease mid-batch) is taken over later, out of order: its statuses
go into the outboxes even if they may be there already (a repeat, never a loss).

For each batch it decodes the events, remembers owners and channels (``owners``), finds the
due ones (``payloads``) of producers with a webhook, looks up the owners nobody remembered,
puts each producer's statuses into its outbox in stream order (``streams.status_webhooks.outbox``:
once per entry, even when read again after a crash), wakes those producers' senders, and
only then acknowledges the entries. While no producer
has a webhook, entries are acknowledged unread.

A status whose owner cannot be found (the notification record expired and the projector has
not written it yet, or PostgreSQL is away) holds its batch back, retried with backoff for up
to ``lookup_wait_s``; after that it is skipped and logged, so one lost notification never
stops the stream. When the read model answered and the projector has written everything up
to that entry (a notification older than the retention), it is skipped at once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Any

import msgspec
import structlog
from redis.asyncio import Redis
from redis.exceptions import RedisError

from app.status_webhooks.owners import Owners
from app.status_webhooks.payloads import DueEvent, body, carried_channel, is_due
from streams.core import codec
from streams.core.codec import as_text
from streams.core.connection import being_cancelled
from streams.core.consumer_groups import (
    PROJECTOR_GROUP,
    STATUS_WEBHOOK_GROUP,
    autoclaim,
    ensure_group,
    is_missing_group,
)
from streams.core.keys import KeySpace, ShardKeys
from streams.status_webhooks.outbox import DueStatus, append_statuses

log = structlog.get_logger(__name__)

_EVENT_FIELD = codec.EVENT_FIELD.encode()
READ_COUNT = 50
READ_BLOCK_MS = 100
MAX_BACKOFF_S = 5.0
RECLAIM_IDLE_MS = 30_000
RECLAIM_INTERVAL_S = 5.0
LOOKUP_WAIT_S = 60.0

# (stream entry id, the due event read from it)
Found = tuple[str, DueEvent]


class Dispatcher:
    """Reads every shard's events into the outboxes of producers with a webhook."""

    def __init__(
        self,
        redis: Redis,
        keys: KeySpace,
        owners: Owners,
        consumer: str,
        *,
        wanted: Callable[[], frozenset[str]],
        wake: Callable[[str], None],
        lookup_wait_s: float = LOOKUP_WAIT_S,
    ) -> None:
        self.redis = redis
        self.keys = keys
        self.owners = owners
        self.consumer = consumer
        self._wanted = wanted
        self._wake = wake
        self.lookup_wait_s = lookup_wait_s
        self._stopping = asyncio.Event()

    async def run(self) -> None:
        """Dispatch until ``stop()``; the batch in hand is finished first."""
        shards = self.keys.all_shards()
        await asyncio.gather(*(self._dispatch(shard) for shard in shards))

    def stop(self) -> None:
        self._stopping.set()

    async def handle(
        self, shard: ShardKeys, entries: Sequence[tuple[Any, Any]], *, again: bool = False
    ) -> bool:
        """Put the due statuses of ``entries`` into outboxes, then acknowledge the entries;
        False (nothing acknowledged) when stopped while waiting for an owner. ``again``:
        entries taken over out of stream order (see the module documentation)."""
        wanted = self._wanted()
        if wanted:
            by_producer = await self._statuses(shard, self._read(shard, entries, wanted), wanted)
            if by_producer is None:
                return False
            added = await append_statuses(
                self.redis, self.keys, shard.shard, by_producer, again=again
            )
            for producer, count in added.items():
                if count > 0:
                    self._wake(producer)
        ids = [as_text(entry_id) for entry_id, _ in entries]
        await self.redis.xack(shard.events, STATUS_WEBHOOK_GROUP, *ids)
        return True

    def _read(
        self, shard: ShardKeys, entries: Sequence[tuple[Any, Any]], wanted: frozenset[str]
    ) -> list[Found]:
        """The due events of ``entries``, in order; owners and channels learnt on the way."""
        found: list[Found] = []
        learn = self.owners.learn
        for entry_id, fields in entries:
            raw = (fields or {}).get(_EVENT_FIELD)
            if raw is None:
                continue  # trimmed while pending, or not an events entry
            try:
                events = codec.decode_events(raw)
            except (msgspec.DecodeError, msgspec.ValidationError) as error:
                log.error(
                    "status_webhooks.undecodable_entry",
                    shard=shard.shard, entry_id=as_text(entry_id), error=str(error),
                )  # fmt: skip
                continue
            source = as_text(entry_id)
            for event in events:
                learn(event, wanted)
                if is_due(event):
                    found.append((source, event))  # type: ignore[arg-type]
        return found

    async def _statuses(
        self, shard: ShardKeys, found: list[Found], wanted: frozenset[str]
    ) -> dict[str, list[DueStatus]] | None:
        """Each wanted producer's statuses among ``found``, in order; None when stopped
        while waiting for an owner."""
        started = time.monotonic()
        backoff = 0.1
        missing = self._missing(found, wanted)
        while missing:
            answered = await self.owners.look_up(
                [(e.notification_id, e.delivery_id) for _, e in missing]
            )
            missing = self._missing(found, wanted)
            if not missing or time.monotonic() - started > self.lookup_wait_s:
                break
            # Not in the read model although the projector wrote everything up to these
            # entries: nobody will ever know (beyond the retention). Waiting cannot help.
            if answered and await self._projected_past(shard, missing[-1][0]):
                break
            if self._stopping.is_set():
                return None
            await asyncio.sleep(backoff)
            backoff = min(MAX_BACKOFF_S, backoff * 2)
        if missing:
            log.warning(
                "status_webhooks.owner_unknown",
                skipped=len(missing), waited_s=round(time.monotonic() - started, 1),
                delivery_ids=[e.delivery_id for _, e in missing[:5]],
            )  # fmt: skip
        by_producer: dict[str, list[DueStatus]] = {}
        for source, event in found:
            owner = self.owners.owner(event.notification_id)
            if owner is None or owner.producer not in wanted:
                continue
            channel = carried_channel(event) or self.owners.channel(event.delivery_id)
            if channel is None:
                continue
            payload = body(event, owner.notification_type, channel)
            status = DueStatus(source, event.delivery_id, event.version, payload)
            by_producer.setdefault(owner.producer, []).append(status)
        return by_producer

    def _missing(self, found: list[Found], wanted: frozenset[str]) -> list[Found]:
        """The due events whose owner is unknown, or whose channel is, for a wanted
        producer."""
        missing = []
        for source, event in found:
            owner = self.owners.owner(event.notification_id)
            if owner is None or (
                owner.producer in wanted
                and carried_channel(event) is None
                and self.owners.channel(event.delivery_id) is None
            ):
                missing.append((source, event))
        return missing

    async def _projected_past(self, shard: ShardKeys, entry_id: str) -> bool:
        """Whether the projector has written every entry of the shard up to ``entry_id``."""
        groups: Any = await self.redis.xinfo_groups(shard.events)
        projector = [g for g in groups if as_text(g["name"]) == PROJECTOR_GROUP]
        if not projector or _id(as_text(projector[0]["last-delivered-id"])) < _id(entry_id):
            return False
        if not projector[0]["pending"]:
            return True
        summary: Any = await self.redis.xpending(shard.events, PROJECTOR_GROUP)
        return _id(as_text(summary["min"])) > _id(entry_id)

    async def _ensure_group(self, stream: str) -> None:
        backoff = 0.1
        while not self._stopping.is_set():
            try:
                await ensure_group(self.redis, stream, STATUS_WEBHOOK_GROUP)
                return
            except RedisError as error:
                log.warning("status_webhooks.redis_unavailable", error=str(error), retry_in=backoff)
                await asyncio.sleep(backoff)
                backoff = min(MAX_BACKOFF_S, backoff * 2)

    async def _dispatch(self, shard: ShardKeys) -> None:
        stream = shard.events
        await self._ensure_group(stream)
        cursor = "0-0"  # taking over every pending entry first, then reading new ones
        backoff = 0.1
        reclaimed = time.monotonic()
        while not self._stopping.is_set() and not being_cancelled():
            try:
                if cursor != ">":
                    cursor = await self._take_over(shard, cursor)
                    continue
                reply: Any = await self.redis.xreadgroup(
                    STATUS_WEBHOOK_GROUP, self.consumer, {stream: ">"}, count=READ_COUNT,
                    block=READ_BLOCK_MS,
                )  # fmt: skip
                entries = reply[0][1] if reply else []
                backoff = 0.1
                if entries:
                    await self.handle(shard, entries)
                elif time.monotonic() - reclaimed > RECLAIM_INTERVAL_S:
                    reclaimed = time.monotonic()
                    await self._reclaim(shard)
            except RedisError as error:
                if being_cancelled():
                    raise asyncio.CancelledError from error
                # What was read and not acknowledged is pending: take it over first once
                # Redis is back. A vanished group is made again at once.
                cursor = "0-0"
                if is_missing_group(error):
                    log.warning("status_webhooks.group_missing", stream=stream)
                    await self._ensure_group(stream)
                    continue
                log.warning(
                    "status_webhooks.redis_unavailable",
                    error=str(error) or type(error).__name__, retry_in=backoff,
                )  # fmt: skip
                await asyncio.sleep(backoff)
                backoff = min(MAX_BACKOFF_S, backoff * 2)

    async def _take_over(self, shard: ShardKeys, cursor: str) -> str:
        """Take the next pending entries (whoever read them), in stream order, and handle
        them; the cursor to go on from, ">" once none is left."""
        following, claimed, deleted = await autoclaim(
            self.redis, shard.events, STATUS_WEBHOOK_GROUP, self.consumer,
            min_idle_ms=0, start=cursor, count=READ_COUNT,
        )  # fmt: skip
        if deleted:
            await self.redis.xack(shard.events, STATUS_WEBHOOK_GROUP, *deleted)
        if claimed and not await self.handle(shard, claimed):
            return cursor
        return ">" if following == "0-0" else following

    async def _reclaim(self, shard: ShardKeys) -> None:
        """Take over entries another consumer left pending long after this one started."""
        _, claimed, deleted = await autoclaim(
            self.redis, shard.events, STATUS_WEBHOOK_GROUP, self.consumer,
            min_idle_ms=RECLAIM_IDLE_MS, start="0-0", count=READ_COUNT,
        )  # fmt: skip
        if deleted:
            await self.redis.xack(shard.events, STATUS_WEBHOOK_GROUP, *deleted)
        if claimed:
            await self.handle(shard, claimed, again=True)


def _id(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)
