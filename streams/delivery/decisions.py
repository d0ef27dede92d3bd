"""What is to become of one leased delivery, decided before anything is written.

``app.delivery`` decides (the provider's answer, the retry policy, the TTL, circuits and
quota, the lease's verdict) and ``streams.delivery.outcomes.outcome`` turns the decision into
the outcome ``DeliveryStore.finish`` records. A decision is a plain value: it names what
happens, not how it is stored. ``status`` is the status its outcome records (None: none).
"""

from __future__ import annotations

from typing import ClassVar, Literal

import msgspec

from streams.core.events import DeferReason, StepCondition, SuppressReason
from streams.core.vocabulary import ErrorClass
from streams.delivery.state import DeliveryStatus
from streams.inbox.messages import InboxMessage


class Sent(msgspec.Struct, frozen=True):
    """``provider`` accepted the message as ``message_id`` (an SMS of ``sms_segments``)."""

    status: ClassVar[DeliveryStatus | None] = DeliveryStatus.SENT
    error_class: ClassVar[ErrorClass | None] = None
    provider: str
    message_id: str
    sms_segments: int = 0


class SentToInbox(msgspec.Struct, frozen=True):
    """An IN_APP delivery goes to Clarion's own inbox (``provider``) as ``message``, kept
    among the recipient's newest ``keep`` for ``ttl_ms``; ``feed`` is how many changes a
    client can resume from, for how long in ms after the newest."""

    status: ClassVar[DeliveryStatus | None] = DeliveryStatus.SENT
    error_class: ClassVar[ErrorClass | None] = None
    provider: str
    message: InboxMessage
    keep: int
    ttl_ms: int
    feed: tuple[int, int]


class RetryAt(msgspec.Struct, frozen=True):
    """The attempt (at ``provider``) failed and is tried again at ``due_ms``; ``fail_over``:
    by the channel's next provider. ``error`` is stored as it is (masked already)."""

    status: ClassVar[DeliveryStatus | None] = DeliveryStatus.SCHEDULED
    due_ms: int
    error_class: ErrorClass
    error: str
    provider: str = ""
    fail_over: bool = False


class Failed(msgspec.Struct, frozen=True):
    """The delivery ends FAILED and is dead-lettered. ``attempts`` counts the attempts made,
    this one included when one was made now."""

    status: ClassVar[DeliveryStatus | None] = DeliveryStatus.FAILED
    error_class: ErrorClass
    error: str
    attempts: int
    provider: str = ""


class Deferred(msgspec.Struct, frozen=True):
    """No provider can take it now (or it waits for an address): it waits until
    ``until_ms``, no attempt counted. ``event``: whether a ``DeliveryDeferred`` records it;
    not when it only waits on as it waited (a look that found no address yet changes
    neither its status nor its reason, and a day's looks would be 1,440 events)."""

    status: ClassVar[DeliveryStatus | None] = DeliveryStatus.SCHEDULED
    error_class: ClassVar[ErrorClass | None] = None
    until_ms: int
    reason: DeferReason = "rate_limited"
    event: bool = True


class Expired(msgspec.Struct, frozen=True):
    """The notification's TTL passed before the delivery was sent: it is never sent."""

    status: ClassVar[DeliveryStatus | None] = DeliveryStatus.EXPIRED
    error_class: ClassVar[ErrorClass | None] = None
    reason: str = "ttl"


class Suppressed(msgspec.Struct, frozen=True):
    """It is never sent, for ``reason``: a delivery that waited for an address found none
    in time (``no_address``), or the address it found may not be used."""

    status: ClassVar[DeliveryStatus | None] = DeliveryStatus.SUPPRESSED
    error_class: ClassVar[ErrorClass | None] = None
    reason: SuppressReason = "no_address"


class Cancelled(msgspec.Struct, frozen=True):
    """Its campaign was cancelled before it was sent (``by``: the producer who cancelled it,
    "" when unknown): it is never sent."""

    status: ClassVar[DeliveryStatus | None] = DeliveryStatus.CANCELLED
    error_class: ClassVar[ErrorClass | None] = None
    by: str = ""


class Skipped(msgspec.Struct, frozen=True):
    """An escalation step not needed when it came due: an earlier step's delivery
    (``because_of``) was read or delivered (``reason``). It is never sent."""

    status: ClassVar[DeliveryStatus | None] = DeliveryStatus.SKIPPED
    error_class: ClassVar[ErrorClass | None] = None
    reason: StepCondition
    because_of: str = ""


class Throttled(msgspec.Struct, frozen=True):
    """The recipient had ``limit`` deliveries within ``per_seconds`` already (the throttle of
    ``scope``): with ``action`` suppress it is never sent (SUPPRESSED), with defer it waits
    until ``until_ms`` (SCHEDULED); reason ``throttled`` either way. Made only before routing
    (``app.delivery.throttling``), and recorded by ``streams.delivery.throttles.throttled``."""

    error_class: ClassVar[ErrorClass | None] = None
    action: Literal["suppress", "defer"]
    limit: int
    per_seconds: int
    scope: str = ""
    until_ms: int = 0

    @property
    def status(self) -> DeliveryStatus:
        return DeliveryStatus.SUPPRESSED if self.action == "suppress" else DeliveryStatus.SCHEDULED


class AcknowledgeOnly(msgspec.Struct, frozen=True):
    """The delivery ended already: only its work entry is acknowledged."""

    status: ClassVar[DeliveryStatus | None] = None
    error_class: ClassVar[ErrorClass | None] = None


Decision = (
    Sent | SentToInbox | RetryAt | Failed | Deferred | Expired | Suppressed | Cancelled
    | Skipped | AcknowledgeOnly
)  # fmt: skip
