"""Events as the projector reads them, written into the read model, and its rows read back."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

from projections.rows import apply, rows_of
from streams.core import codec
from streams.core.events import (
    DeliveryAttemptFailed,
    DeliveryCancelled,
    DeliveryDeadLettered,
    DeliveryDigested,
    DeliveryDue,
    DeliveryExpired,
    DeliveryFailed,
    DeliveryQueued,
    DeliveryScheduled,
    DeliverySent,
    DeliverySkipped,
    DeliverySuppressed,
    DigestClosed,
    Event,
    NotificationAccepted,
    NotificationDigested,
    ProviderFeedbackReceived,
)

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
NID = "01a22000-0000-7000-8000-000000000000"
DID = "01a22000-0000-7000-8000-000000000001"


def story() -> list[list[Event]]:
    """One notification's entries: accepted, a failed attempt, then sent."""
    return [
        [
            NotificationAccepted(
                at=T0, notification_id=NID, producer="shop", idempotency_key="k",
                notification_type="otp", priority="HIGH", recipient_id="u-1", locale="en",
                expires_at=T0 + timedelta(minutes=5), delivery_ids=[DID],
            ),
            DeliveryQueued(at=T0, notification_id=NID, delivery_id=DID, version=1,
                           channel="SMS", priority="HIGH"),
        ],
        [
            DeliveryAttemptFailed(at=T0 + timedelta(seconds=1), notification_id=NID,
                                  delivery_id=DID, version=2, attempt=1,
                                  error_class="TRANSIENT", error="timeout"),
        ],
        [
            DeliverySent(at=T0 + timedelta(seconds=3), notification_id=NID, delivery_id=DID,
                         version=3, attempt=2, provider="sandbox", provider_message_id="m-1"),
        ],
    ]  # fmt: skip


def entries(events: list[list[Event]], first: int = 1) -> list[tuple[str, bytes]]:
    return [(f"{first + n}-0", codec.encode_events(batch)) for n, batch in enumerate(events)]


async def snapshot(pool: asyncpg.Pool) -> dict[str, list[Any]]:
    async with pool.acquire() as connection:
        return {
            table: [
                tuple(row) for row in await connection.fetch(f"SELECT * FROM {table} ORDER BY 1")
            ]
            for table in ("notification", "delivery", "delivery_event")
        }


def accepted(
    notification_id: str,
    delivery_ids: list[str],
    *,
    at: datetime,
    producer: str = "shop",
    notification_type: str = "otp",
    idempotency_key: str = "",
) -> NotificationAccepted:
    """A notification of ``producer`` accepted at ``at`` with these deliveries, in this order
    (its idempotency key: its id unless given)."""
    return NotificationAccepted(
        at=at, notification_id=notification_id, producer=producer,
        idempotency_key=idempotency_key or notification_id,
        notification_type=notification_type, priority="HIGH", recipient_id="u-1", locale="en",
        expires_at=at + timedelta(days=1), delivery_ids=delivery_ids,
    )  # fmt: skip


def delivered(
    notification_id: str,
    delivery_id: str,
    status: str,
    *,
    at: datetime,
    channel: str = "SMS",
    error_class: str = "PERMANENT",
) -> list[Event]:
    """The events that take a new delivery to ``status``, every one of them at ``at``."""
    ids: dict[str, Any] = {"at": at, "notification_id": notification_id, "delivery_id": delivery_id}
    queued = DeliveryQueued(**ids, version=1, channel=channel, priority="HIGH")
    sent = DeliverySent(**ids, version=2, attempt=1, provider="sandbox", provider_message_id="m")
    then: dict[str, list[Event]] = {
        "QUEUED": [],
        "SCHEDULED": [DeliveryAttemptFailed(**ids, version=2, attempt=1, error_class="TRANSIENT",
                                            error="503", retry_at=at)],
        "SENT": [sent],
        "DELIVERED": [sent, ProviderFeedbackReceived(**ids, version=3, feedback="delivered",
                                                     provider="sandbox")],
        "EXPIRED": [DeliveryExpired(**ids, version=2, channel=channel)],
        "CANCELLED": [DeliveryCancelled(**ids, version=2, channel=channel, campaign_id="c")],
        "FAILED": [DeliveryFailed(**ids, version=2, attempts=1, error_class=error_class,
                                  error=f"refused: {error_class}"),
                   DeliveryDeadLettered(**ids, version=3, error_class=error_class)],
    }  # fmt: skip
    if status == "SUPPRESSED":
        return [DeliverySuppressed(**ids, version=1, channel=channel, reason="opted_out")]
    if status == "SKIPPED":  # an escalation step (the second), not needed: the first was read
        return [
            DeliveryScheduled(**ids, version=1, channel=channel, priority="HIGH", until=at,
                              step=2, unless=["read"]),
            DeliverySkipped(**ids, version=2, channel=channel, step=2, reason="read"),
        ]  # fmt: skip
    return [queued, *then[status]]


def steps_and_a_fallback(
    nid: str,
    first: str,
    step: str,
    fallback: str,
    producer: str = "shop",
    accepted_at: datetime = T0,
) -> list[list[Event]]:
    """A notification whose first delivery (EMAIL) fails for good, its escalation step (SMS,
    the second, unless the first was read) is not needed, and the fallback the failure
    made (PUSH) is sent: its entries, accepted at ``accepted_at``, the rest a second later."""
    t0 = accepted_at
    at = t0 + timedelta(seconds=1)
    ids: dict[str, object] = {"notification_id": nid}
    return [
        [accepted(nid, [first, step], at=t0, producer=producer),
         DeliveryQueued(at=t0, **ids, delivery_id=first, version=1, channel="EMAIL",
                        priority="HIGH"),
         DeliveryScheduled(at=t0, **ids, delivery_id=step, version=1, channel="SMS",
                           priority="HIGH", until=t0 + timedelta(minutes=5), step=2,
                           unless=["read"])],
        [DeliveryFailed(at=at, **ids, delivery_id=first, version=2, attempts=1,
                        error_class="PERMANENT", error="no such box"),
         DeliveryScheduled(at=at, **ids, delivery_id=fallback, version=1, channel="PUSH",
                           priority="HIGH", until=at, fallback_of=first)],
        [DeliveryDue(at=at, **ids, delivery_id=fallback, version=2, channel="PUSH",
                     scheduled_for=at),
         DeliverySent(at=at, **ids, delivery_id=fallback, version=3, attempt=1,
                      provider="sandbox", provider_message_id="m-9")],
        [DeliveryDue(at=at, **ids, delivery_id=step, version=2, channel="SMS",
                     scheduled_for=at),
         DeliverySkipped(at=at, **ids, delivery_id=step, version=3, channel="SMS", step=2,
                         reason="read", because_of=first)],
    ]  # fmt: skip


def digested(
    nid: str,
    did: str,
    digest_id: str,
    *,
    at: datetime,
    count: int,
    producer: str = "shop",
) -> list[Event]:
    """A notification of type "comment" to u-1, accepted at ``at`` with its one delivery
    (EMAIL) DIGESTED, joining digest ``digest_id`` as its ``count``-th item (it closes ten
    minutes after ``at``)."""
    ids: dict[str, Any] = {"at": at, "notification_id": nid}
    return [
        accepted(nid, [did], at=at, producer=producer, notification_type="comment"),
        DeliveryDigested(**ids, delivery_id=did, version=1, channel="EMAIL"),
        NotificationDigested(**ids, digest_id=digest_id, recipient_id="u-1",
                             notification_type="comment", count=count,
                             closes_at=at + timedelta(minutes=10)),
    ]  # fmt: skip


def digest_closed(digest_id: str, *, at: datetime, count: int, made: str) -> DigestClosed:
    """Digest ``digest_id`` (comments to u-1) closed at ``at``, ``made`` made of it."""
    return DigestClosed(
        at=at, digest_id=digest_id, recipient_id="u-1", notification_type="comment",
        count=count, notification_id=made,
    )  # fmt: skip


_entry_numbers = itertools.count(1)


async def project(pool: asyncpg.Pool, events: list[Event]) -> None:
    """Write ``events`` into the read model as one ``events`` entry, as the projector would."""
    entry_id = f"{next(_entry_numbers)}-0"
    await apply(pool, "s0", rows_of(0, [(entry_id, codec.encode_events(events))]))
