"""One example of every event class, for the tests of the event contract and its encoding."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from streams.core.events import (
    AddressSuppressed,
    AddressUnsuppressed,
    CampaignAudienceAdded,
    CampaignBatchGenerated,
    CampaignCreated,
    CampaignStateChanged,
    DeliveryAttemptFailed,
    DeliveryCancelled,
    DeliveryDeadLettered,
    DeliveryDeferred,
    DeliveryDigested,
    DeliveryDue,
    DeliveryExpired,
    DeliveryFailed,
    DeliveryQueued,
    DeliveryReplayed,
    DeliveryScheduled,
    DeliverySent,
    DeliverySkipped,
    DeliverySuppressed,
    DeliveryThrottled,
    DigestClosed,
    Event,
    InboxMessageArchived,
    InboxMessageCreated,
    InboxMessageRead,
    InboxMessageSeen,
    InboxMessageUnarchived,
    InboxMessageUnread,
    NotificationAccepted,
    NotificationDigested,
    PreferenceChanged,
    PreferenceEntry,
    ProviderFeedbackReceived,
    QuietHoursSetting,
    RecipientAddressInvalidated,
    RecipientErased,
    RecipientProfileChanged,
)

AT = datetime(2026, 1, 15, 9, 30, 0, 125000, tzinfo=UTC)
NID = "019bc123-4567-7abc-8def-0123456789ab"
DID = "019bc123-4567-7abc-8def-0123456789a0"
CID = "019bc123-4567-7abc-8def-0123456789c1"
DELIVERY = {"notification_id": NID, "delivery_id": DID, "version": 2}

EXAMPLES: list[Event] = [
    NotificationAccepted(
        at=AT,
        notification_id=NID,
        producer="orders",
        idempotency_key="order-1001",
        notification_type="order_confirmed",
        priority="NORMAL",
        recipient_id="user-42",
        locale="de-CH",
        expires_at=AT + timedelta(days=2),
        delivery_ids=[DID],
    ),
    DeliveryQueued(at=AT, **DELIVERY, channel="EMAIL", priority="LOW", attempt=3),
    DeliveryDeferred(
        at=AT, **DELIVERY, channel="PUSH", reason="rate_limited", until=AT + timedelta(seconds=5)
    ),
    DeliverySuppressed(at=AT, **DELIVERY, channel="SMS", reason="opted_out"),
    DeliveryScheduled(
        at=AT, **DELIVERY, channel="EMAIL", priority="NORMAL", until=AT + timedelta(hours=1)
    ),
    DeliveryDue(at=AT, **DELIVERY, channel="EMAIL", scheduled_for=AT - timedelta(seconds=1)),
    # An escalation step, and a fallback of another delivery (due at once).
    DeliveryScheduled(
        at=AT,
        **DELIVERY,
        channel="SMS",
        priority="HIGH",
        until=AT + timedelta(minutes=15),
        step=2,
        unless=["read", "delivered"],
    ),
    DeliveryScheduled(
        at=AT, **DELIVERY, channel="PUSH", priority="HIGH", until=AT, fallback_of=CID
    ),
    DeliverySkipped(at=AT, **DELIVERY, channel="SMS", step=2, reason="read", because_of=CID),
    DeliverySkipped(at=AT, **DELIVERY, channel="EMAIL", step=3, reason="delivered"),
    DeliveryDigested(at=AT, **DELIVERY, channel="EMAIL"),
    NotificationDigested(
        at=AT,
        notification_id=NID,
        digest_id="9f2c4e1a7b3d5f60",
        recipient_id="u-1",
        notification_type="comment",
        count=12,
        closes_at=AT,
    ),
    DigestClosed(
        at=AT,
        digest_id="9f2c4e1a7b3d5f60",
        recipient_id="u-1",
        notification_type="comment",
        count=12,
        notification_id=NID,
    ),
    DigestClosed(
        at=AT,
        digest_id="9f2c4e1a7b3d5f61",
        recipient_id="u-1",
        notification_type="comment",
        count=0,
        notification_id="",
    ),
    DeliveryAttemptFailed(
        at=AT, **DELIVERY, attempt=1, error_class="TRANSIENT", error="503", retry_at=AT
    ),
    DeliveryAttemptFailed(at=AT, **DELIVERY, attempt=2, error_class="BUG", error="KeyError"),
    DeliverySent(at=AT, **DELIVERY, attempt=1, provider="sandbox", provider_message_id="m-1"),
    DeliveryFailed(at=AT, **DELIVERY, attempts=6, error_class="PERMANENT", error="bounced"),
    DeliveryExpired(at=AT, **DELIVERY, channel="IN_APP"),
    DeliveryCancelled(at=AT, **DELIVERY, channel="EMAIL", campaign_id=CID),
    DeliveryCancelled(
        at=AT,
        **DELIVERY,
        channel="SMS",
        campaign_id="",
        cancelled_by="orders",
        cancellation_key="order-123",
    ),
    DeliveryDeadLettered(at=AT, **DELIVERY, error_class="POISON"),
    DeliveryThrottled(
        at=AT,
        **DELIVERY,
        channel="EMAIL",
        notification_type="marketing",
        action="defer",
        limit=3,
        per_seconds=3600,
        scope="t:marketing",
        until=AT + timedelta(minutes=20),
    ),
    DeliveryReplayed(at=AT, **DELIVERY, operator="alice", reason="fixed"),
    ProviderFeedbackReceived(at=AT, **DELIVERY, feedback="token_invalid", provider="sandbox"),
    PreferenceChanged(
        at=AT,
        recipient_id="user-42",
        settings_version=3,
        preferences=[PreferenceEntry(type="marketing", channel="EMAIL", enabled=False)],
        quiet_hours=QuietHoursSetting(start="22:00", end="08:00", timezone="Europe/Berlin"),
    ),
    PreferenceChanged(at=AT, recipient_id="user-42", settings_version=4, quiet_hours_removed=True),
    PreferenceChanged(
        at=AT,
        recipient_id="user-42",
        settings_version=7,
        preferences=[PreferenceEntry(type="order_confirmed", channel="EMAIL", enabled=False)],
        source="unsubscribe_link",
    ),
    RecipientAddressInvalidated(
        at=AT,
        recipient_id="user-42",
        settings_version=5,
        channel="PUSH",
        address_digest="3f79bb7b435b0532",
    ),
    ProviderFeedbackReceived(
        at=AT,
        **DELIVERY,
        feedback="delivered",
        provider="twilio",
        status="DELIVERED",
        feedback_id="SM1-delivered",
    ),
    RecipientProfileChanged(
        at=AT, recipient_id="user-42", settings_version=6, changed=["email", "attributes"]
    ),
    RecipientErased(at=AT, recipient_id="user-42", deliveries_ended=2),
    InboxMessageCreated(
        at=AT,
        **DELIVERY,
        recipient_id="user-42",
        title="Shipped",
        body="Order 7 is on its way.",
        action_url="https://shop.example/o/7",
        data={"order": "7"},
        notification_type="order_shipped",
    ),
    InboxMessageRead(at=AT, **DELIVERY, recipient_id="user-42", status="READ"),
    InboxMessageUnread(at=AT, **DELIVERY, recipient_id="user-42", status="SENT"),
    InboxMessageSeen(at=AT, **DELIVERY, recipient_id="user-42", status="SENT"),
    InboxMessageArchived(at=AT, **DELIVERY, recipient_id="user-42", status="READ"),
    InboxMessageUnarchived(at=AT, **DELIVERY, recipient_id="user-42", status="READ"),
    AddressSuppressed(
        at=AT,
        channel="EMAIL",
        address_digest="3f79bb7b435b0532",
        reason="complaint",
        source="feedback:sendgrid",
        until=AT + timedelta(days=30),
    ),
    AddressUnsuppressed(
        at=AT, channel="EMAIL", address_digest="3f79bb7b435b0532", source="admin:ops"
    ),
    CampaignCreated(
        at=AT,
        campaign_id=CID,
        producer="marketing",
        notification_type="weekly_digest",
        audience="segment",
        start_at=AT + timedelta(hours=1),
        rate=500,
    ),
    CampaignAudienceAdded(at=AT, campaign_id=CID, recipients=1000, audience=21000),
    CampaignStateChanged(
        at=AT, campaign_id=CID, state="paused", previous="running", by="marketing"
    ),
    CampaignBatchGenerated(at=AT, campaign_id=CID, batch=7, accepted=990, repeated=6, skipped=4),
]
