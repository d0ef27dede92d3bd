"""Cancelling notifications before their deliveries go to a provider.

What a CANCELLED delivery's ``reason`` says (``cancellation_reason``), and the store that
cancels a notification's pending deliveries, by its id or by the producer's cancellation key
(``cancel.lua``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import cast

import msgspec
from redis.asyncio import Redis

from streams.core import codec, scripts
from streams.core.clock import now_ms
from streams.core.codec import as_text
from streams.core.events import DeliveryCancelled
from streams.core.keys import ShardKeys
from streams.core.records import DeliveryAtAcceptance, NotificationRecord, decode_record
from streams.core.scripts import Call, KeyOrArg
from streams.core.vocabulary import Channel, DeliveryStatus

# A cancelled delivery's state stays this long past its notification's expiry while a work
# item of it may still come (a worker past the expiry ends it EXPIRED in any case).
HOLD_SLACK_MS = 300_000
# ``parked_after_ms`` when nothing is parked (``CLARION_PARK_AFTER=0``): no due time is that
# far ahead.
NEVER_PARKED = 1 << 50


def cancellation_reason(campaign_id: str, by: str, key: str = "") -> str:
    """A CANCELLED delivery's ``reason``: its campaign's cancellation or its notification's
    (by id, or by its cancellation ``key``), and who cancelled it when known."""
    if campaign_id:
        said = f"campaign {campaign_id} cancelled"
    elif key:
        said = f"cancelled by key {key}"
    else:
        said = "notification cancelled"
    return f"{said} by {by}" if by else said


# Deliveries one ``cancel.lua`` call takes at most: a key's thousands of notifications are
# cancelled in calls of this many, each short enough not to hold Redis up.
CALL_SIZE = 500
# Notifications a cancellation by key reads at most per shard and round.
KEY_PAGE = 1000


class CancelledDelivery(msgspec.Struct, frozen=True):
    """A delivery after a cancellation: its status then (CANCELLED, or what it was when it
    could not be cancelled: SENT and later, SENDING while a worker calls the provider,
    SUPPRESSED, EXPIRED, FAILED)."""

    id: str
    channel: Channel | None
    status: DeliveryStatus


class CancelledNotification(msgspec.Struct, frozen=True):
    id: str
    deliveries: list[CancelledDelivery]


async def records_of(
    redis: Redis, shard: ShardKeys, notification_ids: Sequence[str]
) -> list[NotificationRecord | None]:
    """The notification records of ``notification_ids`` on ``shard`` (None where gone)."""
    async with redis.pipeline(transaction=False) as pipe:
        for notification_id in notification_ids:
            pipe.get(shard.notification(notification_id))
        raws: list[bytes | None] = await pipe.execute()
    return [decode_record(raw) if raw else None for raw in raws]


async def indexed(
    redis: Redis, shard: ShardKeys, producer: str, key: str, now: int | None = None
) -> list[str]:
    """The ids of the producer's notifications on ``shard`` sent with cancellation key
    ``key`` that have not expired by ``now`` (ms; the index's scores are their expiries)."""
    index = shard.cancellation_index(producer, key)
    now = now_ms() if now is None else now
    ids: list[str] = []
    start = 0
    while True:
        page = await redis.zrangebyscore(index, now, "+inf", start=start, num=KEY_PAGE)
        ids += [as_text(member) for member in cast(list[bytes], page)]
        if len(page) < KEY_PAGE:
            return ids
        start += KEY_PAGE


async def forget(
    redis: Redis, shard: ShardKeys, producer: str, key: str, ids: Sequence[str]
) -> None:
    """Take cancelled notifications out of their key's index (those sent with the key
    since stay in it, for a later cancellation)."""
    index = shard.cancellation_index(producer, key)
    for start in range(0, len(ids), KEY_PAGE):
        await redis.zrem(index, *ids[start : start + KEY_PAGE])


async def cancel(
    redis: Redis,
    shard: ShardKeys,
    records: Sequence[NotificationRecord],
    *,
    by: str,
    key: str = "",
    projected: Mapping[str, str] | None = None,
    retention_ms: int,
    now: datetime,
    parked_after_ms: int = NEVER_PARKED,
) -> list[CancelledNotification]:
    """Cancel every delivery of ``records`` (notifications of ``shard``) that has not gone to
    a provider, as ``by`` (by its cancellation ``key`` when given). ``projected``: the read
    model's status of deliveries whose state may have left Redis since they ended."""
    projected = projected or {}
    reason = cancellation_reason("", by, key)
    planned: list[tuple[NotificationRecord, DeliveryAtAcceptance]] = [
        (record, delivery) for record in records for delivery in record.deliveries
    ]
    statuses: list[bytes] = []
    for start in range(0, len(planned), CALL_SIZE):
        part = planned[start : start + CALL_SIZE]
        call = cancel_call(shard, part, by=by, key=key, reason=reason, projected=projected,
                           retention_ms=retention_ms, now=now,
                           parked_after_ms=parked_after_ms)  # fmt: skip
        statuses += await scripts.CANCEL(redis, *call)
    by_notification: dict[str, list[CancelledDelivery]] = {record.id: [] for record in records}
    for (record, delivery), status in zip(planned, statuses, strict=True):
        by_notification[record.id].append(
            CancelledDelivery(delivery.id, delivery.channel, DeliveryStatus(as_text(status)))
        )
    return [CancelledNotification(nid, found) for nid, found in by_notification.items()]


def cancel_call(
    shard: ShardKeys,
    planned: Sequence[tuple[NotificationRecord, DeliveryAtAcceptance]],
    *,
    by: str,
    key: str,
    reason: str,
    projected: Mapping[str, str],
    retention_ms: int,
    now: datetime,
    parked_after_ms: int = NEVER_PARKED,
) -> Call:
    """The keys and arguments of one ``cancel.lua`` call.

    KEYS: events, delayed, then per delivery its state hash. ARGV: the retention of a
    CANCELLED state nothing will look for, who cancels, the CANCELLED state's reason, how far
    ahead a waiting work item may have been parked in PostgreSQL, then per
    delivery: its id, notification id, channel, status and due time at acceptance, until
    when its state is held (its notification's expiry and a margin), its status in the read
    model ("" unknown) and its event (version 0, which the script replaces).
    """
    keys: list[KeyOrArg] = [shard.events, shard.delayed]
    args: list[KeyOrArg] = [retention_ms, by, reason, parked_after_ms]
    for record, delivery in planned:
        keys.append(shard.delivery(delivery.id))
        event = DeliveryCancelled(
            at=now, notification_id=record.id, delivery_id=delivery.id, version=0,
            channel=delivery.channel, campaign_id=record.campaign_id, cancelled_by=by,
            cancellation_key=key,
        )  # fmt: skip
        args += [
            delivery.id,
            record.id,
            delivery.channel,
            delivery.status,
            delivery.due_ms,
            record.expires_ms + HOLD_SLACK_MS,
            projected.get(delivery.id, ""),
            codec.encode(event),
        ]
    return keys, args
