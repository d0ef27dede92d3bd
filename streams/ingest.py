"""Writing accepted notifications to Redis: one atomic Lua step per notification.

The caller (the API) validates and fans out; this module only knows the shape of what is
written: the idempotency record, the notification record, the events and the work items.
Items are grouped by shard and sent in chunks of one script call each, all in a single
pipeline, because the Python client, not Redis, is the bottleneck.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from redis.asyncio import Redis

from streams import scripts
from streams.keys import Priority, ShardKeys
from streams.recipient_settings import RecipientSettings

Target = Literal["high", "normal", "low", "delayed"]
Field = str | int | bytes
# Items per script call: few calls for the client to pack, while one call still keeps Redis
# busy for well under a millisecond.
CHUNK = 64


# The work stream a queued delivery of each priority goes to.
WORK_TARGETS: dict[str, Target] = {"HIGH": "high", "NORMAL": "normal", "LOW": "low"}


@dataclass(frozen=True, slots=True)
class PlannedWork:
    """A work item to add to a work stream, or to ``delayed`` until ``due_ms``."""

    target: Target
    item: bytes
    due_ms: int = 0


@dataclass(frozen=True, slots=True)
class IngestItem:
    shard: ShardKeys
    producer: str
    idempotency_key: str
    notification_id: str
    recipient_id: str
    fingerprint: str
    # Identifies this request across a STALE round; the notification id is unique enough.
    token: str
    settings_version: int
    # The caller's answer when this item is accepted (not written: a retry's answer is
    # rebuilt from the record).
    response: bytes
    record: bytes
    # All events of this notification's acceptance, encoded as one ``events`` entry.
    events: bytes
    work: list[PlannedWork] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class IngestReply:
    kind: Literal["OK", "DUP", "CONFLICT", "BUSY", "STALE"]
    # DUP: the encoded record of the notification accepted first under this key.
    record: bytes = b""
    settings: RecipientSettings | None = None


class IngestWriter:
    """Writes ingest items, merging what concurrent requests submit into shared pipelines.

    Each HTTP request would otherwise pay a full Redis round trip of client CPU for its one
    script call. Items submitted while a write is in flight wait for the next one, so under
    load one pipeline carries many requests, and a lone request goes out at once.
    """

    def __init__(
        self,
        redis: Redis,
        idempotency_ttl_ms: int,
        pending_ttl_ms: int,
        max_items: int = 1024,
    ) -> None:
        self.redis = redis
        self.idempotency_ttl_ms = idempotency_ttl_ms
        self.pending_ttl_ms = pending_ttl_ms
        self.max_items = max_items
        self._waiting: list[tuple[IngestItem, asyncio.Future[IngestReply]]] = []
        self._flusher: asyncio.Task[None] | None = None

    async def write(self, items: Sequence[IngestItem]) -> list[IngestReply]:
        """Write ``items``; replies in the same order."""
        loop = asyncio.get_running_loop()
        futures = [loop.create_future() for _ in items]
        self._waiting.extend(zip(items, futures, strict=True))
        if self._flusher is None:
            self._flusher = loop.create_task(self._flush())
        if len(futures) == 1:
            return [await futures[0]]
        return list(await asyncio.gather(*futures))

    async def _flush(self) -> None:
        try:
            while self._waiting:
                batch = self._waiting[: self.max_items]
                del self._waiting[: self.max_items]
                try:
                    replies = await submit(
                        self.redis,
                        [item for item, _ in batch],
                        self.idempotency_ttl_ms,
                        self.pending_ttl_ms,
                    )
                except Exception as error:  # every waiter of this batch gets the error
                    for _, future in batch:
                        if not future.done():
                            future.set_exception(error)
                    continue
                for (_, future), reply in zip(batch, replies, strict=True):
                    if not future.done():  # a waiter whose request was cancelled is gone
                        future.set_result(reply)
        finally:
            self._flusher = None


async def submit(
    redis: Redis, items: Sequence[IngestItem], idempotency_ttl_ms: int, pending_ttl_ms: int
) -> list[IngestReply]:
    """Run the ingest script for every item; replies in the order of ``items``."""
    by_shard: dict[ShardKeys, list[int]] = defaultdict(list)
    for index, item in enumerate(items):
        by_shard[item.shard].append(index)
    calls: list[tuple[list[Field], list[Field]]] = []
    call_items: list[list[int]] = []
    for shard, indexes in by_shard.items():
        for start in range(0, len(indexes), CHUNK):
            chunk = indexes[start : start + CHUNK]
            calls.append(
                _call(shard, [items[i] for i in chunk], idempotency_ttl_ms, pending_ttl_ms)
            )
            call_items.append(chunk)
    results = await scripts.INGEST.run_many(redis, calls)
    replies: list[IngestReply | None] = [None] * len(items)
    for chunk, result in zip(call_items, results, strict=True):
        for index, raw in zip(chunk, result, strict=True):
            replies[index] = _reply(raw)
    return [reply for reply in replies if reply is not None]


def _call(
    shard: ShardKeys, items: Sequence[IngestItem], idempotency_ttl_ms: int, pending_ttl_ms: int
) -> tuple[list[Field], list[Field]]:
    keys: list[Field] = [
        shard.events,
        shard.work(Priority.HIGH),
        shard.work(Priority.NORMAL),
        shard.work(Priority.LOW),
        shard.delayed,
    ]
    args: list[Field] = [idempotency_ttl_ms, pending_ttl_ms, shard.notification("")]
    for item in items:
        keys += [
            shard.idempotency(item.producer, item.idempotency_key),
            shard.notification(item.notification_id),
            shard.recipient(item.recipient_id),
        ]
        args += [item.fingerprint, item.token, item.settings_version, item.notification_id]
        args.append(item.record)
        args += [item.events, len(item.work)]
        for work in item.work:
            args += [work.target, work.due_ms, work.item]
    return keys, args


def _reply(raw: list[bytes | list[bytes]]) -> IngestReply:
    kind = raw[0]
    if kind == b"DUP":
        return IngestReply("DUP", record=raw[1])  # type: ignore[arg-type]
    if kind == b"STALE":
        return IngestReply("STALE", settings=RecipientSettings.from_hash(raw[1]))  # type: ignore[arg-type]
    return IngestReply(kind.decode())  # type: ignore[arg-type, union-attr]
