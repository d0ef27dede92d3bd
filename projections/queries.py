"""Read queries of the status API: the read model in PostgreSQL, and how far behind it is.

Pure SQL over asyncpg (and Redis for the lag); callers validate their input first. Delivery
lists are paged by keyset on (updated_at, id), newest first, so a page costs the same
however deep it is: with a status filter the scan runs on ``delivery_by_status`` (or the
partial ``delivery_failed`` index for FAILED), seeking straight to the cursor.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg
from redis.asyncio import Redis
from redis.exceptions import ResponseError

from projections.partitions import ids_of_the_day_of
from streams.core.connection import clock_reply_ms, queue_clock
from streams.core.consumer_groups import PROJECTOR_GROUP
from streams.core.keys import KeySpace
from streams.core.vocabulary import Channel, DeliveryStatus, Priority

# Every status a delivery can have (SENDING only in the write model, while a worker holds it).
DELIVERY_STATUSES: tuple[DeliveryStatus, ...] = tuple(DeliveryStatus)
# Statuses are written into the SQL as literals (each its own prepared statement): the
# planner can then use the partial index of FAILED rows, which a $n parameter would hide
# from a generic plan. Only these fixed strings ever reach the SQL text.
_STATUS_LITERALS: dict[str, str] = {status: f"'{status}'" for status in DELIVERY_STATUSES}


@dataclass(frozen=True, slots=True)
class DeliveryRow:
    id: str
    notification_id: str
    producer: str | None
    notification_type: str | None
    channel: Channel | None
    status: DeliveryStatus
    # Why it is in its status, as its latest change said (``projections.delivery_changes``).
    reason: str | None
    attempts: int
    error_class: str | None
    last_error: str | None
    provider_message_id: str | None
    updated_at: datetime
    # When a SCHEDULED delivery is due (None in any other status).
    due_at: datetime | None = None
    # Its place in its type's chain of escalation steps (0: not a step), and the delivery
    # whose permanent failure made it (a fallback; None: not one).
    step: int = 0
    fallback_of: str | None = None


@dataclass(frozen=True, slots=True)
class NotificationRow:
    id: str
    producer: str
    type: str
    priority: Priority
    recipient_id: str
    created_at: datetime
    deliveries: list[DeliveryRow]
    idempotency_key: str = ""
    digest_id: str | None = None  # the digest it joined


@dataclass(frozen=True, slots=True)
class DeliveryFilter:
    """What ``list_deliveries`` selects: one producer's deliveries, optionally narrowed."""

    producer: str
    status: DeliveryStatus | None = None
    channel: Channel | None = None
    notification_type: str | None = None
    error_class: str | None = None
    since: datetime | None = None  # updated_at >= since
    until: datetime | None = None  # updated_at < until
    after: tuple[datetime, str] | None = None  # the (updated_at, id) of the previous page's last
    limit: int = 50


_DELIVERY_COLUMNS = """
d.id, d.notification_id, d.producer, d.notification_type, d.channel, d.status, d.reason,
d.attempts, d.error_class, d.last_error, d.provider_message_id, d.updated_at, d.due_at,
d.step, d.fallback_of
"""

_NOTIFICATION = """
SELECT n.id, n.producer, n.type, n.priority, n.recipient_id, n.created_at, n.idempotency_key,
       m.digest_id
FROM notification AS n LEFT JOIN digest_member AS m ON m.notification_id = n.id
WHERE n.id = $1
"""

# In the order the notification listed them when it was accepted (the NotificationAccepted
# event's delivery_ids; its time is the notification's created_at, which prunes the event
# partitions); by id when that event is gone (retention). The deliveries are in the partition
# of the notification's day.
_DELIVERIES_OF_NOTIFICATION = f"""
WITH accepted AS (
    SELECT ARRAY(SELECT jsonb_array_elements_text(body -> 'delivery_ids')) AS ids
    FROM delivery_event
    WHERE notification_id = $1 AND at = $2 AND type = 'NotificationAccepted'
    LIMIT 1
)
SELECT {_DELIVERY_COLUMNS}
FROM delivery d LEFT JOIN accepted a ON true
WHERE d.notification_id = $1 AND d.id >= $3 AND d.id < $4
ORDER BY array_position(a.ids, d.id::text) NULLS LAST, d.id
"""  # noqa: S608 (a constant column list)


def _delivery(row: asyncpg.Record) -> DeliveryRow:
    status = DeliveryStatus(row["status"])
    return DeliveryRow(
        id=str(row["id"]),
        notification_id=str(row["notification_id"]),
        producer=row["producer"],
        notification_type=row["notification_type"],
        channel=None if row["channel"] is None else Channel(row["channel"]),
        status=status,
        reason=row["reason"],
        attempts=row["attempts"],
        error_class=row["error_class"],
        last_error=row["last_error"],
        provider_message_id=row["provider_message_id"],
        updated_at=row["updated_at"],
        due_at=row["due_at"] if status is DeliveryStatus.SCHEDULED else None,
        step=row["step"],
        fallback_of=None if row["fallback_of"] is None else str(row["fallback_of"]),
    )


async def notification_status(pool: asyncpg.Pool, notification_id: str) -> NotificationRow | None:
    """The notification and its deliveries as projected, or None when it is not (yet) there.

    ``notification_id`` must be a UUID string. Whose it is, is the caller's to check.
    """
    async with pool.acquire() as connection:
        found = await connection.fetchrow(_NOTIFICATION, notification_id)
        if found is None:
            return None
        rows = await connection.fetch(
            _DELIVERIES_OF_NOTIFICATION,
            notification_id,
            found["created_at"],
            *ids_of_the_day_of(notification_id),
        )
    return NotificationRow(
        id=str(found["id"]),
        producer=found["producer"],
        type=found["type"],
        priority=Priority(found["priority"]),
        recipient_id=found["recipient_id"],
        created_at=found["created_at"],
        deliveries=[_delivery(row) for row in rows],
        idempotency_key=found["idempotency_key"],
        digest_id=found["digest_id"],
    )


def _list_query(selection: DeliveryFilter) -> tuple[str, list[Any]]:
    args: list[Any] = []

    def param(value: Any) -> str:
        args.append(value)
        return f"${len(args)}"

    clauses = [f"d.producer = {param(selection.producer)}"]
    if selection.status is not None:
        clauses.append(f"d.status = {_STATUS_LITERALS[selection.status]}")
    if selection.channel is not None:
        clauses.append(f"d.channel = {param(selection.channel)}")
    if selection.notification_type is not None:
        clauses.append(f"d.notification_type = {param(selection.notification_type)}")
    if selection.error_class is not None:
        clauses.append(f"d.error_class = {param(selection.error_class)}")
    if selection.since is not None:
        clauses.append(f"d.updated_at >= {param(selection.since)}")
    if selection.until is not None:
        clauses.append(f"d.updated_at < {param(selection.until)}")
    if selection.after is not None:
        updated_at, delivery_id = selection.after
        clauses.append(f"(d.updated_at, d.id) < ({param(updated_at)}, {param(delivery_id)})")
    # One row more than a page tells whether another page follows.
    sql = (
        f"SELECT {_DELIVERY_COLUMNS} FROM delivery d WHERE {' AND '.join(clauses)} "  # noqa: S608
        f"ORDER BY d.updated_at DESC, d.id DESC LIMIT {param(selection.limit + 1)}"
    )
    return sql, args


async def list_deliveries(
    pool: asyncpg.Pool, selection: DeliveryFilter
) -> tuple[list[DeliveryRow], bool]:
    """One page of deliveries, newest first, and whether more follow.

    Values are the caller's to validate; a status outside ``DELIVERY_STATUSES`` is a
    ``KeyError``.
    """
    sql, args = _list_query(selection)
    async with pool.acquire() as connection:
        rows = await connection.fetch(sql, *args)
    page = [_delivery(row) for row in rows[: selection.limit]]
    return page, len(rows) > selection.limit


@dataclass(frozen=True, slots=True)
class DeliveryOwner:
    """Whose a delivery is and on which channel (what a status webhook needs to know)."""

    delivery_id: str
    notification_id: str
    producer: str
    notification_type: str
    channel: Channel


_DELIVERY_OWNERS = """
SELECT d.id, d.notification_id, n.producer, n.type, d.channel
FROM delivery d JOIN notification n ON n.id = d.notification_id
WHERE d.id = ANY($1::uuid[]) AND d.channel IS NOT NULL
"""


async def delivery_owners(pool: asyncpg.Pool, delivery_ids: list[str]) -> list[DeliveryOwner]:
    """The owners of those of ``delivery_ids`` (UUID strings) that are projected."""
    async with pool.acquire() as connection:
        rows = await connection.fetch(_DELIVERY_OWNERS, delivery_ids)
    return [
        DeliveryOwner(
            str(row["id"]), str(row["notification_id"]), row["producer"], row["type"],
            Channel(row["channel"]),
        )
        for row in rows
    ]  # fmt: skip


async def projection_lag_ms(redis: Redis, keys: KeySpace) -> int:
    """How far the read model is behind the event log, in ms (0 when it is up to date).

    For each shard's ``events`` stream: the age of its oldest entry the ``projector`` group
    has not finished, that is the smallest of its pending entries (read but not yet
    acknowledged) and of the first entry after the group's last-delivered id; the largest
    such age over all shards. A stream without the group counts from its first entry. Ages
    are measured on the Redis clock, which stamped the entry ids.
    """
    shards = keys.all_shards()
    pipe = redis.pipeline(transaction=False)
    queue_clock(pipe, shards[0].events)
    for shard in shards:
        pipe.xinfo_groups(shard.events)
        pipe.xpending(shard.events, PROJECTOR_GROUP)
    replies: list[Any] = await pipe.execute(raise_on_error=False)
    now_ms = clock_reply_ms(_reply(replies[0]))
    oldest: list[int] = []
    unread_after: list[tuple[str, str]] = []
    for number, shard in enumerate(shards):
        groups, pending = replies[1 + 2 * number], replies[2 + 2 * number]
        if _missing(groups):
            continue  # no stream: nothing to project
        last_delivered = "0-0"
        for group in _reply(groups):
            if _text(group["name"]) == PROJECTOR_GROUP:
                last_delivered = _text(group["last-delivered-id"])
        if not _missing(pending) and _reply(pending)["pending"]:
            oldest.append(_entry_ms(pending["min"]))
        unread_after.append((shard.events, last_delivered))
    pipe = redis.pipeline(transaction=False)
    for stream, last_delivered in unread_after:
        pipe.xrange(stream, f"({last_delivered}", "+", count=1)
    for first in await pipe.execute() if unread_after else []:
        if first:
            oldest.append(_entry_ms(first[0][0]))
    return max(0, now_ms - min(oldest)) if oldest else 0


def _missing(reply: Any) -> bool:
    """A reply saying the stream or the group does not exist (other errors are raised)."""
    return isinstance(reply, ResponseError)


def _reply(reply: Any) -> Any:
    if isinstance(reply, Exception):
        raise reply
    return reply


def _entry_ms(entry_id: bytes | str) -> int:
    return int(_text(entry_id).partition("-")[0])


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


async def recipient_deliveries(pool: asyncpg.Pool, recipient_id: str) -> list[str]:
    """The ids of every delivery of the recipient's notifications in the read model."""
    rows = await pool.fetch(
        "SELECT d.id::text FROM delivery d JOIN notification n ON n.id = d.notification_id"
        " WHERE n.recipient_id = $1",
        recipient_id,
    )
    return [row[0] for row in rows]


@dataclass(frozen=True, slots=True)
class SentDelivery:
    """A delivery a provider took, as the read model has it."""

    id: str
    notification_id: str
    status: DeliveryStatus
    version: int
    notification_type: str = ""
    channel: str = ""


async def deliveries_by_message(
    pool: asyncpg.Pool, messages: list[tuple[str, str]]
) -> dict[tuple[str, str], SentDelivery]:
    """The deliveries of (provider, provider message id) pairs, by pair; absent ones are not
    in the read model (yet)."""
    if not messages:
        return {}
    rows = await pool.fetch(
        "SELECT d.provider, d.provider_message_id, d.id::text, d.notification_id::text,"
        " d.status, d.version, d.notification_type, d.channel FROM delivery d"
        " JOIN unnest($1::text[], $2::text[]) AS m(provider, message_id)"
        " ON d.provider_message_id = m.message_id AND d.provider = m.provider",
        [provider for provider, _ in messages],
        [message_id for _, message_id in messages],
    )
    return {
        (row[0], row[1]): SentDelivery(
            row[2], row[3], DeliveryStatus(row[4]), row[5], row[6] or "", row[7] or ""
        )
        for row in rows
    }


async def feedback_applied(
    pool: asyncpg.Pool, items: list[tuple[SentDelivery, str]]
) -> set[tuple[str, str]]:
    """The (delivery id, feedback id) pairs among ``items`` (a delivery and a provider's
    feedback id) whose feedback the read model has recorded already."""
    if not items:
        return set()
    rows = await pool.fetch(
        "SELECT e.delivery_id::text, e.body->>'feedback_id' FROM delivery_event e"
        " JOIN unnest($1::uuid[], $2::uuid[], $3::text[]) AS f(notification_id, delivery_id,"
        " feedback_id) ON e.notification_id = f.notification_id"
        " AND e.delivery_id = f.delivery_id AND e.type = 'ProviderFeedbackReceived'"
        " AND e.body->>'feedback_id' = f.feedback_id",
        [sent.notification_id for sent, _ in items],
        [sent.id for sent, _ in items],
        [feedback_id for _, feedback_id in items],
    )
    return {(row[0], row[1]) for row in rows}


_DELIVERY_STATUSES = "SELECT id::text AS id, status FROM delivery WHERE id = ANY($1::uuid[])"


async def delivery_statuses(pool: asyncpg.Pool, delivery_ids: list[str]) -> dict[str, str]:
    """The projected status of each of ``delivery_ids`` the read model has."""
    async with pool.acquire() as connection:
        rows = await connection.fetch(_DELIVERY_STATUSES, delivery_ids)
    return {row["id"]: row["status"] for row in rows}
