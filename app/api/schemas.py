"""Request and response bodies of the HTTP API (separate from the events they cause)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

import msgspec

from streams.events import Channel, PreferenceEntry, PriorityName
from streams.records import DeliveryAtAcceptance

RecipientId = Annotated[
    str, msgspec.Meta(min_length=1, max_length=255, pattern=r"^[^\x00-\x20\x7f]+$")
]
Email = Annotated[str, msgspec.Meta(max_length=254, pattern=r"^[^@\s]+@[^@\s]+\.[^@\s]+$")]
# E.164: a plus, a country code that does not start with 0, at most 15 digits in all.
Phone = Annotated[str, msgspec.Meta(pattern=r"^\+[1-9][0-9]{6,14}$")]
PushToken = Annotated[
    str, msgspec.Meta(min_length=1, max_length=4096, pattern=r"^[^\x00-\x20\x7f]+$")
]
Locale = Annotated[str, msgspec.Meta(pattern=r"^[a-z]{2,3}(-[A-Za-z0-9]{2,8}){0,2}$")]
TtlSeconds = Annotated[int, msgspec.Meta(ge=1, le=30 * 86400)]


class Recipient(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    id: RecipientId
    email: Email | None = None
    phone: Phone | None = None
    push_tokens: Annotated[list[PushToken], msgspec.Meta(max_length=20)] = []


class NotificationRequest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Body of ``POST /v1/notifications``."""

    recipient: Recipient
    type: Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
    priority: PriorityName | None = None
    channels: Annotated[list[Channel], msgspec.Meta(min_length=1, max_length=4)] | None = None
    locale: Locale | None = None
    ttl_seconds: TtlSeconds | None = None
    data: dict[str, Any] = {}


class BatchItem(NotificationRequest, frozen=True, kw_only=True, forbid_unknown_fields=True):
    idempotency_key: str


class BatchRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Body of ``POST /v1/notifications/batch``; items are validated one by one."""

    notifications: Annotated[list[msgspec.Raw], msgspec.Meta(min_length=1, max_length=1000)]


class BatchRequestSchema(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The batch body as documented in the OpenAPI schema."""

    notifications: Annotated[list[BatchItem], msgspec.Meta(min_length=1, max_length=1000)]


class Accepted(msgspec.Struct, frozen=True):
    """202 answer: the notification id and one entry per delivery (with the reason when it
    was suppressed or expired at once)."""

    id: str
    deliveries: list[DeliveryAtAcceptance]


class BatchResult(msgspec.Struct, frozen=True, omit_defaults=True):
    idempotency_key: str
    status_code: int
    id: str | None = None
    deliveries: list[DeliveryAtAcceptance] | None = None
    detail: str | None = None


class BatchResponse(msgspec.Struct, frozen=True):
    results: list[BatchResult]


class PreferenceItem(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    type: Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
    channel: Channel
    enabled: bool


class PreferencesBody(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    preferences: Annotated[list[PreferenceItem], msgspec.Meta(max_length=1000)]


class QuietHoursBody(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    start: str
    end: str
    timezone: str


class RecipientSettingsView(msgspec.Struct, frozen=True):
    recipient_id: str
    version: int
    preferences: list[PreferenceEntry]
    quiet_hours: QuietHoursBody | None


class DeliveryStatus(msgspec.Struct, frozen=True, kw_only=True):
    """A delivery's current state (``error_class``, ``last_error`` are from its latest
    failed attempt; ``provider_message_id`` is set once it was sent)."""

    id: str
    channel: str | None
    status: str
    attempts: int
    error_class: str | None
    last_error: str | None
    provider_message_id: str | None
    updated_at: datetime


class NotificationStatus(msgspec.Struct, frozen=True, kw_only=True):
    """``GET /v1/notifications/{id}``: the notification and each delivery's state."""

    id: str
    type: str
    priority: str
    recipient_id: str
    created_at: datetime
    deliveries: list[DeliveryStatus]
    projection_lag_ms: int


class DeliveryListItem(DeliveryStatus, frozen=True, kw_only=True):
    notification_id: str
    type: str | None
    producer: str | None


class DeliveryPage(msgspec.Struct, frozen=True, kw_only=True):
    """``GET /v1/deliveries``: one page, newest first; ``next_cursor`` is null on the last."""

    deliveries: list[DeliveryListItem]
    next_cursor: str | None
    projection_lag_ms: int
