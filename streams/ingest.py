"""Writing accepted notifications to Redis: one atomic Lua step per notification.

The caller (the API) validates and fans out; this module only knows the shape of what is
written: the idempotency record, the notification and delivery hashes, the events and the
work items. Items are grouped by shard and sent in chunks of one script call each, all in a
single pipeline, because the Python client, not Redis, is the bottleneck.
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

Target = Literal["high", "normal", "low", "delayed", "none"]
Field = str | int | bytes
CHUNK = 64  # items per script call: keeps one call well under a millisecond of Redis time


def work_target(priority: Priority) -> Target:
    """The work stream a queued delivery of this priority goes to."""
    return priority.value.lower()  # type: ignore[return-value]


@dataclass(frozen=True, slots=True)
class PlannedDelivery:
    delivery_id: str
    target: Target
    fields: dict[str, Field]
    work_item: bytes = b""
    due_ms: int = 0  # for target "delayed"


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
    notification_fields: dict[str, Field]
    events: list[bytes]
    deliveries: list[PlannedDelivery] = field(default_factory=list)


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
    args: list[Field] = [len(items), idempotency_ttl_ms, pending_ttl_ms]
    for item in items:
        keys += [
            shard.idempotency(item.producer, item.idempotency_key),
            shard.notification(item.notification_id),
            shard.recipient(item.recipient_id),
        ]
        args += [item.fingerprint, item.token, item.settings_version, item.response]
        args += _flat(item.notification_fields)
        args.append(len(item.events))
        args += item.events
        args.append(len(item.deliveries))
        for delivery in item.deliveries:
            keys.append(shard.delivery(delivery.delivery_id))
            args += [delivery.target, delivery.due_ms, delivery.work_item]
            args += _flat(delivery.fields)
    return keys, args


def _flat(fields: dict[str, Field]) -> list[Field]:
    flat: list[Field] = [2 * len(fields)]
    for name, value in fields.items():
        flat += [name, value]
    return flat


def _reply(raw: list[bytes | list[bytes]]) -> IngestReply:
    kind = raw[0]
    if kind == b"DUP":
        return IngestReply("DUP", response=raw[1])  # type: ignore[arg-type]
    if kind == b"STALE":
        return IngestReply("STALE", settings=RecipientSettings.from_hash(raw[1]))  # type: ignore[arg-type]
    return IngestReply(kind.decode())  # type: ignore[arg-type, union-attr]
