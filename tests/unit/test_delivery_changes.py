"""What an event about a delivery changes in its read-model row: feedback moves it as the
event says (DELIVERED; FAILED with the feedback as reason, its error class and text), an
event written before feedback carried its status still reads as it did, a cancellation ends
it CANCELLED, an escalation step not needed ends SKIPPED with the condition that held, and
the event that makes a step or a fallback says which (and so does its reason while it
waits, or the queued event of a step queued at once), and a delivery that joined a digest
ends DIGESTED."""

from __future__ import annotations

from datetime import UTC, datetime

from projections.delivery_changes import CHANGE_OF, UNKNOWN
from streams.core.events import (
    DeliveryCancelled,
    DeliveryDigested,
    DeliveryDue,
    DeliveryQueued,
    DeliveryScheduled,
    DeliverySent,
    DeliverySkipped,
    DeliveryThrottled,
    ProviderFeedbackReceived,
)

AT = datetime(2026, 1, 15, 9, 30, tzinfo=UTC)
IDS = {"notification_id": "n", "delivery_id": "d", "version": 3}


def change(event: object) -> dict[str, object]:
    names = ("status", "channel", "priority", "reason", "attempts", "error_class", "last_error",
             "provider", "message_id", "sent_at", "failed_at", "due_at", "step",
             "fallback_of")  # fmt: skip
    values = CHANGE_OF[type(event)](event)  # type: ignore[index]
    return {name: value for name, value in zip(names, values, strict=True) if value is not None}


def feedback(kind: str, status: str = "", detail: str = "") -> ProviderFeedbackReceived:
    return ProviderFeedbackReceived(
        at=AT,
        **IDS,
        feedback=kind,
        provider="sms",
        status=status,
        detail=detail,  # type: ignore[arg-type]
    )


def test_feedback_moves_the_row_as_the_event_says() -> None:
    assert change(feedback("delivered", "DELIVERED")) == {
        "status": "DELIVERED",
        "reason": "delivered",
    }
    assert change(feedback("bounced", "FAILED", "550 no such user")) == {
        "status": "FAILED", "reason": "bounced", "error_class": "PERMANENT",
        "last_error": "bounced: 550 no such user", "failed_at": AT,
    }  # fmt: skip
    assert change(feedback("complained", "DELIVERED")) == {
        "status": "DELIVERED", "reason": "complained",
    }  # fmt: skip


def test_feedback_written_before_its_status_field_reads_as_it_did() -> None:
    assert change(feedback("delivered"))["status"] == "DELIVERED"
    assert change(feedback("bounced"))["status"] == "SENT"


def test_a_send_and_an_unknown_event() -> None:
    sent = DeliverySent(at=AT, **IDS, attempt=1, provider="sms", provider_message_id="SM1")
    assert change(sent) == {"status": "SENT", "attempts": 1, "provider": "sms",
                            "message_id": "SM1", "sent_at": AT}  # fmt: skip
    assert UNKNOWN[0] == "QUEUED"


def test_a_cancellation_ends_the_row_cancelled() -> None:
    cancelled = DeliveryCancelled(at=AT, **IDS, channel="EMAIL", campaign_id="c-7")
    assert change(cancelled) == {
        "status": "CANCELLED", "channel": "EMAIL", "reason": "campaign c-7 cancelled"
    }  # fmt: skip
    by = DeliveryCancelled(at=AT, **IDS, channel="EMAIL", campaign_id="c-7", cancelled_by="shop")
    assert change(by)["reason"] == "campaign c-7 cancelled by shop"


def test_a_scheduled_delivery_shows_when_it_is_due_until_it_comes_due() -> None:
    until = datetime(2026, 1, 15, 10, 30, tzinfo=UTC)
    scheduled = DeliveryScheduled(at=AT, **IDS, channel="EMAIL", priority="LOW", until=until)
    assert change(scheduled) == {
        "status": "SCHEDULED", "channel": "EMAIL", "priority": "LOW", "reason": "scheduled",
        "due_at": until,
    }  # fmt: skip
    due = DeliveryDue(at=until, **IDS, channel="EMAIL", scheduled_for=until)
    assert change(due) == {"status": "QUEUED", "channel": "EMAIL", "reason": "due"}


def test_a_cancellation_by_key_says_so() -> None:
    cancelled = DeliveryCancelled(
        at=AT, **IDS, channel="SMS", campaign_id="", cancelled_by="shop", cancellation_key="o-1"
    )
    assert change(cancelled)["reason"] == "cancelled by key o-1 by shop"


def test_a_throttled_delivery_reads_as_the_change_it_follows() -> None:
    def throttled(action: str) -> DeliveryThrottled:
        return DeliveryThrottled(
            at=AT, **IDS, channel="EMAIL", notification_type="news", action=action,  # type: ignore[arg-type]
            limit=3, per_seconds=3600, scope="t:news",
        )  # fmt: skip

    assert change(throttled("suppress")) == {
        "status": "SUPPRESSED", "channel": "EMAIL", "reason": "throttled",
    }  # fmt: skip
    assert change(throttled("defer")) == {
        "status": "SCHEDULED", "channel": "EMAIL", "reason": "throttled",
    }  # fmt: skip


def test_a_step_not_needed_ends_skipped_with_the_condition_that_held() -> None:
    skipped = DeliverySkipped(at=AT, **IDS, channel="SMS", step=2, reason="read", because_of="d-1")
    assert change(skipped) == {"status": "SKIPPED", "channel": "SMS", "reason": "read", "step": 2}
    delivered = DeliverySkipped(at=AT, **IDS, channel="EMAIL", step=3, reason="delivered")
    assert change(delivered)["reason"] == "delivered"


def test_the_event_that_makes_a_step_or_a_fallback_says_which() -> None:
    until = datetime(2026, 1, 15, 10, 30, tzinfo=UTC)
    step = DeliveryScheduled(
        at=AT, **IDS, channel="SMS", priority="HIGH", until=until, step=2, unless=["read"]
    )
    assert change(step) == {
        "status": "SCHEDULED", "channel": "SMS", "priority": "HIGH", "reason": "step",
        "due_at": until, "step": 2,
    }  # fmt: skip
    fallback = DeliveryScheduled(
        at=AT, **IDS, channel="SMS", priority="HIGH", until=AT, fallback_of="d-email"
    )
    assert change(fallback) == {
        "status": "SCHEDULED", "channel": "SMS", "priority": "HIGH", "reason": "fallback",
        "due_at": AT, "fallback_of": "d-email",
    }  # fmt: skip
    # Neither: the row keeps its defaults (step 0, no fallback_of).
    plain = DeliveryScheduled(at=AT, **IDS, channel="SMS", priority="HIGH", until=until)
    assert "step" not in change(plain)
    assert "fallback_of" not in change(plain)

    first_step = DeliveryQueued(at=AT, **IDS, channel="IN_APP", priority="NORMAL", step=1)
    assert change(first_step) == {
        "status": "QUEUED", "channel": "IN_APP", "priority": "NORMAL", "step": 1,
    }  # fmt: skip
    plain_queued = DeliveryQueued(at=AT, **IDS, channel="IN_APP", priority="NORMAL")
    assert "step" not in change(plain_queued)


def test_a_delivery_whose_notification_joined_a_digest_ends_digested() -> None:
    digested = DeliveryDigested(at=AT, **IDS, channel="EMAIL")
    assert change(digested) == {"status": "DIGESTED", "channel": "EMAIL", "reason": "digest"}
