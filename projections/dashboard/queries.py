"""Read-model queries behind the FAILED dashboard: failure rates, failures, what waits
SCHEDULED, the escalation steps skipped, the digests, a timeline.

Pure asyncpg over the tables of ``migrations/001_read_model.sql`` (and the digests of
``012_digests.sql``); every query is scoped to one producer. Times are compared with the
database's ``now()``.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg
import msgspec

from projections.partitions import ids_of_the_day_of
from streams.core.vocabulary import Channel, DeliveryStatus, Priority

# The statuses a failure rate is taken over: every terminal one but SUPPRESSED, CANCELLED,
# SKIPPED and DIGESTED, whose deliveries were never meant to be attempted (or no longer: a
# SKIPPED one is an escalation step not needed, a DIGESTED one went out in its digest's
# notification) and count for neither side.
RATED_STATUSES: tuple[DeliveryStatus, ...] = (
    DeliveryStatus.SENT,
    DeliveryStatus.DELIVERED,
    DeliveryStatus.READ,
    DeliveryStatus.FAILED,
    DeliveryStatus.EXPIRED,
)
FAILED_LIMIT = 100

_FAILURE_RATES = """
SELECT channel,
       count(*) FILTER (WHERE status = 'FAILED' AND updated_at >= now() - interval '1 hour')
           AS failed_hour,
       count(*) FILTER (WHERE updated_at >= now() - interval '1 hour') AS ended_hour,
       count(*) FILTER (WHERE status = 'FAILED') AS failed_day,
       count(*) AS ended_day
FROM delivery
WHERE producer = $1 AND status = ANY($2::text[]) AND updated_at >= now() - interval '1 day'
GROUP BY channel
ORDER BY channel
"""

_FAILURES_BY_ERROR_CLASS = """
SELECT COALESCE(error_class, 'UNKNOWN') AS error_class,
       count(*) FILTER (WHERE updated_at >= now() - interval '1 hour') AS last_hour,
       count(*) FILTER (WHERE updated_at >= now() - interval '1 day') AS last_day,
       count(*) AS total
FROM delivery
WHERE status = 'FAILED' AND producer = $1
GROUP BY 1
ORDER BY total DESC, 1
"""

_FAILED_DELIVERIES = """
SELECT id, notification_id, notification_type, channel, error_class, last_error, attempts,
       COALESCE(failed_at, updated_at) AS at
FROM delivery
WHERE status = 'FAILED' AND producer = $1
  AND ($2::text IS NULL OR channel = $2)
  AND ($3::text IS NULL OR notification_type = $3)
  AND ($4::text IS NULL OR error_class = $4)
ORDER BY updated_at DESC, id DESC
LIMIT $5
"""

# What waits SCHEDULED (a retry, quiet hours, an address awaited, sent later: reason
# "scheduled", an escalation step: reason "step"), and the earliest due. On
# ``delivery_by_status``.
_SCHEDULED = """
SELECT count(*) AS waiting, count(*) FILTER (WHERE reason = 'scheduled') AS sent_later,
       min(due_at) AS next_due, count(*) FILTER (WHERE reason = 'step') AS steps
FROM delivery
WHERE status = 'SCHEDULED' AND producer = $1
"""

# Escalation steps that ended SKIPPED (not needed: an earlier step's delivery was read or
# delivered) over the last hour and day, by the time they came due. On ``delivery_by_status``.
_SKIPPED = """
SELECT count(*) FILTER (WHERE updated_at >= now() - interval '1 hour') AS last_hour,
       count(*) AS last_day
FROM delivery
WHERE status = 'SKIPPED' AND producer = $1 AND updated_at >= now() - interval '1 day'
"""

# The digests the producer's notifications joined: opened and closed in the last hour, and its
# notifications that joined one in the last hour. A digest has no producer of its own (the
# notifications of several may join it): it is found through its members, the notifications
# whose deliveries ended DIGESTED (on ``delivery_by_status``). A digest closes at most a day
# after it opened, so its members joined within the last 25 hours when it closed in the last.
_DIGESTS = """
WITH mine AS (
    SELECT m.digest_id, m.joined_at
    FROM digest_member AS m
    WHERE m.notification_id IN (
        SELECT notification_id FROM delivery
        WHERE status = 'DIGESTED' AND producer = $1
          AND updated_at >= now() - interval '25 hours'
    )
)
SELECT count(*) FILTER (WHERE g.opened_at >= now() - interval '1 hour') AS opened,
       count(*) FILTER (WHERE g.closed_at >= now() - interval '1 hour') AS closed,
       (SELECT count(*) FROM mine WHERE joined_at >= now() - interval '1 hour') AS items
FROM digest AS g
WHERE g.id IN (SELECT digest_id FROM mine)
"""

_NOTIFICATION = """
SELECT id, type, priority, recipient_id, locale, created_at, expires_at, idempotency_key
FROM notification
WHERE id = $1 AND producer = $2
"""

_DELIVERIES_OF = """
SELECT id, channel, status, reason, attempts, error_class, last_error, updated_at,
       CASE WHEN status = 'SCHEDULED' THEN due_at END AS due_at, step, fallback_of
FROM delivery
WHERE notification_id = $1 AND id >= $2 AND id < $3  -- the partition of the notification's day
ORDER BY channel, id
"""

# NotificationAccepted (no version) first, then each delivery's changes in version order.
_EVENTS_OF = """
SELECT at, type, delivery_id, version, body::text AS body
FROM delivery_event
WHERE notification_id = $1
ORDER BY at, version NULLS FIRST, delivery_id, event_id
"""


@dataclass(frozen=True, slots=True)
class ChannelFailureRate:
    channel: str
    failed_hour: int
    ended_hour: int
    failed_day: int
    ended_day: int


@dataclass(frozen=True, slots=True)
class ErrorClassCount:
    error_class: str
    last_hour: int
    last_day: int
    total: int


@dataclass(frozen=True, slots=True)
class FailedDelivery:
    id: str
    notification_id: str
    notification_type: str | None
    channel: Channel | None
    error_class: str | None
    last_error: str | None
    attempts: int
    at: datetime


@dataclass(frozen=True, slots=True)
class FailureFilter:
    """Optional equality filters of the FAILED list; None matches everything."""

    channel: Channel | None = None
    notification_type: str | None = None
    error_class: str | None = None


@dataclass(frozen=True, slots=True)
class NotificationSummary:
    id: str
    type: str
    priority: Priority
    recipient_id: str
    locale: str
    created_at: datetime
    expires_at: datetime
    idempotency_key: str = ""


@dataclass(frozen=True, slots=True)
class DeliverySummary:
    id: str
    channel: Channel | None
    status: DeliveryStatus
    reason: str | None
    attempts: int
    error_class: str | None
    last_error: str | None
    updated_at: datetime
    due_at: datetime | None = None  # when a SCHEDULED delivery is due
    step: int = 0  # its place in its type's chain of escalation steps (0: not a step)
    fallback_of: str | None = None  # the delivery whose permanent failure made it


@dataclass(frozen=True, slots=True)
class ScheduledDeliveries:
    """The producer's deliveries waiting SCHEDULED: all of them, those sent later at its
    request (``send_at``/``delay``), when the first is due (None: none waits), and the
    escalation steps among them."""

    waiting: int
    sent_later: int
    next_due: datetime | None
    steps: int = 0


@dataclass(frozen=True, slots=True)
class DigestCounts:
    """The digests the producer's notifications joined, opened and closed in the last hour,
    and its notifications that joined one in the last hour (``items``)."""

    opened: int
    closed: int
    items: int


@dataclass(frozen=True, slots=True)
class SkippedSteps:
    """The producer's escalation steps that ended SKIPPED in the last hour and day."""

    last_hour: int
    last_day: int


@dataclass(frozen=True, slots=True)
class TimelineEvent:
    at: datetime
    type: str
    delivery_id: str | None
    version: int | None
    body: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Timeline:
    notification: NotificationSummary
    deliveries: list[DeliverySummary]
    events: list[TimelineEvent]


async def failure_rates(pool: asyncpg.Pool, producer: str) -> list[ChannelFailureRate]:
    """Per channel: FAILED and all ended deliveries over the last hour and the last day."""
    async with pool.acquire() as connection:
        rows = await connection.fetch(_FAILURE_RATES, producer, list(RATED_STATUSES))
    return [
        ChannelFailureRate(
            channel=row["channel"] or "?",
            failed_hour=row["failed_hour"],
            ended_hour=row["ended_hour"],
            failed_day=row["failed_day"],
            ended_day=row["ended_day"],
        )
        for row in rows
    ]


async def failures_by_error_class(pool: asyncpg.Pool, producer: str) -> list[ErrorClassCount]:
    """FAILED deliveries by error class: last hour, last day, and all the read model keeps."""
    async with pool.acquire() as connection:
        rows = await connection.fetch(_FAILURES_BY_ERROR_CLASS, producer)
    return [
        ErrorClassCount(row["error_class"], row["last_hour"], row["last_day"], row["total"])
        for row in rows
    ]


async def failed_deliveries(
    pool: asyncpg.Pool,
    producer: str,
    where: FailureFilter,
    limit: int = FAILED_LIMIT,
) -> list[FailedDelivery]:
    """The producer's FAILED deliveries matching ``where``, newest first."""
    async with pool.acquire() as connection:
        rows = await connection.fetch(
            _FAILED_DELIVERIES,
            producer,
            where.channel,
            where.notification_type,
            where.error_class,
            limit,
        )
    return [
        FailedDelivery(
            id=str(row["id"]),
            notification_id=str(row["notification_id"]),
            notification_type=row["notification_type"],
            channel=_channel(row["channel"]),
            error_class=row["error_class"],
            last_error=row["last_error"],
            attempts=row["attempts"],
            at=row["at"],
        )
        for row in rows
    ]


async def scheduled_deliveries(pool: asyncpg.Pool, producer: str) -> ScheduledDeliveries:
    """How many of the producer's deliveries wait SCHEDULED, and the first one's due time."""
    async with pool.acquire() as connection:
        row = await connection.fetchrow(_SCHEDULED, producer)
    return ScheduledDeliveries(row["waiting"], row["sent_later"], row["next_due"], row["steps"])


async def skipped_steps(pool: asyncpg.Pool, producer: str) -> SkippedSteps:
    """How many of the producer's escalation steps were skipped in the last hour and day."""
    async with pool.acquire() as connection:
        row = await connection.fetchrow(_SKIPPED, producer)
    return SkippedSteps(row["last_hour"], row["last_day"])


async def digest_counts(pool: asyncpg.Pool, producer: str) -> DigestCounts:
    """How many digests the producer's notifications joined were opened and closed in the
    last hour, and how many of its notifications joined one then."""
    async with pool.acquire() as connection:
        row = await connection.fetchrow(_DIGESTS, producer)
    return DigestCounts(row["opened"], row["closed"], row["items"])


async def timeline(
    pool: asyncpg.Pool, producer: str, notification_id: uuid.UUID
) -> Timeline | None:
    """A notification of ``producer`` with its deliveries and every event; None if not theirs."""
    async with pool.acquire() as connection:
        head = await connection.fetchrow(_NOTIFICATION, notification_id, producer)
        if head is None:
            return None
        deliveries = await connection.fetch(
            _DELIVERIES_OF, notification_id, *ids_of_the_day_of(notification_id)
        )
        events = await connection.fetch(_EVENTS_OF, notification_id)
    return Timeline(
        notification=NotificationSummary(
            id=str(head["id"]),
            type=head["type"],
            priority=Priority(head["priority"]),
            recipient_id=head["recipient_id"],
            locale=head["locale"],
            created_at=head["created_at"],
            expires_at=head["expires_at"],
            idempotency_key=head["idempotency_key"],
        ),
        deliveries=[
            DeliverySummary(
                id=str(row["id"]),
                channel=_channel(row["channel"]),
                status=DeliveryStatus(row["status"]),
                reason=row["reason"],
                attempts=row["attempts"],
                error_class=row["error_class"],
                last_error=row["last_error"],
                updated_at=row["updated_at"],
                due_at=row["due_at"],
                step=row["step"],
                fallback_of=None if row["fallback_of"] is None else str(row["fallback_of"]),
            )
            for row in deliveries
        ],
        events=[
            TimelineEvent(
                at=row["at"],
                type=row["type"],
                delivery_id=str(row["delivery_id"]) if row["delivery_id"] else None,
                version=row["version"],
                body=_object(row["body"]),
            )
            for row in events
        ],
    )


def _channel(text: str | None) -> Channel | None:
    """A delivery's channel column (NULL until an event named it)."""
    return None if text is None else Channel(text)


def _object(text: str) -> dict[str, Any]:
    value = msgspec.json.decode(text)
    return value if isinstance(value, dict) else {}
