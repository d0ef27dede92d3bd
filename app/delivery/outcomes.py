"""Turning what happened to one delivery into the outcome ``DeliveryStore.finish`` records.

Pure functions: each builds the delivery's new state fields, the events of the change
(numbered after the version the worker leased), and any ``delayed`` or dead-letter entry.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TypedDict

import msgspec

from app import __version__
from app.catalog import RetryPolicy
from app.delivery.retry_policy import may_retry, retry_delay
from app.logging import mask
from app.providers.base import ErrorClass
from streams import codec
from streams.delivery import Lease, Outcome
from streams.events import (
    DeliveryAttemptFailed,
    DeliveryDeadLettered,
    DeliveryDeferred,
    DeliveryExpired,
    DeliveryFailed,
    DeliverySent,
    Event,
)
from streams.events import (
    ErrorClass as ErrorClassName,
)
from streams.keys import Priority, ShardKeys
from streams.scheduler import delayed_member
from streams.scripts import KeyOrArg
from streams.work_items import WorkItem

MAX_ERROR_TEXT = 500


@dataclass(frozen=True, slots=True)
class Step:
    """One leased delivery: where it came from and what the lease found."""

    shard: ShardKeys
    item: WorkItem
    entry_id: str
    lease: Lease
    worker: str

    @property
    def priority(self) -> Priority:
        return Priority(self.item.priority)


def _at(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


def _outcome(
    step: Step,
    events: list[Event],
    fields: dict[str, KeyOrArg],
    *,
    now_ms: int,
    delayed: tuple[bytes, int] | None = None,
    dead_letter: dict[str, KeyOrArg] | None = None,
) -> Outcome:
    # Every outcome ends the lease and stamps the change.
    fields = {**fields, "lease_owner": "", "lease_until": 0, "updated_ms": now_ms}
    fields["version"] = step.lease.version + len(events)
    member, due_ms = delayed or (b"", 0)
    return Outcome(
        shard=step.shard,
        priority=step.priority,
        delivery_id=step.item.delivery_id,
        entry_id=step.entry_id,
        expected_version=step.lease.version,
        events=codec.encode_events(events) if events else b"",
        fields=fields,
        delayed_member=member,
        due_ms=due_ms,
        dead_letter=dead_letter or {},
    )


class _Ids(TypedDict):
    at: datetime
    notification_id: str
    delivery_id: str
    version: int


def _ids(step: Step, offset: int, now_ms: int) -> _Ids:
    """The fields every event about this delivery has; ``offset`` numbers the change."""
    return _Ids(
        at=_at(now_ms),
        notification_id=step.item.notification_id,
        delivery_id=step.item.delivery_id,
        version=step.lease.version + offset,
    )


def _name(error_class: ErrorClass) -> ErrorClassName:
    return error_class.value


def _attempt_times(step: Step, now_ms: int) -> dict[str, KeyOrArg]:
    return {"first_attempt_ms": step.lease.first_attempt_ms or now_ms, "last_attempt_ms": now_ms}


def sent(step: Step, provider: str, message_id: str, now_ms: int) -> Outcome:
    """The provider accepted the message."""
    attempt = step.lease.attempts + 1
    event = DeliverySent(
        **_ids(step, 1, now_ms),
        attempt=attempt,
        provider=provider,
        provider_message_id=message_id,
    )
    fields: dict[str, KeyOrArg] = {
        "status": "SENT",
        "attempts": attempt,
        "provider": provider,
        "provider_message_id": message_id,
        **_attempt_times(step, now_ms),
    }
    return _outcome(step, [event], fields, now_ms=now_ms)


def expired(step: Step, now_ms: int, reason: str = "ttl") -> Outcome:
    """The notification's TTL passed before the delivery was sent: never send it."""
    event = DeliveryExpired(**_ids(step, 1, now_ms), channel=step.item.channel, reason=reason)
    return _outcome(step, [event], {"status": "EXPIRED", "reason": reason}, now_ms=now_ms)


def deferred(step: Step, until_ms: int, now_ms: int) -> Outcome:
    """No provider quota now: wait, without counting an attempt or an error."""
    event = DeliveryDeferred(
        **_ids(step, 1, now_ms),
        channel=step.item.channel,
        reason="rate_limited",
        until=_at(until_ms),
    )
    member = delayed_member(step.item.priority, codec.encode(step.item))
    fields: dict[str, KeyOrArg] = {"status": "SCHEDULED", "due_ms": until_ms}
    return _outcome(step, [event], fields, now_ms=now_ms, delayed=(member, until_ms))


def failed_attempt(
    step: Step,
    *,
    error_class: ErrorClass,
    error: str,
    policy: RetryPolicy,
    now_ms: int,
    retry_after: float | None = None,
) -> Outcome:
    """An attempt failed: retry a transient failure while attempts and the TTL allow,
    otherwise fail the delivery and dead-letter it."""
    attempt = step.lease.attempts + 1
    error = mask(error)[:MAX_ERROR_TEXT]  # provider texts may quote the address
    if error_class is ErrorClass.TRANSIENT and may_retry(policy, attempt):
        due_ms = now_ms + round(retry_delay(policy, attempt, retry_after) * 1000)
        if due_ms >= step.item.expires_ms:
            return expired(step, now_ms)  # never retry past the TTL
        event = DeliveryAttemptFailed(
            **_ids(step, 1, now_ms),
            attempt=attempt,
            error_class=_name(error_class),
            error=error,
            retry_at=_at(due_ms),
        )
        item = msgspec.structs.replace(step.item, attempts=attempt)
        member = delayed_member(item.priority, codec.encode(item))
        fields: dict[str, KeyOrArg] = {
            "status": "SCHEDULED",
            "attempts": attempt,
            "error_class": error_class.value,
            "last_error": error,
            "due_ms": due_ms,
            **_attempt_times(step, now_ms),
        }
        return _outcome(step, [event], fields, now_ms=now_ms, delayed=(member, due_ms))
    return failed(step, error_class, error, now_ms, attempts=attempt)


def failed(
    step: Step, error_class: ErrorClass, error: str, now_ms: int, *, attempts: int
) -> Outcome:
    """The delivery ends FAILED and goes to the dead-letter queue with its context."""
    error = mask(error)[:MAX_ERROR_TEXT]  # provider texts may quote the address
    events: list[Event] = [
        DeliveryFailed(
            **_ids(step, 1, now_ms),
            attempts=attempts,
            error_class=_name(error_class),
            error=error,
        ),
        DeliveryDeadLettered(**_ids(step, 2, now_ms), error_class=_name(error_class)),
    ]
    times = _attempt_times(step, now_ms) if attempts > step.lease.attempts else {}
    fields: dict[str, KeyOrArg] = {
        "status": "FAILED",
        "attempts": attempts,
        "error_class": error_class.value,
        "last_error": error,
        **times,
    }
    dead_letter: dict[str, KeyOrArg] = {
        "delivery_id": step.item.delivery_id,
        "notification_id": step.item.notification_id,
        "type": step.item.notification_type,
        "channel": step.item.channel,
        "priority": step.item.priority,
        "error_class": error_class.value,
        "last_error": error,
        "attempts": attempts,
        "first_attempt_ms": step.lease.first_attempt_ms or (now_ms if times else 0),
        "last_attempt_ms": now_ms if times else 0,
        "worker": step.worker,
        "worker_version": __version__,
        "version": step.lease.version + len(events),
        "work_entry_id": step.entry_id,
        "work": codec.encode(step.item),
    }
    return _outcome(step, events, fields, now_ms=now_ms, dead_letter=dead_letter)


def acknowledge_only(step: Step) -> Outcome:
    """Nothing to record (the delivery already ended): only acknowledge the work entry."""
    return Outcome(
        shard=step.shard,
        priority=step.priority,
        delivery_id=step.item.delivery_id,
        entry_id=step.entry_id,
        expected_version=step.lease.version,
        events=b"",
        fields={},
    )
