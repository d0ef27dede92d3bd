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

from streams.core.vocabulary import CampaignState, Channel, DeliveryStatus, ErrorClass, Priority

# Why a delivery is never sent. The first four are decided by fan-out; the next ones are the
# reasons an address is on the suppression list (``AddressSuppressed``; "stop": the recipient
# texted STOP); "erased": the recipient was erased while the delivery waited; "throttled": the
# recipient had its type's (or the default) cap of deliveries in the window already.
SuppressReason = Literal[
    "no_address", "opted_out", "invalid_address", "no_provider",
    "hard_bounce", "complaint", "unsubscribed", "invalid_token", "stop",
    "erased", "throttled",
]  # fmt: skip
# Why an address is on the suppression list ("invalid_address": a provider said a phone number
# or URL is dead; "invalid_token": the same of a push target).
SuppressionReason = Literal[
    "hard_bounce", "complaint", "unsubscribed", "invalid_token", "invalid_address", "stop"
]
# What makes an escalation step unneeded when it comes due: an earlier step's delivery was
# read (IN_APP), or confirmed delivered by provider feedback (or read).
StepCondition = Literal["read", "delivered"]
# Why a delivery waits ("awaiting_address": its type waits for the recipient's profile to give
# an address, ``await_address_seconds`` in the catalog; "throttled": it waits until the
# recipient's throttle window allows it).
DeferReason = Literal[
    "quiet_hours", "rate_limited", "circuit_open", "bulkhead_full", "no_provider",
    "awaiting_address", "throttled",
]  # fmt: skip


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
    unless: list[StepCondition] = []
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
    data: dict[str, str] = {}
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


class CampaignCreated(Event, frozen=True, kw_only=True):
    campaign_id: str
    producer: str
    notification_type: str
    # Where its recipients come from: uploaded ids ("list") or a profile segment.
    audience: Literal["list", "segment"]
    start_at: datetime | None = None
    rate: int = 0  # recipients a second (0: as fast as it goes)


class CampaignAudienceAdded(Event, frozen=True, kw_only=True):
    """Recipients added to a campaign: an upload, or the recipients a segment selected."""

    campaign_id: str
    recipients: int
    audience: int  # the audience's size after them


class CampaignStateChanged(Event, frozen=True, kw_only=True):
    campaign_id: str
    state: CampaignState
    previous: CampaignState
    by: str = ""  # the producer that asked, or "generator"


class CampaignBatchGenerated(Event, frozen=True, kw_only=True):
    """A batch of a campaign's recipients turned into notifications."""

    campaign_id: str
    batch: int  # its position in the audience, from 0
    accepted: int  # notifications ingested
    repeated: int  # recipients that already had theirs (listed twice, or a batch run again)
    skipped: int  # recipients refused (no address for the type's channels, ...)


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
