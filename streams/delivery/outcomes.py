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

import msgspec

from streams.core import codec
from streams.core.events import (
    DeferReason,
    DeliveryAttemptFailed,
    DeliveryCancelled,
    DeliveryDeadLettered,
    DeliveryDeferred,
    DeliveryExpired,
    DeliveryFailed,
    DeliveryScheduled,
    DeliverySent,
    DeliverySkipped,
    DeliverySuppressed,
    Event,
    InboxMessageCreated,
    StepCondition,
    SuppressReason,
)
from streams.core.scripts import KeyOrArg
from streams.core.vocabulary import Channel, ErrorClass
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
    Skipped,
    Suppressed,
)
from streams.delivery.delayed import delayed_member
from streams.delivery.leases import LeasedDelivery
from streams.delivery.outcome_records import about, at, attempt_times, ids, recorded, version
from streams.delivery.state import DeliveryStatus
from streams.delivery.store import Outcome
from streams.dlq.entries import failed_delivery_entry
from streams.inbox.messages import InboxMessage
from streams.inbox.store import InboxWrite

# Why a suppressed delivery's address cannot be used: its fallback, if any, goes instead.
_NO_USABLE_ADDRESS = frozenset(
    {"no_address", "invalid_address", "invalid_token", "no_provider", "hard_bounce"}
)
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
            return recorded(leased, [event], fields, now_ms=now_ms)
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
    decision: Deferred | Expired | Suppressed | Cancelled | Skipped | AcknowledgeOnly,
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
        case Skipped():
            return skipped(leased, now_ms, decision.reason, decision.because_of)
        case AcknowledgeOnly():
            return acknowledge_only(leased)


def sent(
    leased: LeasedDelivery, provider: str, message_id: str, now_ms: int, sms_segments: int = 0
) -> Outcome:
    """The provider accepted the message (an SMS of ``sms_segments`` segments)."""
    event, fields = _sent(leased, provider, message_id, now_ms, sms_segments)
    return recorded(leased, [event], fields, now_ms=now_ms)


def _sent(
    leased: LeasedDelivery, provider: str, message_id: str, now_ms: int, sms_segments: int = 0
) -> tuple[DeliverySent, dict[str, KeyOrArg]]:
    attempt = leased.lease.attempts + 1
    event = DeliverySent(
        **ids(leased, 1, now_ms),
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
        **attempt_times(leased, now_ms),
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
        **ids(leased, 2, now_ms),
        recipient_id=item.recipient_id,
        title=message.title,
        body=message.body,
        action_url=message.action_url,
        data=message.data,
        notification_type=item.notification_type,
    )
    inbox_version = version(leased) + 2
    inbox = InboxWrite(
        keys=leased.shard.inbox(item.recipient_id),
        message=message,
        version=inbox_version,
        recipient_id=item.recipient_id,
        live=leased.shard.inbox_live,
        keep=keep,
        ttl_ms=ttl_ms,
        feed_length=feed[0],
        feed_ttl_ms=feed[1],
    )
    outcome = recorded(leased, [event, created], fields, now_ms=now_ms)
    return dataclasses.replace(outcome, inbox=inbox)


def expired(leased: LeasedDelivery, now_ms: int, reason: str = "ttl") -> Outcome:
    """The notification's TTL passed before the delivery was sent: never send it."""
    event = DeliveryExpired(**ids(leased, 1, now_ms), channel=leased.item.channel, reason=reason)
    fields: dict[str, KeyOrArg] = {"status": DeliveryStatus.EXPIRED, "reason": reason}
    return recorded(leased, [event], fields, now_ms=now_ms)


def suppressed(leased: LeasedDelivery, now_ms: int, reason: SuppressReason) -> Outcome:
    """The delivery is never sent, for ``reason`` (it waited for an address in vain); one
    whose address turned out unusable makes its fallback, if it has one."""
    event = DeliverySuppressed(**ids(leased, 1, now_ms), channel=leased.item.channel, reason=reason)
    fields: dict[str, KeyOrArg] = {"status": DeliveryStatus.SUPPRESSED, "reason": reason}
    if leased.item.fallback and reason in _NO_USABLE_ADDRESS:
        return _fallen_back(leased, event, fields, now_ms)
    return recorded(leased, [event], fields, now_ms=now_ms)


def cancelled(leased: LeasedDelivery, now_ms: int, by: str = "") -> Outcome:
    """The delivery's campaign was cancelled before it was sent (``by`` that producer, ""
    when unknown): never send it."""
    item = leased.item
    event = DeliveryCancelled(
        **ids(leased, 1, now_ms), channel=item.channel, campaign_id=item.campaign,
        cancelled_by=by,
    )  # fmt: skip
    fields: dict[str, KeyOrArg] = {
        "status": DeliveryStatus.CANCELLED, "reason": cancellation_reason(item.campaign, by)
    }  # fmt: skip
    return recorded(leased, [event], fields, now_ms=now_ms)


def skipped(
    leased: LeasedDelivery, now_ms: int, reason: StepCondition, because_of: str = ""
) -> Outcome:
    """An escalation step not needed: an earlier step's delivery was read or delivered."""
    item = leased.item
    event = DeliverySkipped(
        **ids(leased, 1, now_ms), channel=item.channel, step=item.step, reason=reason,
        because_of=because_of,
    )  # fmt: skip
    fields: dict[str, KeyOrArg] = {"status": DeliveryStatus.SKIPPED, "reason": reason}
    return recorded(leased, [event], fields, now_ms=now_ms)


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
            **ids(leased, 1, now_ms), channel=leased.item.channel, reason=reason,
            until=at(until_ms),
        ))  # fmt: skip
    member = delayed_member(leased.priority, codec.encode_work_item(leased.item))
    fields: dict[str, KeyOrArg] = {"status": DeliveryStatus.SCHEDULED, "due_ms": until_ms}
    return recorded(leased, events, fields, now_ms=now_ms, delayed=(member, until_ms))


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
        **ids(leased, 1, now_ms),
        attempt=attempt,
        error_class=error_class,
        error=error,
        retry_at=at(due_ms),
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
        **attempt_times(leased, now_ms),
    }
    return recorded(leased, [event], fields, now_ms=now_ms, delayed=(member, due_ms))


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
            **ids(leased, 1, now_ms),
            attempts=attempts,
            error_class=error_class,
            error=error,
            provider=provider,
        ),
        DeliveryDeadLettered(**ids(leased, 2, now_ms), error_class=error_class),
    ]
    attempted_now = attempts > leased.lease.attempts
    times = attempt_times(leased, now_ms) if attempted_now else {}
    fields: dict[str, KeyOrArg] = {
        "status": DeliveryStatus.FAILED,
        "attempts": attempts,
        "error_class": error_class,
        "last_error": error,
        **times,
    }
    if leased.item.fallback and error_class is ErrorClass.PERMANENT:
        return _fallen_back(leased, events[0], fields, now_ms)
    dead_letter = failed_delivery_entry(
        leased.self_contained_item(),
        error_class=error_class,
        error=error,
        attempts=attempts,
        first_attempt_ms=leased.lease.first_attempt_ms or (now_ms if attempted_now else 0),
        last_attempt_ms=now_ms if attempted_now else 0,
        worker=leased.worker,
        version=version(leased) + len(events),
        work_entry_id=leased.entry_id,
    )
    return recorded(leased, events, fields, now_ms=now_ms, dead_letter=dead_letter)


def _fallen_back(
    leased: LeasedDelivery, ended: Event, fields: dict[str, KeyOrArg], now_ms: int
) -> Outcome:
    """A delivery with a fallback (``fallback`` in the catalog) that failed permanently, or
    found its address unusable: it ends (``ended``, ``fields``), and its fallback is made,
    due now, in the same step: a delivery on the other channel whose id was fixed at ingest,
    carried by one delivery of the notification only (``app.ingest.chains``). No dead
    letter: the fallback took the delivery over, and a replay would send the same
    notification a second way."""
    fallback_id, channel, address = leased.item.fallback
    item = msgspec.structs.replace(
        leased.self_contained_item(), delivery_id=fallback_id, channel=Channel(channel),
        address=address, attempts=0, failover=0, step=0, unless=[], watch=[], watched=False,
        fallback=[], send_at_ms=now_ms, await_until_ms=0 if address else now_ms,
    )  # fmt: skip
    made = DeliveryScheduled(
        at=at(now_ms), notification_id=item.notification_id, delivery_id=fallback_id,
        version=1, channel=item.channel, priority=item.priority, until=at(now_ms),
        fallback_of=leased.item.delivery_id,
    )  # fmt: skip
    member = delayed_member(item.priority, codec.encode_work_item(item))
    return recorded(leased, [ended], fields, now_ms=now_ms, delayed=(member, now_ms), others=[made])


def acknowledge_only(leased: LeasedDelivery) -> Outcome:
    """Nothing to record (the delivery already ended): only acknowledge the work entry."""
    return about(leased, events=b"", fields={})
