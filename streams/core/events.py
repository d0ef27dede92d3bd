"""The event contract: every state change Clarion records, as tagged msgspec Structs.

Rules that keep old stream entries readable forever:
- fields are only ever added, and only with a default;
- a field never changes its type or its meaning;
- ``tests/unit/core/test_events.py`` decodes encoded events kept as fixtures.

Events carry no contact address (email, phone, push token): they are copied into Postgres and
kept for the whole retention period, while addresses live only in short-lived work items.
Every event about a delivery carries that delivery's ``version``, which grows by one per change,
so a projection applies each change once and in order.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

import msgspec

from streams.core.campaign_events import (
    CampaignAudienceAdded,
    CampaignBatchGenerated,
    CampaignCreated,
    CampaignStateChanged,
)
from streams.core.event_base import (
    DeferReason,
    DeliveryEvent,
    Event,
    StepCondition,
    SuppressionReason,
    SuppressReason,
)
from streams.core.vocabulary import Channel, DeliveryStatus, ErrorClass, Priority

__all__ = [
    "CampaignAudienceAdded",
    "CampaignBatchGenerated",
    "CampaignCreated",
    "CampaignStateChanged",
    "DeferReason",
    "DeliveryEvent",
    "Event",
    "StepCondition",
    "SuppressReason",
    "SuppressionReason",
]  # fmt: skip (defined in event_base, named here as before)


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


class DeliveryQueued(DeliveryEvent, frozen=True, kw_only=True, omit_defaults=True):
    # Written for nearly every delivery: fields at their defaults (no retry, no step, no
    # fallback) are left out, the decoder restores them.
    channel: Channel
    priority: Priority
    attempt: int = 0
    # Its place in its type's step chain (0: none); the delivery a fallback replaces ("").
    step: int = 0
    fallback_of: str = ""


class DeliveryDeferred(DeliveryEvent, frozen=True, kw_only=True):
    channel: Channel
    reason: DeferReason
    until: datetime


class DeliveryScheduled(DeliveryEvent, frozen=True, kw_only=True):
    """The producer asked for the delivery to go later (``send_at`` or ``delay``): it waits
    in ``delayed`` until ``until``, when the recipient's preferences and quiet hours are
    looked at again."""

    channel: Channel
    priority: Priority
    until: datetime
    # A step (``steps`` in the catalog): its place in the chain from 1 (0: none) and what
    # skips it when due. A fallback: the delivery whose permanent failure made it ("").
    step: int = 0
    unless: list[StepCondition] = msgspec.field(default_factory=list)
    fallback_of: str = ""


class DeliveryDue(DeliveryEvent, frozen=True, kw_only=True):
    """A scheduled delivery's time came and a worker took it up; what became of it is the
    next event (sent, deferred for quiet hours, suppressed because the recipient opted out
    meanwhile, ...). ``scheduled_for``: the time it was scheduled for (its lateness is
    ``at`` minus that)."""

    channel: Channel
    scheduled_for: datetime


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


class DeliveryCancelled(DeliveryEvent, frozen=True, kw_only=True):
    """The delivery was cancelled before it was handed to a provider: it never will be. By
    its campaign's cancellation (``campaign_id``), or by a cancellation of its notification
    (``campaign_id`` "": by id, or by the ``cancellation_key`` it was sent with).
    ``cancelled_by``: the producer whose call cancelled it ("" in events from before it was
    recorded)."""

    channel: Channel
    campaign_id: str
    cancelled_by: str = ""
    # The notification's cancellation key when it was cancelled by key ("" otherwise).
    cancellation_key: str = ""


class DeliverySkipped(DeliveryEvent, frozen=True, kw_only=True):
    """An escalation step was not needed when it came due, or its notification was read
    before: ``reason`` is the condition that held ("read", "delivered"), and
    ``because_of`` the earlier delivery that was read or delivered ("" when not known)."""

    channel: Channel
    step: int
    reason: StepCondition
    because_of: str = ""


class DeliveryDigested(DeliveryEvent, frozen=True, kw_only=True):
    """Its notification joins a digest (``digest`` in the catalog; ``NotificationDigested``
    names which): not sent itself, the digest's notification is when the digest closes."""

    channel: Channel


class NotificationDigested(Event, frozen=True, kw_only=True):
    """A notification joined digest ``digest_id``, its ``count``-th item; the digest closes
    at ``closes_at`` (sooner when it fills up)."""

    notification_id: str
    digest_id: str
    recipient_id: str
    notification_type: str
    count: int
    closes_at: datetime


class DigestClosed(Event, frozen=True, kw_only=True):
    """A digest closed: ``notification_id`` is the notification made of its ``count`` items
    ("" when every item left it, cancelled, and nothing was made)."""

    digest_id: str
    recipient_id: str
    notification_type: str
    count: int
    notification_id: str


class DeliveryThrottled(DeliveryEvent, frozen=True, kw_only=True):
    """The recipient had ``limit`` deliveries within ``per_seconds`` already (the throttle of
    the type, its category or the deployment's default cap: ``scope``), so this delivery was
    not sent now. Recorded right after the change it made (``DeliverySuppressed`` or
    ``DeliveryDeferred``, reason ``throttled``), as the next version: ``action`` says which;
    ``until``: when a deferred one is tried again."""

    channel: Channel
    notification_type: str
    action: Literal["suppress", "defer"]
    limit: int
    per_seconds: int
    scope: str = ""
    until: datetime | None = None


class DeliveryDeadLettered(DeliveryEvent, frozen=True, kw_only=True):
    """The delivery's work item is in the dead-letter queue (found there by delivery id)."""

    error_class: ErrorClass


class DeliveryReplayed(DeliveryEvent, frozen=True, kw_only=True):
    operator: str
    reason: str


class ProviderFeedbackReceived(DeliveryEvent, frozen=True, kw_only=True):
    """A provider told what became of a delivery it took (a callback matched to it by the
    provider's message id)."""

    feedback: Literal[
        "delivered", "bounced", "undelivered", "complained", "unsubscribed", "token_invalid"
    ]
    provider: str
    detail: str = ""
    # The delivery's status after it: DELIVERED, FAILED, or SENT/DELIVERED as it was (a
    # complaint does not move it); "" in events written before this field.
    status: str = ""
    # The provider's own id of the callback's event, by which a replay is recognised.
    feedback_id: str = ""


class InboxMessageCreated(DeliveryEvent, frozen=True, kw_only=True):
    """An IN_APP delivery put a message into its recipient's inbox (recorded with its
    ``DeliverySent``). It carries the message, which the read model keeps as the inbox's
    history; erasure removes it there."""

    recipient_id: str
    title: str
    body: str
    action_url: str = ""
    data: dict[str, str] = msgspec.field(default_factory=dict)
    notification_type: str = ""


class InboxMessageEvent(DeliveryEvent, frozen=True, kw_only=True):
    """Base of what a recipient did with an inbox message; ``status`` is the delivery's
    status after it (READ once read, SENT again when marked unread)."""

    recipient_id: str
    status: DeliveryStatus


class InboxMessageRead(InboxMessageEvent, frozen=True, kw_only=True):
    pass


class InboxMessageUnread(InboxMessageEvent, frozen=True, kw_only=True):
    pass


class InboxMessageSeen(InboxMessageEvent, frozen=True, kw_only=True):
    pass


class InboxMessageArchived(InboxMessageEvent, frozen=True, kw_only=True):
    pass


class InboxMessageUnarchived(InboxMessageEvent, frozen=True, kw_only=True):
    pass


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
    # Who changed it: "api" (a producer's backend, also for events written before this
    # field, ""), "unsubscribe_link" (the recipient, RFC 8058), "feedback" (a provider's
    # complaint or unsubscribe).
    source: str = ""


class RecipientAddressInvalidated(Event, frozen=True, kw_only=True):
    """A provider said an address is dead (e.g. a push token): fan-out stops using it."""

    recipient_id: str
    settings_version: int
    channel: Channel
    # A digest, not the address: events never carry contact addresses.
    address_digest: str


class RecipientProfileChanged(Event, frozen=True, kw_only=True):
    """A recipient's profile was created or changed. It names the parts that changed, never
    their values: addresses and attributes stay in the profile, which erasure removes."""

    recipient_id: str
    settings_version: int
    # Of email, phone, push_targets, webhook_url, locale, timezone, attributes.
    changed: list[str]


class RecipientErased(Event, frozen=True, kw_only=True):
    """A recipient's profile, settings and addresses were removed (no personal data here)."""

    recipient_id: str
    # Deliveries that were still waiting and end SUPPRESSED ("erased").
    deliveries_ended: int = 0


class AddressSuppressed(Event, frozen=True, kw_only=True):
    """An address went on the suppression list (named by its digest, never itself)."""

    channel: Channel
    address_digest: str
    reason: SuppressionReason
    # Who put it there: "admin:<producer>", "feedback:<provider>", "provider:<provider>".
    source: str
    until: datetime | None = None


class AddressUnsuppressed(Event, frozen=True, kw_only=True):
    """An address came off the suppression list."""

    channel: Channel
    address_digest: str
    source: str


AnyEvent = (
    NotificationAccepted
    | DeliveryQueued
    | DeliveryDeferred
    | DeliveryScheduled
    | DeliveryDue
    | DeliverySuppressed
    | DeliveryAttemptFailed
    | DeliverySent
    | DeliveryFailed
    | DeliveryExpired
    | DeliveryCancelled
    | DeliveryDeadLettered
    | DeliverySkipped
    | DeliveryDigested
    | NotificationDigested
    | DigestClosed
    | DeliveryThrottled
    | DeliveryReplayed
    | ProviderFeedbackReceived
    | InboxMessageCreated
    | InboxMessageRead
    | InboxMessageUnread
    | InboxMessageSeen
    | InboxMessageArchived
    | InboxMessageUnarchived
    | PreferenceChanged
    | RecipientAddressInvalidated
    | RecipientProfileChanged
    | RecipientErased
    | AddressSuppressed
    | AddressUnsuppressed
    | CampaignCreated
    | CampaignAudienceAdded
    | CampaignStateChanged
    | CampaignBatchGenerated
)
