"""The event contract: every state change Clarion records, as tagged msgspec Structs.

Rules that keep old stream entries readable forever:
- fields are only ever added, and only with a default;
- a field never changes its type or its meaning;
- ``tests/unit/test_events.py`` decodes encoded events kept as fixtures.

Events carry no contact address (email, phone, push token): they are copied into Postgres and
kept for the whole retention period, while addresses live only in short-lived work items.
Every event about a delivery carries that delivery's ``version``, which grows by one per change,
so a projection applies each change once and in order.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

import msgspec

from streams.vocabulary import Channel, ErrorClass, Priority

SuppressReason = Literal["no_address", "opted_out", "invalid_address", "no_provider"]
DeferReason = Literal["quiet_hours", "rate_limited", "circuit_open", "bulkhead_full", "no_provider"]


class Event(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    """Base of every event: when it happened."""

    at: datetime


class DeliveryEvent(Event, frozen=True, kw_only=True):
    """Base of events about one delivery."""

    notification_id: str
    delivery_id: str
    version: int


class NotificationAccepted(Event, frozen=True, kw_only=True):
    notification_id: str
    producer: str
    idempotency_key: str
    notification_type: str
    priority: Priority
    recipient_id: str
    locale: str
    expires_at: datetime
    delivery_ids: list[str]


class DeliveryQueued(DeliveryEvent, frozen=True, kw_only=True):
    channel: Channel
    priority: Priority
    attempt: int = 0


class DeliveryDeferred(DeliveryEvent, frozen=True, kw_only=True):
    channel: Channel
    reason: DeferReason
    until: datetime


class DeliverySuppressed(DeliveryEvent, frozen=True, kw_only=True):
    channel: Channel
    reason: SuppressReason


class DeliveryAttemptFailed(DeliveryEvent, frozen=True, kw_only=True):
    attempt: int
    error_class: ErrorClass
    error: str
    retry_at: datetime | None = None
    # The provider the attempt went to ("" for one that failed before any call).
    provider: str = ""


class DeliverySent(DeliveryEvent, frozen=True, kw_only=True):
    attempt: int
    provider: str
    provider_message_id: str
    # SMS: the segments the text took, as the carrier bills them (0 for other channels).
    sms_segments: int = 0


class DeliveryFailed(DeliveryEvent, frozen=True, kw_only=True):
    attempts: int
    error_class: ErrorClass
    error: str
    # The provider of the last attempt ("" when none was called).
    provider: str = ""


class DeliveryExpired(DeliveryEvent, frozen=True, kw_only=True):
    channel: Channel
    reason: str = "ttl"


class DeliveryDeadLettered(DeliveryEvent, frozen=True, kw_only=True):
    """The delivery's work item is in the dead-letter queue (found there by delivery id)."""

    error_class: ErrorClass


class DeliveryReplayed(DeliveryEvent, frozen=True, kw_only=True):
    operator: str
    reason: str


class ProviderFeedbackReceived(DeliveryEvent, frozen=True, kw_only=True):
    feedback: Literal["delivered", "bounced", "complained", "token_invalid"]
    provider: str
    detail: str = ""


class PreferenceEntry(msgspec.Struct, frozen=True, kw_only=True):
    type: str
    channel: Channel
    enabled: bool


class QuietHoursSetting(msgspec.Struct, frozen=True, kw_only=True):
    start: str
    end: str
    timezone: str


class PreferenceChanged(Event, frozen=True, kw_only=True):
    """A recipient's preferences or quiet hours changed; absent parts did not change."""

    recipient_id: str
    settings_version: int
    preferences: list[PreferenceEntry] | None = None
    quiet_hours: QuietHoursSetting | None = None
    quiet_hours_removed: bool = False


class RecipientAddressInvalidated(Event, frozen=True, kw_only=True):
    """A provider said an address is dead (e.g. a push token): fan-out stops using it."""

    recipient_id: str
    settings_version: int
    channel: Channel
    # A digest, not the address: events never carry contact addresses.
    address_digest: str


AnyEvent = (
    NotificationAccepted
    | DeliveryQueued
    | DeliveryDeferred
    | DeliverySuppressed
    | DeliveryAttemptFailed
    | DeliverySent
    | DeliveryFailed
    | DeliveryExpired
    | DeliveryDeadLettered
    | DeliveryReplayed
    | ProviderFeedbackReceived
    | PreferenceChanged
    | RecipientAddressInvalidated
)
