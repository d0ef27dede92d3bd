"""What a producer's status webhook says: the due events, their JSON (Standard Webhooks
shape, every key always there, no address), feedback's status, a skipped escalation step, a
delivery digested, and batches."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from app.status_webhooks.payloads import (
    batch_body,
    batch_webhook_id,
    body,
    carried_channel,
    is_due,
)
from streams.core.events import (
    DeliveryAttemptFailed,
    DeliveryCancelled,
    DeliveryDeadLettered,
    DeliveryDigested,
    DeliveryExpired,
    DeliveryFailed,
    DeliveryQueued,
    DeliveryReplayed,
    DeliveryScheduled,
    DeliverySent,
    DeliverySkipped,
    DeliverySuppressed,
    DigestClosed,
    Event,
    NotificationDigested,
    ProviderFeedbackReceived,
)
from streams.core.vocabulary import Channel, ErrorClass, Priority
from tests.unit.event_examples import EXAMPLES

AT = datetime(2026, 12, 3, 17, 4, 5, 123000, tzinfo=UTC)
IDS = {"notification_id": "n-1", "delivery_id": "d-1", "at": AT}
KEYS = {
    "notification_id", "delivery_id", "notification_type", "channel", "status", "version",
    "attempts", "reason", "error_class", "error", "provider", "provider_message_id", "feedback",
}  # fmt: skip


def decoded(event: Event, channel: str = "SMS") -> dict[str, object]:
    payload: dict[str, object] = json.loads(body(event, "otp", channel))  # type: ignore[arg-type]
    return payload


def test_final_statuses_and_feedback_are_due_nothing_else() -> None:
    due = {type(e).__name__ for e in EXAMPLES if is_due(e)}
    assert due == {
        "DeliverySent", "DeliveryFailed", "DeliveryExpired", "DeliverySuppressed",
        "DeliveryCancelled", "DeliverySkipped", "DeliveryDigested", "ProviderFeedbackReceived",
    }  # fmt: skip
    for event in (
        DeliveryQueued(**IDS, version=1, channel=Channel.SMS, priority=Priority.HIGH),
        DeliveryAttemptFailed(**IDS, version=2, attempt=1, error_class=ErrorClass.TRANSIENT,
                              error="503"),
        DeliveryDeadLettered(**IDS, version=4, error_class=ErrorClass.PERMANENT),
        DeliveryReplayed(**IDS, version=5, operator="anna", reason="fixed"),
        DeliveryScheduled(**IDS, version=1, channel=Channel.SMS, priority=Priority.HIGH,
                          until=AT, step=2, unless=["read"]),
        # A digest's own events are about no delivery: its deliveries are told themselves.
        NotificationDigested(at=AT, notification_id="n-1", digest_id="g-1", recipient_id="u-1",
                             notification_type="comment", count=1, closes_at=AT),
        DigestClosed(at=AT, digest_id="g-1", recipient_id="u-1", notification_type="comment",
                     count=1, notification_id="n-2"),
    ):  # fmt: skip
        assert not is_due(event)


def test_a_sent_delivery() -> None:
    event = DeliverySent(**IDS, version=3, attempt=2, provider="twilio", provider_message_id="SM1")
    assert decoded(event) == {
        "type": "delivery.sent",
        "timestamp": "2026-12-03T17:04:05.123000Z",
        "data": {
            "notification_id": "n-1", "delivery_id": "d-1", "notification_type": "otp",
            "channel": "SMS", "status": "SENT", "version": 3, "attempts": 2, "reason": "",
            "error_class": "", "error": "", "provider": "twilio", "provider_message_id": "SM1",
            "feedback": "",
        },
    }  # fmt: skip


@pytest.mark.parametrize(
    ("event", "kind", "expected"),
    [
        (
            DeliveryFailed(**IDS, version=4, attempts=6, error_class=ErrorClass.PERMANENT,
                           error="21211: invalid 'To' <phone>", provider="twilio"),
            "delivery.failed",
            {"status": "FAILED", "attempts": 6, "error_class": "PERMANENT",
             "error": "21211: invalid 'To' <phone>", "provider": "twilio"},
        ),
        (
            DeliveryExpired(**IDS, version=2, channel=Channel.SMS, reason="quiet_hours_past_ttl"),
            "delivery.expired",
            {"status": "EXPIRED", "reason": "quiet_hours_past_ttl"},
        ),
        (
            DeliverySuppressed(**IDS, version=1, channel=Channel.SMS, reason="opted_out"),
            "delivery.suppressed",
            {"status": "SUPPRESSED", "reason": "opted_out"},
        ),
        (
            DeliverySuppressed(**IDS, version=2, channel=Channel.SMS, reason="throttled"),
            "delivery.suppressed",
            {"status": "SUPPRESSED", "reason": "throttled"},
        ),
        (
            DeliveryCancelled(**IDS, version=2, channel=Channel.SMS, campaign_id="c-7"),
            "delivery.cancelled",
            {"status": "CANCELLED", "channel": "SMS", "attempts": 0,
             "reason": "campaign c-7 cancelled"},
        ),
        (
            DeliveryCancelled(**IDS, version=2, channel=Channel.SMS, campaign_id="",
                              cancelled_by="shop", cancellation_key="order-9"),
            "delivery.cancelled",
            {"status": "CANCELLED", "reason": "cancelled by key order-9 by shop"},
        ),
        (
            DeliverySkipped(**IDS, version=3, channel=Channel.SMS, step=2, reason="read",
                            because_of="d-0"),
            "delivery.skipped",
            {"status": "SKIPPED", "channel": "SMS", "attempts": 0, "reason": "read"},
        ),
        (
            DeliverySkipped(**IDS, version=2, channel=Channel.EMAIL, step=3,
                            reason="delivered"),
            "delivery.skipped",
            {"status": "SKIPPED", "channel": "SMS", "reason": "delivered", "error": ""},
        ),
        (
            DeliveryDigested(**IDS, version=1, channel=Channel.SMS),
            "delivery.digested",
            {"status": "DIGESTED", "channel": "SMS", "attempts": 0, "reason": "digest",
             "provider": ""},
        ),
        (
            ProviderFeedbackReceived(**IDS, version=5, feedback="delivered", provider="twilio",
                                     status="DELIVERED"),
            "delivery.feedback",
            {"status": "DELIVERED", "feedback": "delivered", "provider": "twilio"},
        ),
        (
            ProviderFeedbackReceived(**IDS, version=6, feedback="complained", provider="ses",
                                     status="SENT", detail="from anna@example.com"),
            "delivery.feedback",
            {"status": "SENT", "feedback": "complained", "provider": "ses",
             "error": "from <email>"},
        ),
        (  # written before feedback said the status after it: as the read model reads it
            ProviderFeedbackReceived(**IDS, version=5, feedback="delivered", provider="fcm"),
            "delivery.feedback",
            {"status": "DELIVERED", "feedback": "delivered", "provider": "fcm"},
        ),
    ],
)  # fmt: skip
def test_each_kind_says_what_its_event_says(
    event: Event, kind: str, expected: dict[str, object]
) -> None:
    payload = decoded(event)
    data = payload["data"]
    assert isinstance(data, dict)
    assert payload["type"] == kind
    assert set(data) == KEYS  # every key, always
    assert {key: data[key] for key in expected} == expected
    assert data["version"] == event.version  # type: ignore[attr-defined]


def test_the_channel_comes_from_the_event_when_it_names_one() -> None:
    suppressed = DeliverySuppressed(**IDS, version=1, channel=Channel.EMAIL, reason="no_address")
    sent = DeliverySent(**IDS, version=3, attempt=1, provider="p", provider_message_id="m")
    cancelled = DeliveryCancelled(**IDS, version=2, channel=Channel.PUSH, campaign_id="c-7")
    skipped = DeliverySkipped(**IDS, version=2, channel=Channel.SMS, step=2, reason="read")
    digested = DeliveryDigested(**IDS, version=1, channel=Channel.EMAIL)
    assert carried_channel(suppressed) == Channel.EMAIL
    assert carried_channel(cancelled) == Channel.PUSH
    assert carried_channel(skipped) == Channel.SMS
    assert carried_channel(digested) == Channel.EMAIL
    assert carried_channel(sent) is None


def test_a_batch_holds_each_status_body_as_it_is() -> None:
    bodies = [
        body(DeliverySent(**IDS, version=v, attempt=1, provider="p", provider_message_id="m"),
             "otp", "SMS")
        for v in (3, 4)
    ]  # fmt: skip
    batch = json.loads(batch_body(bodies, AT))
    assert batch["type"] == "delivery.batch"
    assert batch["timestamp"] == "2026-12-03T17:04:05.123000Z"
    assert batch["data"] == [json.loads(b) for b in bodies]


def test_a_batch_id_names_its_statuses() -> None:
    first = batch_webhook_id(["d-1.3", "d-2.2"])
    assert first == batch_webhook_id(["d-1.3", "d-2.2"])  # sent again: the same batch
    assert first != batch_webhook_id(["d-1.3", "d-2.2", "d-3.1"])  # cut otherwise: another
    assert first.startswith("batch_")
