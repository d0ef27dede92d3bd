"""What the read model gets from events: the rows a batch of events writes, and writing them.

A ``NotificationAccepted`` inserts a ``notification`` row; each event about a delivery
upserts its ``delivery`` row, guarded by the event's version, so an event is applied once
and never moves a row backwards whatever order or repetition it comes in; every event is
appended to ``delivery_event`` under an id that is the same each time it is projected. The
projector (``projections.projector``) and the rebuild (``projections.rebuild``) both write
through here, so they cannot disagree.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import asyncpg
import msgspec
import structlog

from projections.delivery_changes import CHANGE_OF, UNKNOWN
from projections.digest_rows import DigestRows
from projections.inbox_rows import InboxRows
from streams.campaigns.ids import campaign_of
from streams.core import codec
from streams.core.events import (
    AnyEvent,
    DeliveryEvent,
    DigestClosed,
    InboxMessageCreated,
    InboxMessageEvent,
    NotificationAccepted,
    NotificationDigested,
    RecipientErased,
)
from streams.core.vocabulary import Priority
from streams.delivery.state_release import RELEASED_ONCE_PROJECTED

log = structlog.get_logger(__name__)

# The batch tables' columns, in the order of the rows rows_of() builds.
_NOTIFICATION_TABLE = """
    id uuid, producer text, idempotency_key text, type text, priority text,
    recipient_id text, locale text, created_at timestamptz, expires_at timestamptz
"""
_DELIVERY_TABLE = """
    id uuid, notification_id uuid, producer text, notification_type text, priority text,
    channel text, status text, reason text, attempts integer, error_class text,
    last_error text, provider text, provider_message_id text, created_at timestamptz,
    updated_at timestamptz, sent_at timestamptz, failed_at timestamptz, version integer,
    campaign_id text, recipient_id text, due_at timestamptz, step smallint, fallback_of uuid
"""
_EVENT_TABLE = """
    event_id text, at timestamptz, type text, notification_id uuid, delivery_id uuid,
    version integer, body jsonb
"""
_INBOX_EVENTS = (InboxMessageCreated, InboxMessageEvent, RecipientErased)
_DIGEST_EVENTS = (NotificationDigested, DigestClosed)
_EVENT_COLUMNS = ("event_id", "at", "type", "notification_id", "delivery_id", "version", "body")

_INSERT_NOTIFICATIONS = """
INSERT INTO notification SELECT * FROM batch_notification ON CONFLICT (id) DO NOTHING
"""

# Absent values (NULL in the batch) keep what the row has; the version guard applies each
# change once and never moves a row backwards, whatever order or repetition events come in.
_UPSERT_DELIVERIES = """
INSERT INTO delivery AS d (id, notification_id, producer, notification_type, priority, channel,
                           status, reason, attempts, error_class, last_error, provider,
                           provider_message_id, created_at, updated_at, sent_at, failed_at,
                           version, campaign_id, recipient_id, due_at, step, fallback_of)
SELECT b.id, b.notification_id, b.producer, b.notification_type, b.priority, b.channel,
       b.status, b.reason, COALESCE(b.attempts, -1), b.error_class, b.last_error, b.provider,
       b.provider_message_id, b.created_at, b.updated_at, b.sent_at, b.failed_at, b.version,
       b.campaign_id, b.recipient_id, b.due_at, COALESCE(b.step, 0), b.fallback_of
FROM {table} AS b
ON CONFLICT (id) DO UPDATE SET
    producer = COALESCE(EXCLUDED.producer, d.producer),
    notification_type = COALESCE(EXCLUDED.notification_type, d.notification_type),
    priority = COALESCE(EXCLUDED.priority, d.priority),
    channel = COALESCE(EXCLUDED.channel, d.channel),
    status = EXCLUDED.status,
    reason = EXCLUDED.reason,
    -- -1 stands for "this event does not say" (see _FIX_UNKNOWN_ATTEMPTS).
    attempts = CASE WHEN EXCLUDED.attempts < 0 THEN d.attempts ELSE EXCLUDED.attempts END,
    error_class = COALESCE(EXCLUDED.error_class, d.error_class),
    last_error = COALESCE(EXCLUDED.last_error, d.last_error),
    provider = COALESCE(EXCLUDED.provider, d.provider),
    provider_message_id = COALESCE(EXCLUDED.provider_message_id, d.provider_message_id),
    created_at = COALESCE(d.created_at, EXCLUDED.created_at),
    updated_at = EXCLUDED.updated_at,
    sent_at = COALESCE(EXCLUDED.sent_at, d.sent_at),
    failed_at = COALESCE(EXCLUDED.failed_at, d.failed_at),
    version = EXCLUDED.version,
    campaign_id = COALESCE(EXCLUDED.campaign_id, d.campaign_id),
    recipient_id = COALESCE(EXCLUDED.recipient_id, d.recipient_id),
    -- Set by the event that schedules it, cleared by any other.
    due_at = EXCLUDED.due_at,
    -- Said by the event that makes an escalation step or a fallback (0, NULL: not said; a
    -- delivery's step and the delivery it falls back from never change).
    step = CASE WHEN EXCLUDED.step = 0 THEN d.step ELSE EXCLUDED.step END,
    fallback_of = COALESCE(EXCLUDED.fallback_of, d.fallback_of)
WHERE d.version < EXCLUDED.version
"""

# A new row whose first event did not say how many attempts were made has made none.
_FIX_UNKNOWN_ATTEMPTS = """
UPDATE delivery AS d SET attempts = 0 FROM {table} AS b WHERE d.id = b.id AND d.attempts < 0
"""

# Columns of a delivery row.
_ID, _STATUS, _ATTEMPTS, _VERSION = 0, 6, 8, 17

_INSERT_EVENTS = """
INSERT INTO delivery_event SELECT * FROM batch_event ON CONFLICT (at, event_id) DO NOTHING
"""

_SAVE_CHECKPOINT = """
INSERT INTO projection_checkpoint (stream, last_id, updated_at) VALUES ($1, $2, now())
ON CONFLICT (stream) DO UPDATE SET last_id = EXCLUDED.last_id, updated_at = now()
"""


@dataclass(frozen=True, slots=True)
class _Context:
    """Notification fields a delivery row copies, known from NotificationAccepted."""

    producer: str
    notification_type: str
    priority: Priority
    created_at: datetime
    # The campaign its idempotency key names (``streams.campaigns.ids``); None for none.
    campaign_id: str | None
    recipient_id: str


@dataclass(slots=True)
class Rows:
    """What one batch of entries writes."""

    notifications: list[tuple[Any, ...]] = field(default_factory=list)
    deliveries: list[tuple[Any, ...]] = field(default_factory=list)
    events: list[tuple[Any, ...]] = field(default_factory=list)
    # The inbox history's statements (``projections.inbox_rows``).
    inbox: InboxRows = field(default_factory=InboxRows)
    # The digests' statements (``projections.digest_rows``).
    digests: DigestRows = field(default_factory=DigestRows)
    last_id: str = "0-0"
    # Notifications accepted in this batch, whose fields its delivery rows copy.
    accepted: dict[str, _Context] = field(default_factory=dict, repr=False)

    def add(self, event_id: str, event: AnyEvent) -> None:
        """Add the rows one event produces; ``event_id`` is its id in ``delivery_event``."""
        self.events.append(_event_row(event_id, event))
        if isinstance(event, NotificationAccepted):
            self.accepted[event.notification_id] = _Context(
                event.producer,
                event.notification_type,
                event.priority,
                event.at,
                campaign_of(event.idempotency_key) or None,
                event.recipient_id,
            )
            self.notifications.append(
                (
                    event.notification_id,
                    event.producer,
                    event.idempotency_key,
                    event.notification_type,
                    event.priority,
                    event.recipient_id,
                    event.locale,
                    event.at,
                    event.expires_at,
                )
            )
        elif isinstance(event, DeliveryEvent):
            context = self.accepted.get(event.notification_id)
            self.deliveries.append(_delivery_row(event, context))
        if isinstance(event, _INBOX_EVENTS):
            self.inbox.add(event)
        elif isinstance(event, _DIGEST_EVENTS):
            self.digests.add(event)

    def add_redacted(self, event_id: str, event: InboxMessageCreated) -> None:
        """Add the rows of an inbox message whose text an erasure removed
        (``projections.inbox_rows.redacted_inbox_message``): its delivery's change, and no
        inbox message, which the erasure deleted."""
        self.events.append(_event_row(event_id, event))
        self.deliveries.append(_delivery_row(event, self.accepted.get(event.notification_id)))

    def ended(self) -> dict[str, int]:
        """The deliveries whose newest change in this batch ends them for good
        (``streams.delivery.state_release``), with that change's version."""
        newest: dict[str, tuple[int, str]] = {}
        for row in self.deliveries:
            known = newest.get(row[_ID])
            if known is None or row[_VERSION] > known[0]:
                newest[row[_ID]] = (row[_VERSION], row[_STATUS])
        return {
            delivery_id: version
            for delivery_id, (version, status) in newest.items()
            if status in RELEASED_ONCE_PROJECTED
        }


def rows_of(shard: int, entries: Sequence[tuple[str, bytes]]) -> Rows:
    """The rows a batch of (entry id, encoded events) produces, in stream order."""
    rows = Rows(last_id=entries[-1][0] if entries else "0-0")
    for entry_id, raw in entries:
        try:
            events = codec.decode_events(raw)
        except (msgspec.DecodeError, msgspec.ValidationError) as error:
            # It stays in Redis for an operator; the read model skips what it cannot read.
            log.error(
                "projector.undecodable_entry", shard=shard, entry_id=entry_id, error=str(error)
            )
            continue
        for index, event in enumerate(events):
            rows.add(event_id(shard, entry_id, index), event)
    return rows


def event_id(shard: int, entry_id: str, index: int) -> str:
    """An event's id in ``delivery_event``: unique, and the same each time it is projected."""
    return f"{shard}-{entry_id}-{index}"


def _event_row(event_id: str, event: AnyEvent) -> tuple[Any, ...]:
    notification_id = getattr(event, "notification_id", None) or None  # "": a digest without
    delivery_id = getattr(event, "delivery_id", None)
    version = getattr(event, "version", None)
    body = codec.encode(event).decode()
    return (event_id, event.at, type(event).__name__, notification_id, delivery_id, version, body)


def _delivery_row(event: DeliveryEvent, context: _Context | None) -> tuple[Any, ...]:
    """The delivery columns an event sets, in the batch table's order; None where it says
    nothing."""
    change_of = CHANGE_OF.get(type(event))
    (
        status, channel, priority, reason, attempts, error_class, last_error, provider,
        message_id, sent_at, failed_at, due_at, step, fallback_of,
    ) = change_of(event) if change_of else UNKNOWN  # fmt: skip
    if attempts is None and event.version == 1:
        attempts = 0  # a delivery's first event: nothing has been tried yet
    return (
        event.delivery_id,
        event.notification_id,
        context.producer if context else None,
        context.notification_type if context else None,
        priority or (context.priority if context else None),
        channel,
        status,
        reason,
        attempts,
        error_class,
        last_error,
        provider,
        message_id,
        context.created_at if context else None,
        event.at,
        sent_at,
        failed_at,
        event.version,
        context.campaign_id if context else None,
        context.recipient_id if context else None,
        due_at,
        step,
        fallback_of,
    )


async def apply(pool: asyncpg.Pool, stream: str, rows: Rows) -> None:
    """Write one batch's rows and its checkpoint in one transaction.

    The events are first copied straight into ``delivery_event``, the cheap way, assuming
    they are new there. When some are not (the batch is projected again after a crash
    between commit and XACK, or a reclaim), the copy fails, the transaction is rolled back
    and the batch is written again the idempotent way.
    """
    async with pool.acquire() as connection:
        try:
            async with connection.transaction():
                await write_rows(connection, rows, events_may_repeat=False)
                await connection.execute(_SAVE_CHECKPOINT, stream, rows.last_id)
            return
        except asyncpg.UniqueViolationError:
            log.info("projector.events_projected_before", stream=stream, last_id=rows.last_id)
        async with connection.transaction():
            await write_rows(connection, rows, events_may_repeat=True)
            await connection.execute(_SAVE_CHECKPOINT, stream, rows.last_id)


async def write_rows(
    connection: asyncpg.Connection, rows: Rows, *, events_may_repeat: bool = True
) -> None:
    """Write ``rows`` within the caller's transaction, once per transaction.

    The batch tables are dropped at the commit. Rows go in with COPY into temporary tables
    and one INSERT … SELECT per table: several times cheaper for PostgreSQL than a statement
    per row. Table names are unqualified, so the connection's ``search_path`` decides where
    they go. With ``events_may_repeat=False`` the events are copied straight into
    ``delivery_event``, without a temporary table and a second pass; one that is there
    already then fails the whole write with ``asyncpg.UniqueViolationError``.
    """
    if rows.notifications:
        await _copy(connection, "batch_notification", _NOTIFICATION_TABLE, rows.notifications)
        await connection.execute(_INSERT_NOTIFICATIONS)
    # ON CONFLICT DO UPDATE may meet each id once per statement: a delivery changed
    # several times in one batch is applied in rounds, in stream order.
    for number, part in enumerate(_rounds(rows.deliveries)):
        table = f"batch_delivery_{number}"
        await _copy(connection, table, _DELIVERY_TABLE, part)
        await connection.execute(_UPSERT_DELIVERIES.format(table=table))
        if any(row[_ATTEMPTS] is None for row in part):
            await connection.execute(_FIX_UNKNOWN_ATTEMPTS.format(table=table))
    await rows.digests.write(connection)
    if not rows.events:
        return
    if events_may_repeat:
        await _copy(connection, "batch_event", _EVENT_TABLE, rows.events)
        await connection.execute(_INSERT_EVENTS)
    else:
        await connection.copy_records_to_table(
            "delivery_event", records=rows.events, columns=_EVENT_COLUMNS
        )
    # After the events: an erasure removes the text of those it concerns.
    await rows.inbox.write(connection)


async def _copy(
    connection: asyncpg.Connection, table: str, columns: str, records: list[tuple[Any, ...]]
) -> None:
    await connection.execute(f"CREATE TEMP TABLE {table} ({columns}) ON COMMIT DROP")
    await connection.copy_records_to_table(table, records=records)


def _rounds(rows: list[tuple[Any, ...]]) -> list[list[tuple[Any, ...]]]:
    """Rows split so that each round holds a delivery id at most once, order kept."""
    rounds: list[list[tuple[Any, ...]]] = []
    seen: dict[Any, int] = {}
    for row in rows:
        count = seen.get(row[0], 0)
        seen[row[0]] = count + 1
        if count == len(rounds):
            rounds.append([])
        rounds[count].append(row)
    return rounds
