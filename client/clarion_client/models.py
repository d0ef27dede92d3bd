"""The request and answer bodies of Clarion's producer API, as msgspec Structs.

They mirror the server's OpenAPI schema (``/schema``); a test compares the two field by
field. Requests leave out what is unset, so the server applies its defaults (the type's
priority, channels and TTL). Answers ignore fields they do not know, and keep statuses and
channels as plain strings, so a server that learns a new status does not break this client.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

import msgspec

Channel = Literal["PUSH", "EMAIL", "SMS", "IN_APP", "WEBHOOK"]
Priority = Literal["HIGH", "NORMAL", "LOW"]
# The statuses a delivery can have, as this client knows them (answers keep any status as a
# plain string, so a newer server's does not break it).
DELIVERY_STATUSES = (
    "QUEUED", "SCHEDULED", "SENDING", "SENT", "FAILED", "EXPIRED", "SUPPRESSED", "DELIVERED",
    "READ", "CANCELLED", "SKIPPED", "DIGESTED",
)  # fmt: skip
SKIPPED = "SKIPPED"  # an escalation step that was not needed
DIGESTED = "DIGESTED"  # joined a digest: its digest's notification is what is sent


class FcmTarget(msgspec.Struct, frozen=True, kw_only=True, tag_field="platform", tag="fcm"):
    """An FCM registration token."""

    token: str


class ApnsTarget(msgspec.Struct, frozen=True, kw_only=True, tag_field="platform", tag="apns"):
    """An APNs device token (64 hex digits today)."""

    token: str


class SubscriptionKeys(msgspec.Struct, frozen=True, kw_only=True):
    p256dh: str
    auth: str


class WebPushTarget(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    omit_defaults=True,
    tag_field="platform",
    tag="webpush",
    rename={"expiration_time": "expirationTime"},
):
    """A browser's ``PushSubscription.toJSON()``."""

    endpoint: str
    keys: SubscriptionKeys
    expiration_time: int | None = None


PushTarget = FcmTarget | ApnsTarget | WebPushTarget


class Recipient(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Who a notification is for; addresses given here win over the recipient's profile."""

    id: str
    email: str | None = None
    phone: str | None = None
    push_tokens: list[str] = []
    webhook_url: str | None = None
    push_targets: list[PushTarget] = []


class Notification(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Body of ``POST /v1/notifications``: only ``recipient`` and ``type`` are required.

    Send later with ``send_at`` (a time with its offset: the server refuses a naive one) or
    ``delay`` (seconds, e.g. ``timedelta.total_seconds()``, or an ISO 8601 duration such as
    ``"PT15M"``), one of them, at most the server's ``CLARION_MAX_SCHEDULE`` ahead (30 days
    by default); the TTL counts from then. ``cancellation_key``: ``cancel_by_key`` with it
    takes back every notification sent with it that has not gone out."""

    recipient: Recipient
    type: str
    priority: Priority | None = None
    channels: list[Channel] | None = None
    locale: str | None = None
    ttl_seconds: int | None = None
    data: dict[str, Any] = {}
    send_at: datetime | None = None
    delay: float | str | None = None
    cancellation_key: str | None = None


class BatchItem(Notification, frozen=True, kw_only=True, omit_defaults=True):
    """A notification in a batch, with the idempotency key the server takes per item."""

    idempotency_key: str


class BatchRequest(msgspec.Struct, frozen=True, kw_only=True):
    """Body of ``POST /v1/notifications/batch``: at most ``BATCH_LIMIT`` items."""

    notifications: list[BatchItem]


class DeliveryAtAcceptance(msgspec.Struct, frozen=True, kw_only=True):
    """A delivery as ingest planned it: QUEUED, SCHEDULED, SUPPRESSED or EXPIRED. One sent
    later is SCHEDULED with reason ``scheduled`` and ``due_ms``, when it is due (ms since
    the epoch; 0 otherwise)."""

    id: str
    channel: str
    status: str
    reason: str = ""
    due_ms: int = 0

    @property
    def due_at(self) -> datetime | None:
        """``due_ms`` as a UTC time; None when the delivery was not sent later."""
        return datetime.fromtimestamp(self.due_ms / 1000, UTC) if self.due_ms else None


class JoinedDigest(msgspec.Struct, frozen=True, kw_only=True):
    """The digest a notification of a digest type joined: its id, how many it holds with
    this one, and when it closes (ms since the epoch; sooner when it fills up)."""

    id: str
    count: int
    closes_ms: int


class Accepted(msgspec.Struct, frozen=True, kw_only=True):
    """The 202 answer: the notification's id and one delivery per channel and address;
    ``digest`` when its type is a digest's (its deliveries DIGESTED)."""

    id: str
    deliveries: list[DeliveryAtAcceptance]
    digest: JoinedDigest | None = None


class BatchResult(msgspec.Struct, frozen=True, kw_only=True):
    """One item's answer: 202 with ``id`` and ``deliveries``, or an error ``detail``."""

    idempotency_key: str
    status_code: int
    id: str | None = None
    deliveries: list[DeliveryAtAcceptance] | None = None
    detail: str | None = None
    digest: JoinedDigest | None = None

    @property
    def accepted(self) -> bool:
        """Whether the server took this item (now, or at an earlier call with its key)."""
        return self.status_code == 202


class BatchResponse(msgspec.Struct, frozen=True, kw_only=True):
    results: list[BatchResult]


class DeliveryView(msgspec.Struct, frozen=True, kw_only=True):
    """A delivery's current state; ``reason`` says why it is suppressed, expired, cancelled,
    skipped (``SKIPPED``: an escalation step not needed, ``read`` or ``delivered``, what an
    earlier step's delivery was) or deferred (or which provider feedback set its status);
    the error fields are from its latest failed attempt. ``step`` is its place in its type's
    chain of escalation steps (from 1; 0: not a step), ``fallback_of`` the delivery whose
    permanent failure made it (None: not a fallback)."""

    id: str
    channel: str | None
    status: str
    attempts: int
    error_class: str | None
    last_error: str | None
    provider_message_id: str | None
    updated_at: datetime
    reason: str | None = None  # servers before it do not send it
    # When a SCHEDULED delivery is due (None in any other status, or from older servers).
    due_at: datetime | None = None
    # Escalation steps and fallbacks (0 and None from servers before them).
    step: int = 0
    fallback_of: str | None = None

    @property
    def skipped(self) -> bool:
        """Whether it is an escalation step that was not needed (``SKIPPED``): the
        notification was read or delivered on an earlier step's channel first."""
        return self.status == SKIPPED


class NotificationStatus(msgspec.Struct, frozen=True, kw_only=True):
    """``GET /v1/notifications/{id}``: the notification and each delivery's state;
    ``recipient_id`` is null for a recipient a campaign's segment selected, unless the API
    key has the ``recipients`` scope."""

    id: str
    type: str
    priority: str
    recipient_id: str | None
    created_at: datetime
    deliveries: list[DeliveryView]
    projection_lag_ms: int
    # The digest it joined (its deliveries DIGESTED), and the digest it was made of when one
    # closed (None from servers before digests).
    digest_id: str | None = None
    made_of_digest: str | None = None


class RecipientDelivery(msgspec.Struct, frozen=True, kw_only=True):
    """One delivery of a recipient's message log: whose notification it was, on which
    channel, where it is and why (``reason``; ``error_class`` and ``last_error`` from its
    latest failed attempt)."""

    id: str
    notification_id: str
    producer: str
    type: str
    channel: str | None
    status: str
    reason: str | None
    attempts: int
    error_class: str | None
    last_error: str | None
    provider_message_id: str | None
    created_at: datetime
    updated_at: datetime
    # When a SCHEDULED delivery is due (None in any other status, or from older servers).
    due_at: datetime | None = None


class RecipientDeliveryPage(msgspec.Struct, frozen=True, kw_only=True):
    """``GET /v1/recipients/{id}/deliveries``: one page of what was sent to the recipient, by
    every producer, newest change first; pass ``next_cursor`` (None on the last page) as
    ``cursor`` for the next."""

    recipient_id: str
    deliveries: list[RecipientDelivery]
    next_cursor: str | None
    projection_lag_ms: int


class CancelledDelivery(msgspec.Struct, frozen=True, kw_only=True):
    """A delivery after a cancellation: CANCELLED, or its status when it could not be
    (SENT and later: it went before; SENDING: a worker was handing it to the provider, so it
    may go, but a retry of it will not; SUPPRESSED, EXPIRED, FAILED: it had ended)."""

    id: str
    channel: str | None
    status: str


class CancelledNotification(msgspec.Struct, frozen=True, kw_only=True):
    """``POST /v1/notifications/{id}/cancel``: each delivery's status after the call."""

    id: str
    deliveries: list[CancelledDelivery]


class CancellationRequest(msgspec.Struct, frozen=True, kw_only=True):
    """Body of ``POST /v1/cancellations``: the ``cancellation_key`` to cancel by."""

    key: str


class KeyCancellation(msgspec.Struct, frozen=True, kw_only=True):
    """``POST /v1/cancellations``: the notifications found under the key, and their
    deliveries by what became of them: ``cancelled``; ``sent`` before the call; ``sending``
    (a worker was calling the provider: it may go, a retry of it will not); ``ended``
    before otherwise (suppressed, expired, failed)."""

    key: str
    notifications: int
    cancelled: int
    sent: int
    sending: int
    ended: int


AttributeValue = str | int | float | bool


class Segment(msgspec.Struct, frozen=True, kw_only=True):
    """Recipients whose profile has every attribute named with the value given, or one of
    the values a list gives: ``Segment(attributes={"plan": "pro", "country": ["DE", "AT"]})``."""

    attributes: dict[str, AttributeValue | list[AttributeValue]]


class CampaignSpec(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Body of ``POST /v1/campaigns``: one notification of ``type`` to each recipient,
    uploaded or selected by ``segment``; from ``start_at``, at most ``rate`` a second."""

    type: str
    name: str = ""
    data: dict[str, Any] = {}
    priority: Priority | None = None
    channels: list[Channel] | None = None
    locale: str | None = None
    ttl_seconds: int | None = None
    segment: Segment | None = None
    start_at: datetime | None = None
    rate: int | None = None


class Upload(msgspec.Struct, frozen=True, kw_only=True):
    """Body of ``POST /v1/campaigns/{id}/recipients``: at most ``UPLOAD_LIMIT`` ids."""

    recipients: list[str]


class UploadAnswer(msgspec.Struct, frozen=True, kw_only=True):
    """Recipients an upload added (a repeated one: what the first added) and the audience."""

    added: int
    audience: int


class Progress(msgspec.Struct, frozen=True, kw_only=True):
    """A campaign and how far it got; ``deliveries`` is null while the read model is away,
    ``eta_seconds`` unless it is generating."""

    id: str
    name: str
    type: str
    state: str  # draft, scheduled, running, paused, cancelled or completed
    audience: int
    generated: int
    skipped: int
    repeated: int
    remaining: int
    deliveries: dict[str, int] | None
    sent: int
    delivered: int
    failed: int
    suppressed: int
    cancelled: int
    rate: float
    eta_seconds: float | None
    rate_limit: int | None
    created_at: datetime
    start_at: datetime | None
    started_at: datetime | None
    ended_at: datetime | None


class InboxToken(msgspec.Struct, frozen=True, kw_only=True):
    """A recipient token, for that recipient's app: it reads the recipient's inbox
    (``Authorization: Bearer <token>``) until ``expires_at`` or until revoked."""

    recipient_id: str
    token: str
    expires_at: datetime


class InboxTokensRevoked(msgspec.Struct, frozen=True, kw_only=True):
    """Every token of the recipient made before ``revoked_before`` is refused from now on."""

    recipient_id: str
    revoked_before: datetime


class ErrorBody(msgspec.Struct, frozen=True, kw_only=True):
    """Every error answer: ``{"status_code": …, "detail": "<what is wrong>"}``."""

    status_code: int
    detail: str


def with_key(notification: Notification, key: str) -> BatchItem:
    """``notification`` as a batch item under ``key``."""
    return BatchItem(**msgspec.structs.asdict(notification), idempotency_key=key)
