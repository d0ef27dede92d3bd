"""Which events a producer is told about, and the JSON body each becomes.

Due are the final statuses of a delivery (``DeliverySent``, ``DeliveryFailed``,
``DeliveryExpired``, ``DeliverySuppressed``, ``DeliveryCancelled``, ``DeliverySkipped``: an
escalation step not needed, its ``reason`` the condition that held; ``DeliveryDigested``: its
notification joined a digest, reason ``digest`` as in the read model; a replayed delivery
that ends again is due again, with its higher version) and every feedback change
(``ProviderFeedbackReceived``). The body follows the Standard Webhooks payload shape:
``type``, ``timestamp`` (when the change happened) and ``data``::

    {"type": "delivery.sent", "timestamp": "2026-12-03T17:04:05.123Z",
     "data": {"notification_id": "…", "delivery_id": "…", "notification_type": "otp",
              "channel": "SMS", "status": "SENT", "version": 3, "attempts": 1,
              "reason": "", "error_class": "", "error": "", "provider": "twilio",
              "provider_message_id": "SM…", "feedback": ""}}

``type`` is ``delivery.<status>`` in lower case, or ``delivery.feedback`` for feedback (its
``status`` is the status after it). Every key is always there, "" or 0 when it does not
apply. No address and no template data is ever in it: events carry none, and error texts
were masked before they were stored (feedback details are masked here).

A producer that asked for batches (``max_batch`` above 1) gets several statuses of one lane
per POST: ``{"type": "delivery.batch", "timestamp": …, "data": [<status body>, …]}``, each
item exactly the body above, in order (``batch_body``). Its ``webhook-id`` names its items
(``batch_webhook_id``): a batch sent again is the same batch, while one cut differently
after a restart gets another id, so a receiver must drop repeats per status, by
``delivery_id`` and ``version``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Final

import msgspec

from app.logging import mask
from streams.core.events import (
    AnyEvent,
    DeliveryCancelled,
    DeliveryDigested,
    DeliveryEvent,
    DeliveryExpired,
    DeliveryFailed,
    DeliverySent,
    DeliverySkipped,
    DeliverySuppressed,
    ProviderFeedbackReceived,
)
from streams.core.vocabulary import Channel
from streams.delivery.cancellations import cancellation_reason
from streams.delivery.state import DeliveryStatus

# The events a producer's webhook is told about.
DUE: Final = (
    DeliverySent,
    DeliveryFailed,
    DeliveryExpired,
    DeliverySuppressed,
    DeliveryCancelled,
    DeliverySkipped,
    DeliveryDigested,
    ProviderFeedbackReceived,
)
DueEvent = (
    DeliverySent
    | DeliveryFailed
    | DeliveryExpired
    | DeliverySuppressed
    | DeliveryCancelled
    | DeliverySkipped
    | DeliveryDigested
    | ProviderFeedbackReceived
)
# The events that end a delivery unsent for the reason they give, as they give it.
_ENDED_FOR_A_REASON: Final[dict[type, DeliveryStatus]] = {
    DeliveryExpired: DeliveryStatus.EXPIRED,
    DeliverySuppressed: DeliveryStatus.SUPPRESSED,
    DeliverySkipped: DeliveryStatus.SKIPPED,
}
# A digested delivery's reason, as the read model gives it: its event names no digest (it is
# written before the notification joins one; ``NotificationDigested`` names it afterwards).
DIGESTED_REASON: Final = "digest"
FEEDBACK_TYPE: Final = "delivery.feedback"
BATCH_TYPE: Final = "delivery.batch"


class StatusData(msgspec.Struct, frozen=True, kw_only=True):
    """``data`` of a status webhook."""

    notification_id: str
    delivery_id: str
    notification_type: str
    channel: Channel
    status: DeliveryStatus
    version: int
    attempts: int = 0
    reason: str = ""
    error_class: str = ""
    error: str = ""
    provider: str = ""
    provider_message_id: str = ""
    feedback: str = ""


class StatusPayload(msgspec.Struct, frozen=True, kw_only=True):
    """A status webhook's body."""

    type: str
    timestamp: datetime
    data: StatusData


_encoder = msgspec.json.Encoder()


def is_due(event: AnyEvent) -> bool:
    """Whether a producer's webhook is told about ``event``."""
    return isinstance(event, DUE)


def carried_channel(event: DeliveryEvent) -> Channel | None:
    """The channel an event names itself (a suppression, an expiry, a cancellation, a
    skipped step or a digested delivery), else None."""
    return getattr(event, "channel", None)


def body(event: DueEvent, notification_type: str, channel: Channel) -> bytes:
    """The JSON body telling ``event``'s producer about it."""
    status, details = _details(event)
    kind = (
        FEEDBACK_TYPE
        if isinstance(event, ProviderFeedbackReceived)
        else f"delivery.{status.lower()}"
    )
    data = StatusData(
        notification_id=event.notification_id,
        delivery_id=event.delivery_id,
        notification_type=notification_type,
        channel=channel,
        status=status,
        version=event.version,
        **details,
    )
    return _encoder.encode(StatusPayload(type=kind, timestamp=event.at, data=data))


def batch_body(bodies: Sequence[bytes], at: datetime) -> bytes:
    """The body of a batch: the statuses' own bodies, as they are, in order."""
    return b'{"type":"%s","timestamp":%s,"data":[%s]}' % (
        BATCH_TYPE.encode(),
        _encoder.encode(at),
        b",".join(bodies),
    )


def batch_webhook_id(webhook_ids: Sequence[str]) -> str:
    """The ``webhook-id`` of a batch of these statuses: the same for the same statuses."""
    digest = hashlib.sha256(",".join(webhook_ids).encode()).hexdigest()
    return f"batch_{digest[:32]}"


def _details(event: DueEvent) -> tuple[DeliveryStatus, dict[str, Any]]:
    """The status after ``event`` and what else it says."""
    if isinstance(event, DeliverySent):
        return DeliveryStatus.SENT, {
            "attempts": event.attempt,
            "provider": event.provider,
            "provider_message_id": event.provider_message_id,
        }
    if isinstance(event, DeliveryFailed):
        return DeliveryStatus.FAILED, {
            "attempts": event.attempts,
            "error_class": event.error_class,
            "error": event.error,
            "provider": event.provider,
        }
    if isinstance(event, DeliveryExpired | DeliverySuppressed | DeliverySkipped):
        return _ENDED_FOR_A_REASON[type(event)], {"reason": event.reason}
    if isinstance(event, DeliveryDigested):
        return DeliveryStatus.DIGESTED, {"reason": DIGESTED_REASON}
    if isinstance(event, DeliveryCancelled):
        return DeliveryStatus.CANCELLED, {
            "reason": cancellation_reason(
                event.campaign_id, event.cancelled_by, event.cancellation_key
            )
        }
    # Feedback written before events said the status after it: as the read model reads it.
    after = (
        DeliveryStatus(event.status)
        if event.status
        else DeliveryStatus.DELIVERED
        if event.feedback == "delivered"
        else DeliveryStatus.SENT
    )
    return after, {
        "feedback": event.feedback,
        "provider": event.provider,
        "error": mask(event.detail),
    }
