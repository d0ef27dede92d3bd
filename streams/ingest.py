"""Writing accepted notifications to Redis: one atomic Lua step per notification.

The caller (the API) validates and fans out; this module only knows the shape of what is
written: the idempotency record, the notification record, the events and the work items.
Items are grouped by shard and sent in chunks of one script call each, all in a single
pipeline, because the Python client, not Redis, is the bottleneck.
"""

from __future__ import annotations

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
    response: bytes
    record: bytes
    events: list[bytes]
    work: list[PlannedWork] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class IngestReply:
    kind: Literal["OK", "DUP", "CONFLICT", "BUSY", "STALE"]
    response: bytes = b""
    settings: RecipientSettings | None = None


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
    args: list[Field] = [idempotency_ttl_ms, pending_ttl_ms]
    for item in items:
        keys += [
            shard.idempotency(item.producer, item.idempotency_key),
            shard.notification(item.notification_id),
            shard.recipient(item.recipient_id),
        ]
        args += [item.fingerprint, item.token, item.settings_version, item.response, item.record]
        args.append(len(item.events))
        args += item.events
        args.append(len(item.work))
        for work in item.work:
            args += [work.target, work.due_ms, work.item]
    return keys, args


def _reply(raw: list[bytes | list[bytes]]) -> IngestReply:
    kind = raw[0]
    if kind == b"DUP":
        return IngestReply("DUP", response=raw[1])  # type: ignore[arg-type]
    if kind == b"STALE":
        return IngestReply("STALE", settings=RecipientSettings.from_hash(raw[1]))  # type: ignore[arg-type]
    return IngestReply(kind.decode())  # type: ignore[arg-type, union-attr]
