"""A recipient's message log: every producer's deliveries to one recipient, newest change
first, paged by keyset on (updated_at, id) like the delivery list (``projections.queries``).

Each delivery row carries its notification's recipient, producer and type (the projector
copies them from ``NotificationAccepted``), so a page is one range of the partial index
``delivery_by_recipient`` (``recipient_id, updated_at DESC, id``) in each daily partition,
seeking straight to the cursor; the filters narrow that one recipient's rows. No address is
in the read model (events never carry one), so none is shown.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from streams.core.vocabulary import Channel, DeliveryStatus
from streams.delivery.outcomes import MAX_ERROR_TEXT


@dataclass(frozen=True, slots=True)
class RecipientFilter:
    """What ``recipient_deliveries`` selects: one recipient's deliveries, optionally
    narrowed (by the names and meanings of ``projections.queries.DeliveryFilter``)."""

    recipient_id: str
    status: DeliveryStatus | None = None
    channel: Channel | None = None
    notification_type: str | None = None
    since: datetime | None = None  # updated_at >= since
    until: datetime | None = None  # updated_at < until
    after: tuple[datetime, str] | None = None  # the (updated_at, id) of the previous page's last
    limit: int = 50


@dataclass(frozen=True, slots=True)
class LoggedDelivery:
    """One delivery to the recipient, as the read model has it."""

    id: str
    notification_id: str
    producer: str
    notification_type: str
    channel: Channel | None
    status: DeliveryStatus
    reason: str | None
    attempts: int
    error_class: str | None
    last_error: str | None
    provider_message_id: str | None
    created_at: datetime
    updated_at: datetime
    # When a SCHEDULED delivery is due (None in any other status).
    due_at: datetime | None = None


# An error text is cut to what the write model keeps of one (MAX_ERROR_TEXT), also a provider
# feedback's, which the row prefixes with its kind.
_COLUMNS = f"""
d.id, d.notification_id, d.producer, d.notification_type, d.channel, d.status, d.reason,
d.attempts, d.error_class, left(d.last_error, {MAX_ERROR_TEXT}) AS last_error,
d.provider_message_id, COALESCE(d.created_at, d.updated_at) AS created_at, d.updated_at,
CASE WHEN d.status = 'SCHEDULED' THEN d.due_at END AS due_at
"""


def _query(selection: RecipientFilter) -> tuple[str, list[Any]]:
    args: list[Any] = []

    def param(value: Any) -> str:
        args.append(value)
        return f"${len(args)}"

    clauses = [f"d.recipient_id = {param(selection.recipient_id)}"]
    if selection.status is not None:
        clauses.append(f"d.status = {param(selection.status.value)}")
    if selection.channel is not None:
        clauses.append(f"d.channel = {param(selection.channel)}")
    if selection.notification_type is not None:
        clauses.append(f"d.notification_type = {param(selection.notification_type)}")
    if selection.since is not None:
        clauses.append(f"d.updated_at >= {param(selection.since)}")
    if selection.until is not None:
        clauses.append(f"d.updated_at < {param(selection.until)}")
    if selection.after is not None:
        updated_at, delivery_id = selection.after
        clauses.append(f"(d.updated_at, d.id) < ({param(updated_at)}, {param(delivery_id)})")
    # One row more than a page tells whether another page follows.
    sql = (
        f"SELECT {_COLUMNS} FROM delivery d WHERE {' AND '.join(clauses)} "  # noqa: S608
        f"ORDER BY d.updated_at DESC, d.id DESC LIMIT {param(selection.limit + 1)}"
    )
    return sql, args


def _logged(row: asyncpg.Record) -> LoggedDelivery:
    return LoggedDelivery(
        id=str(row["id"]),
        notification_id=str(row["notification_id"]),
        producer=row["producer"] or "",  # both copied with the recipient: never absent
        notification_type=row["notification_type"] or "",
        channel=None if row["channel"] is None else Channel(row["channel"]),
        status=DeliveryStatus(row["status"]),
        reason=row["reason"],
        attempts=row["attempts"],
        error_class=row["error_class"],
        last_error=row["last_error"],
        provider_message_id=row["provider_message_id"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        due_at=row["due_at"],
    )


async def recipient_deliveries(
    pool: asyncpg.Pool, selection: RecipientFilter
) -> tuple[list[LoggedDelivery], bool]:
    """One page of the recipient's deliveries (every producer's), newest change first, and
    whether more follow. Values are the caller's to validate."""
    sql, args = _query(selection)
    async with pool.acquire() as connection:
        rows = await connection.fetch(sql, *args)
    return [_logged(row) for row in rows[: selection.limit]], len(rows) > selection.limit
