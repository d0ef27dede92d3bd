"""Writing accepted notifications to Redis: one atomic Lua step per notification.

The caller (the API) validates and fans out; this module only knows the shape of what is
written: the idempotency record, the notification record, the events and the work items.
Items are grouped by shard and sent in chunks of one script call each; the calls of
concurrent requests share pipelines, because the Python client, not Redis, is the
bottleneck.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Literal

import msgspec
from redis.asyncio import Redis

from streams import codec, scripts
from streams.batching import BatchedScript
from streams.keys import ShardKeys
from streams.recipient_settings import RecipientSettings
from streams.scripts import KeyOrArg

Target = Literal["high", "normal", "low", "delayed"]
Field = KeyOrArg


# The work stream a queued delivery of each priority goes to.
WORK_TARGETS: dict[str, Target] = {"HIGH": "high", "NORMAL": "normal", "LOW": "low"}


class PlannedWork(msgspec.Struct, frozen=True):
    """A work item to add to a work stream, or a ``delayed`` member (see ``scheduler``) to
    add to ``delayed`` until ``due_ms``."""

    target: Target
    item: bytes
    due_ms: int = 0

    @property
    def destination(self) -> Field:
        """What the ingest script is told: the work stream, or the due time for ``delayed``."""
        return self.due_ms if self.target == "delayed" else self.target


class IngestItem(msgspec.Struct, frozen=True, kw_only=True):
    shard: ShardKeys
    producer: str
    idempotency_key: str
    notification_id: str
    recipient_id: str
    fingerprint: str
    settings_version: int
    # The caller's answer when this item is accepted (not written: a retry's answer is
    # rebuilt from the record).
    response: bytes
    record: bytes
    # All events of this notification's acceptance, as one JSON array.
    events: bytes
    work: list[PlannedWork] = []
    # Written in pipelines of their own (a HIGH notification's), see ``IngestWriter``.
    express: bool = False


class IngestReply(msgspec.Struct, frozen=True):
    kind: Literal["OK", "DUP", "CONFLICT", "BUSY", "STALE", "BROKEN"]
    # DUP: the encoded record of the notification accepted first under this key.
    record: bytes = b""
    settings: RecipientSettings | None = None
    # BROKEN: Redis's error about the item's key of the wrong type (nothing was written).
    error: str = ""


class IngestWriter:
    """Writes ingest items; concurrent requests share pipelines (see ``BatchedScript``).

    HIGH notifications (``IngestItem.express``) travel in pipelines of their own, so an OTP
    never waits behind a thousand-item batch that the same process is writing.
    """

    def __init__(self, redis: Redis, idempotency_ttl_ms: int, pending_ttl_ms: int) -> None:
        def writer() -> BatchedScript[int, IngestItem, IngestReply]:
            return BatchedScript(
                redis,
                scripts.INGEST,
                # By shard number: an int hashes faster than the ShardKeys it stands for.
                group_of=lambda item: item.shard.shard,
                build=lambda _, items: _call(
                    items[0].shard, items, idempotency_ttl_ms, pending_ttl_ms
                ),
                parse=_reply,
            )

        self._express, self._bulk = writer(), writer()

    async def write(self, items: Sequence[IngestItem]) -> list[IngestReply | Exception]:
        """Write ``items``; their replies in the same order, or the error of an item whose
        script call failed (nothing of that item was written)."""
        express = [item.express for item in items]
        if all(express):
            return await self._express.run_settled(items)
        if not any(express):
            return await self._bulk.run_settled(items)
        fast = [item for item, high in zip(items, express, strict=True) if high]
        slow = [item for item, high in zip(items, express, strict=True) if not high]
        fast_replies, slow_replies = await asyncio.gather(
            self._express.run_settled(fast), self._bulk.run_settled(slow)
        )
        fast_iter, slow_iter = iter(fast_replies), iter(slow_replies)
        return [next(fast_iter) if high else next(slow_iter) for high in express]


def _call(
    shard: ShardKeys, items: Sequence[IngestItem], idempotency_ttl_ms: int, pending_ttl_ms: int
) -> tuple[list[Field], list[Field]]:
    keys: list[Field] = [
        shard.events,
        *shard.work_streams,
        shard.delayed,
    ]
    joined, spans = codec.join_events([item.events for item in items])
    args: list[Field] = [
        idempotency_ttl_ms,
        pending_ttl_ms,
        shard.notification(""),
        joined,
        codec.span_text(spans),
    ]
    for item in items:
        keys += [
            shard.idempotency(item.producer, item.idempotency_key),
            shard.notification(item.notification_id),
            shard.recipient(item.recipient_id),
        ]
        # The idempotency record once accepted, as the script stores it.
        done = f"done {item.fingerprint} {item.notification_id}"
        args += [done, item.settings_version, item.record, len(item.work)]
        for work in item.work:
            args += [work.destination, work.item]
    return keys, args


_OK = IngestReply("OK")  # the common reply, shared


def _reply(raw: bytes | list[bytes | list[bytes]]) -> IngestReply:
    """One item's entry of the script's reply: a word, or a list when it carries data."""
    if raw == b"OK":
        return _OK
    if isinstance(raw, bytes):  # CONFLICT, BUSY
        return IngestReply(raw.decode())  # type: ignore[arg-type]
    kind = raw[0]
    if kind == b"DUP":
        return IngestReply("DUP", record=raw[1])  # type: ignore[arg-type]
    if kind == b"BROKEN":
        return IngestReply("BROKEN", error=raw[1].decode())  # type: ignore[union-attr]
    if kind == b"STALE":
        return IngestReply("STALE", settings=RecipientSettings.from_hash(raw[1]))  # type: ignore[arg-type]
    raise ValueError(f"unknown ingest reply {raw!r}")
