"""What happened to one leased delivery, as the outcome ``DeliveryStore.finish`` records.

``outcome`` turns a decision (``streams.delivery.decisions``, made by ``app.delivery``: the
retry policy, the TTL, the provider's answer, the lease's verdict) into its outcome; it is
the one call a delivery makes here. Pure functions: each builder below makes the delivery's
changed state fields, the events of the change (numbered after the version the lease found)
and any ``delayed`` or dead-letter entry; error texts arrive masked and are only cut to
length here.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any, TypedDict

import msgspec

from streams.core import codec
from streams.core.events import (
    DeferReason,
    DeliveryAttemptFailed,
    DeliveryCancelled,
    DeliveryDeadLettered,
    DeliveryDeferred,
    DeliveryDue,
    DeliveryExpired,
    DeliveryFailed,
    DeliverySent,
    DeliverySuppressed,
    Event,
    InboxMessageCreated,
    SuppressReason,
)
from streams.core.scripts import KeyOrArg
from streams.core.vocabulary import ErrorClass
from streams.delivery.cancellations import cancellation_reason
from streams.delivery.decisions import (
    AcknowledgeOnly,
    Cancelled,
    Decision,
    Deferred,
    Expired,
    Failed,
    RetryAt,
    Sent,
    SentToInbox,
    Suppressed,
)
from streams.delivery.delayed import delayed_member
from streams.delivery.leases import LeasedDelivery
from streams.delivery.state import TERMINAL, DeliveryStatus
from streams.delivery.store import Outcome
from streams.dlq.entries import failed_delivery_entry
from streams.inbox.messages import InboxMessage
from streams.inbox.store import InboxWrite

MAX_ERROR_TEXT = 500  # characters of an error text kept in the state, events and dead letter

# Read off the enum once, not per send: on Python 3.11 each ``DeliveryStatus.SENT`` goes
# through the hook of ``EnumType.__getattr__``, about 1,000 instructions.
_SENT = DeliveryStatus.SENT


def outcome(leased: LeasedDelivery, decision: Decision, now_ms: int) -> Outcome:
    """The outcome that records ``decision`` about ``leased``, made at ``now_ms``."""
    match decision:
        case Sent():  # ``sent``, one call less on every send's way
            event, fields = _sent(
                leased, decision.provider, decision.message_id, now_ms, decision.sms_segments
            )
            return _outcome(leased, [event], fields, now_ms=now_ms)
        case RetryAt():
            return retry_later(
                leased, decision.error_class, decision.error, decision.due_ms, now_ms,
                provider=decision.provider, fail_over=decision.fail_over,
            )  # fmt: skip
        case Failed():
            return failed(
                leased, decision.error_class, decision.error, now_ms,
                attempts=decision.attempts, provider=decision.provider,
            )  # fmt: skip
        case SentToInbox():
            return sent_to_inbox(
                leased, decision.provider, decision.message, now_ms,
                keep=decision.keep, ttl_ms=decision.ttl_ms, feed=decision.feed,
            )  # fmt: skip
    return _unattempted(leased, decision, now_ms)


def _unattempted(
    leased: LeasedDelivery,
    decision: Deferred | Expired | Suppressed | Cancelled | AcknowledgeOnly,
    now_ms: int,
) -> Outcome:
    """The outcome of a decision made without an attempt."""
    match decision:
        case Deferred():
            return deferred(
                leased, decision.until_ms, now_ms, decision.reason, event=decision.event
            )
        case Expired():
            return expired(leased, now_ms, decision.reason)
        case Suppressed():
            return suppressed(leased, now_ms, decision.reason)
        case Cancelled():
            return cancelled(leased, now_ms, decision.by)
        case AcknowledgeOnly():
            return acknowledge_only(leased)


def sent(
    leased: LeasedDelivery, provider: str, message_id: str, now_ms: int, sms_segments: int = 0
) -> Outcome:
    """The provider accepted the message (an SMS of ``sms_segments`` segments)."""
    event, fields = _sent(leased, provider, message_id, now_ms, sms_segments)
    return _outcome(leased, [event], fields, now_ms=now_ms)


def _sent(
    leased: LeasedDelivery, provider: str, message_id: str, now_ms: int, sms_segments: int = 0
) -> tuple[DeliverySent, dict[str, KeyOrArg]]:
    attempt = leased.lease.attempts + 1
    event = DeliverySent(
        **_ids(leased, 1, now_ms),
        attempt=attempt,
        provider=provider,
        provider_message_id=message_id,
        sms_segments=sms_segments,
    )
    fields: dict[str, KeyOrArg] = {
        "status": _SENT,
        "attempts": attempt,
        "provider": provider,
        "provider_message_id": message_id,
        **_attempt_times(leased, now_ms),
    }
    return event, fields


def sent_to_inbox(
    leased: LeasedDelivery,
    provider: str,
    message: InboxMessage,
    now_ms: int,
    *,
    keep: int,
    ttl_ms: int,
    feed: tuple[int, int],
) -> Outcome:
    """An IN_APP delivery went to Clarion's own inbox (``provider``): SENT, with the message
    in the recipient's inbox (keeping ``keep`` messages for ``ttl_ms``; ``feed`` is how many
    changes a client can resume from, for how long in ms after the newest), in one step."""
    item = leased.item
    event, fields = _sent(leased, provider, item.delivery_id, now_ms)
    created = InboxMessageCreated(
        **_ids(leased, 2, now_ms),
        recipient_id=item.recipient_id,
        title=message.title,
        body=message.body,
        action_url=message.action_url,
        data=message.data,
        notification_type=item.notification_type,
    )
    version = _version(leased) + 2
    inbox = InboxWrite(
        keys=leased.shard.inbox(item.recipient_id),
        message=message,
        version=version,
        recipient_id=item.recipient_id,
        live=leased.shard.inbox_live,
        keep=keep,
        ttl_ms=ttl_ms,
        feed_length=feed[0],
        feed_ttl_ms=feed[1],
    )
    outcome = _outcome(leased, [event, created], fields, now_ms=now_ms)
    return dataclasses.replace(outcome, inbox=inbox)


def expired(leased: LeasedDelivery, now_ms: int, reason: str = "ttl") -> Outcome:
    """The notification's TTL passed before the delivery was sent: never send it."""
    event = DeliveryExpired(**_ids(leased, 1, now_ms), channel=leased.item.channel, reason=reason)
    fields: dict[str, KeyOrArg] = {"status": DeliveryStatus.EXPIRED, "reason": reason}
    return _outcome(leased, [event], fields, now_ms=now_ms)


def suppressed(leased: LeasedDelivery, now_ms: int, reason: SuppressReason) -> Outcome:
    """The delivery is never sent, for ``reason`` (it waited for an address in vain)."""
    event = DeliverySuppressed(
        **_ids(leased, 1, now_ms), channel=leased.item.channel, reason=reason
    )
    fields: dict[str, KeyOrArg] = {"status": DeliveryStatus.SUPPRESSED, "reason": reason}
    return _outcome(leased, [event], fields, now_ms=now_ms)


def cancelled(leased: LeasedDelivery, now_ms: int, by: str = "") -> Outcome:
    """The delivery's campaign was cancelled before it was sent (``by`` that producer, ""
    when unknown): never send it."""
    item = leased.item
    event = DeliveryCancelled(
        **_ids(leased, 1, now_ms), channel=item.channel, campaign_id=item.campaign,
        cancelled_by=by,
    )  # fmt: skip
    fields: dict[str, KeyOrArg] = {
        "status": DeliveryStatus.CANCELLED, "reason": cancellation_reason(item.campaign, by)
    }  # fmt: skip
    return _outcome(leased, [event], fields, now_ms=now_ms)


def deferred(
    leased: LeasedDelivery,
    until_ms: int,
    now_ms: int,
    reason: DeferReason = "rate_limited",
    *,
    event: bool = True,
) -> Outcome:
    """No provider can take it now (no quota, circuits open, bulkhead full), or it waits for
    an address: wait until ``until_ms``, without counting an attempt; recorded by an event
    unless ``event`` is False (it waits on as it waited: its version stays)."""
    events: list[Event] = []
    if event:
        events.append(DeliveryDeferred(
            **_ids(leased, 1, now_ms), channel=leased.item.channel, reason=reason,
            until=_at(until_ms),
        ))  # fmt: skip
    member = delayed_member(leased.priority, codec.encode_work_item(leased.item))
    fields: dict[str, KeyOrArg] = {"status": DeliveryStatus.SCHEDULED, "due_ms": until_ms}
    return _outcome(leased, events, fields, now_ms=now_ms, delayed=(member, until_ms))


def retry_later(
    leased: LeasedDelivery,
    error_class: ErrorClass,
    error: str,
    due_ms: int,
    now_ms: int,
    *,
    provider: str = "",
    fail_over: bool = False,
) -> Outcome:
    """An attempt (at ``provider``) failed and is tried again at ``due_ms``; ``fail_over``:
    by the channel's next provider."""
    attempt = leased.lease.attempts + 1
    error = error[:MAX_ERROR_TEXT]
    event = DeliveryAttemptFailed(
        **_ids(leased, 1, now_ms),
        attempt=attempt,
        error_class=error_class,
        error=error,
        retry_at=_at(due_ms),
        provider=provider,
    )
    failover = leased.item.failover + fail_over
    item = msgspec.structs.replace(leased.item, attempts=attempt, failover=failover)
    member = delayed_member(item.priority, codec.encode_work_item(item))
    fields: dict[str, KeyOrArg] = {
        "status": DeliveryStatus.SCHEDULED,
        "attempts": attempt,
        "error_class": error_class,
        "last_error": error,
        "due_ms": due_ms,
        **_attempt_times(leased, now_ms),
    }
    return _outcome(leased, [event], fields, now_ms=now_ms, delayed=(member, due_ms))


def failed(
    leased: LeasedDelivery,
    error_class: ErrorClass,
    error: str,
    now_ms: int,
    *,
    attempts: int,
    provider: str = "",
) -> Outcome:
    """The delivery ends FAILED and goes to the dead-letter queue with its context.

    ``attempts`` counts the attempts made, this one included when one was made now.
    """
    error = error[:MAX_ERROR_TEXT]
    events: list[Event] = [
        DeliveryFailed(
            **_ids(leased, 1, now_ms),
            attempts=attempts,
            error_class=error_class,
            error=error,
            provider=provider,
        ),
        DeliveryDeadLettered(**_ids(leased, 2, now_ms), error_class=error_class),
    ]
    attempted_now = attempts > leased.lease.attempts
    times = _attempt_times(leased, now_ms) if attempted_now else {}
    fields: dict[str, KeyOrArg] = {
        "status": DeliveryStatus.FAILED,
        "attempts": attempts,
        "error_class": error_class,
        "last_error": error,
        **times,
    }
    dead_letter = failed_delivery_entry(
        leased.self_contained_item(),
        error_class=error_class,
        error=error,
        attempts=attempts,
        first_attempt_ms=leased.lease.first_attempt_ms or (now_ms if attempted_now else 0),
        last_attempt_ms=now_ms if attempted_now else 0,
        worker=leased.worker,
        version=_version(leased) + len(events),
        work_entry_id=leased.entry_id,
    )
    return _outcome(leased, events, fields, now_ms=now_ms, dead_letter=dead_letter)


def acknowledge_only(leased: LeasedDelivery) -> Outcome:
    """Nothing to record (the delivery already ended): only acknowledge the work entry."""
    return _about(leased, events=b"", fields={})


def _outcome(
    leased: LeasedDelivery,
    events: list[Event],
    fields: dict[str, KeyOrArg],
    *,
    now_ms: int,
    delayed: tuple[bytes, int] | None = None,
    dead_letter: dict[str, KeyOrArg] | None = None,
) -> Outcome:
    # Every outcome ends the lease (and the count of leases without one) and stamps the change.
    ends = fields["status"] in TERMINAL
    fields = {**fields, "lease_owner": "", "lease_until": 0, "leases": 0, "updated_ms": now_ms}
    item = leased.item
    if leased.came_due:
        # A scheduled delivery taken up at its time: that comes first, then what became of it.
        due = DeliveryDue(
            **_ids(leased, 0, now_ms), channel=item.channel, scheduled_for=_at(item.send_at_ms)
        )
        events = [due, *events]
    fields["version"] = leased.lease.version + len(events)
    member, due_ms = delayed or (b"", 0)
    return _about(
        leased,
        events=codec.encode_events(events) if events else b"",
        fields=fields,
        delayed_member=member,
        due_ms=due_ms,
        dead_letter=dead_letter or {},
        releases_data=leased.shard.data(item.notification_id) if ends and item.shared_data else "",
    )


def _about(leased: LeasedDelivery, **recorded: Any) -> Outcome:
    """An outcome of ``leased``'s delivery, acknowledging its work entry."""
    return Outcome(
        shard=leased.shard,
        priority=leased.priority,
        delivery_id=leased.item.delivery_id,
        entry_id=leased.entry_id,
        expected_version=leased.lease.version,
        **recorded,
    )


class _Ids(TypedDict):
    at: datetime
    notification_id: str
    delivery_id: str
    version: int


def _ids(leased: LeasedDelivery, offset: int, now_ms: int) -> _Ids:
    """The fields every event about this delivery has; ``offset`` numbers the change."""
    return _Ids(
        at=_at(now_ms),
        notification_id=leased.item.notification_id,
        delivery_id=leased.item.delivery_id,
        version=_version(leased) + offset,
    )


def _version(leased: LeasedDelivery) -> int:
    """The version the outcome's own events count from: the lease's, or one more when the
    outcome first records that a scheduled delivery came due (``DeliveryDue``)."""
    return leased.lease.version + leased.came_due


def _attempt_times(leased: LeasedDelivery, now_ms: int) -> dict[str, KeyOrArg]:
    return {"first_attempt_ms": leased.lease.first_attempt_ms or now_ms, "last_attempt_ms": now_ms}


def _at(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)
