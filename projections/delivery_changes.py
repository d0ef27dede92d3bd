"""What each event about a delivery changes in its ``delivery`` row (``projections.rows``
writes them): its status and the columns the event has something to say about."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from streams.core.events import (
    DeliveryAttemptFailed,
    DeliveryCancelled,
    DeliveryDeadLettered,
    DeliveryDeferred,
    DeliveryDigested,
    DeliveryDue,
    DeliveryEvent,
    DeliveryExpired,
    DeliveryFailed,
    DeliveryQueued,
    DeliveryReplayed,
    DeliveryScheduled,
    DeliverySent,
    DeliverySkipped,
    DeliverySuppressed,
    DeliveryThrottled,
    InboxMessageArchived,
    InboxMessageCreated,
    InboxMessageEvent,
    InboxMessageRead,
    InboxMessageSeen,
    InboxMessageUnarchived,
    InboxMessageUnread,
    ProviderFeedbackReceived,
)
from streams.core.vocabulary import Channel, Priority
from streams.delivery.cancellations import cancellation_reason
from streams.delivery.state import DeliveryStatus

# What an event says about its delivery's row, as ``_change`` orders it: status, channel,
# priority, reason, attempts, error class, last error, provider, provider message id, sent
# at, failed at, due at (when a SCHEDULED delivery is due), step (its place in its type's
# chain of escalation steps), fallback of (the delivery whose permanent failure made it).
# None where the event says nothing: the row keeps what it has (see _UPSERT_DELIVERIES), but
# for due at, which only the events that schedule a delivery set. A plain tuple, not a dict
# or a NamedTuple: this runs for every event the projector reads, and a tuple costs about
# half as much.
_Change = tuple[Any, ...]
# The statuses bound once: an enum member looked up through its class costs about 150 ns on
# Python 3.11, and this runs for every event.
_QUEUED, _SCHEDULED, _SENT = DeliveryStatus.QUEUED, DeliveryStatus.SCHEDULED, DeliveryStatus.SENT
_SUPPRESSED, _EXPIRED = DeliveryStatus.SUPPRESSED, DeliveryStatus.EXPIRED
_FAILED, _DELIVERED = DeliveryStatus.FAILED, DeliveryStatus.DELIVERED
_CANCELLED, _SKIPPED = DeliveryStatus.CANCELLED, DeliveryStatus.SKIPPED
_DIGESTED = DeliveryStatus.DIGESTED


def _change(
    status: DeliveryStatus,
    *,
    channel: Channel | None = None,
    priority: Priority | None = None,
    reason: str | None = None,
    attempts: int | None = None,
    error_class: str | None = None,
    last_error: str | None = None,
    provider: str | None = None,
    provider_message_id: str | None = None,
    sent_at: datetime | None = None,
    failed_at: datetime | None = None,
    due_at: datetime | None = None,
    step: int | None = None,
    fallback_of: str | None = None,
) -> _Change:
    return (
        status, channel, priority, reason, attempts, error_class, last_error, provider,
        provider_message_id, sent_at, failed_at, due_at, step, fallback_of,
    )  # fmt: skip


def _queued(event: DeliveryQueued) -> _Change:
    # A step queued at once (the chain's first) or a fallback made at ingest say so here.
    return _change(
        _QUEUED, channel=event.channel, priority=event.priority,
        step=event.step or None, fallback_of=event.fallback_of or None,
    )  # fmt: skip


def _deferred(event: DeliveryDeferred) -> _Change:
    return _change(_SCHEDULED, channel=event.channel, reason=event.reason, due_at=event.until)


def _scheduled(event: DeliveryScheduled) -> _Change:
    # Sent later at the producer's request ("scheduled"), or an escalation step or a fallback,
    # which say so in their first event and in its reason (the row's defaults, step 0 and no
    # fallback_of, for a delivery that is neither).
    if event.step:
        reason = "step"
    elif event.fallback_of:
        reason = "fallback"
    else:
        reason = "scheduled"
    return _change(
        _SCHEDULED, channel=event.channel, priority=event.priority, reason=reason,
        due_at=event.until, step=event.step or None, fallback_of=event.fallback_of or None,
    )  # fmt: skip


def _due(event: DeliveryDue) -> _Change:
    # Taken up at its time: what became of it comes next, in the same entry.
    return _change(_QUEUED, channel=event.channel, reason="due")


def _suppressed(event: DeliverySuppressed) -> _Change:
    return _change(_SUPPRESSED, channel=event.channel, reason=event.reason)


def _expired(event: DeliveryExpired) -> _Change:
    return _change(_EXPIRED, channel=event.channel, reason=event.reason)


def _cancelled(event: DeliveryCancelled) -> _Change:
    reason = cancellation_reason(event.campaign_id, event.cancelled_by, event.cancellation_key)
    return _change(_CANCELLED, channel=event.channel, reason=reason)


def _skipped(event: DeliverySkipped) -> _Change:
    # An escalation step not needed: the condition that held is the reason ("read",
    # "delivered"), as a SUPPRESSED or EXPIRED delivery's is.
    return _change(_SKIPPED, channel=event.channel, reason=event.reason, step=event.step or None)


def _digested(event: DeliveryDigested) -> _Change:
    # Joined a digest (the notification's NotificationDigested names it): sent as part of it.
    return _change(_DIGESTED, channel=event.channel, reason="digest")


def _attempt_failed(event: DeliveryAttemptFailed) -> _Change:
    return _change(
        _SCHEDULED,
        attempts=event.attempt,
        error_class=event.error_class,
        last_error=event.error,
        due_at=event.retry_at,
    )


def _sent(event: DeliverySent) -> _Change:
    return _change(
        _SENT,
        attempts=event.attempt,
        sent_at=event.at,
        provider=event.provider,
        provider_message_id=event.provider_message_id,
    )


def _failed(event: DeliveryFailed) -> _Change:
    return _change(
        _FAILED,
        attempts=event.attempts,
        failed_at=event.at,
        error_class=event.error_class,
        last_error=event.error,
    )


def _throttled(event: DeliveryThrottled) -> _Change:
    # Right after the change it explains: as that change left it.
    status = _SUPPRESSED if event.action == "suppress" else _SCHEDULED
    return _change(status, channel=event.channel, reason="throttled")


def _dead_lettered(event: DeliveryDeadLettered) -> _Change:
    return _change(_FAILED)


def _replayed(event: DeliveryReplayed) -> _Change:
    # An operator's replay starts a new attempt series.
    return _change(_QUEUED, attempts=0)


def _feedback(event: ProviderFeedbackReceived) -> _Change:
    # The status after it, as the event says; events from before that field: delivered or
    # as sent.
    status = DeliveryStatus(event.status) if event.status else None
    if status is None:
        status = _DELIVERED if event.feedback == "delivered" else _SENT
    failed = status is _FAILED
    return _change(
        status,
        reason=event.feedback,
        error_class="PERMANENT" if failed else None,
        last_error=f"{event.feedback}: {event.detail}" if failed else None,
        failed_at=event.at if failed else None,
    )


def _inbox_created(event: InboxMessageCreated) -> _Change:
    return _change(_SENT)


def _inbox_changed(event: InboxMessageEvent) -> _Change:
    # Read: READ; unread: SENT again; seen and archived: as the event says it is.
    return _change(DeliveryStatus(event.status))


CHANGE_OF: dict[type[DeliveryEvent], Callable[[Any], _Change]] = {
    DeliveryQueued: _queued,
    DeliveryDeferred: _deferred,
    DeliveryScheduled: _scheduled,
    DeliveryDue: _due,
    DeliverySuppressed: _suppressed,
    DeliveryExpired: _expired,
    DeliveryCancelled: _cancelled,
    DeliverySkipped: _skipped,
    DeliveryDigested: _digested,
    DeliveryAttemptFailed: _attempt_failed,
    DeliverySent: _sent,
    DeliveryFailed: _failed,
    DeliveryDeadLettered: _dead_lettered,
    DeliveryThrottled: _throttled,
    DeliveryReplayed: _replayed,
    ProviderFeedbackReceived: _feedback,
    InboxMessageCreated: _inbox_created,
    InboxMessageRead: _inbox_changed,
    InboxMessageUnread: _inbox_changed,
    InboxMessageSeen: _inbox_changed,
    InboxMessageArchived: _inbox_changed,
    InboxMessageUnarchived: _inbox_changed,
}
UNKNOWN = _change(_QUEUED)  # an event type this version does not know
