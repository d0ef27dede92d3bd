"""Decisions about a leased delivery: plain values, each naming the status its outcome
records and, for a failed attempt, the error class."""

from __future__ import annotations

from datetime import UTC, datetime

from streams.core.vocabulary import ErrorClass
from streams.delivery.decisions import (
    AcknowledgeOnly,
    Cancelled,
    Deferred,
    Expired,
    Failed,
    RetryAt,
    Sent,
    SentToInbox,
)
from streams.inbox.messages import InboxMessage

MESSAGE = InboxMessage(
    id="d", notification_id="n", type="otp", title="t", body="b",
    created_at=datetime(2026, 1, 1, tzinfo=UTC),
)  # fmt: skip


def test_each_decision_names_the_status_it_records_and_any_error_class() -> None:
    decisions = [
        (Sent("a", "m-1"), "SENT", None),
        (SentToInbox("inbox", MESSAGE, keep=1, ttl_ms=1, feed=(1, 1)), "SENT", None),
        (RetryAt(9_000, ErrorClass.TRANSIENT, "503"), "SCHEDULED", ErrorClass.TRANSIENT),
        (Failed(ErrorClass.PERMANENT, "no", attempts=1), "FAILED", ErrorClass.PERMANENT),
        (Deferred(9_000), "SCHEDULED", None),
        (Expired(), "EXPIRED", None),
        (Cancelled(), "CANCELLED", None),
        (AcknowledgeOnly(), None, None),
    ]
    for decision, status, error_class in decisions:
        assert (decision.status, decision.error_class) == (status, error_class), decision


def test_decisions_are_values() -> None:
    assert Deferred(9_000) == Deferred(9_000, "rate_limited")
    assert Expired() == Expired("ttl")
    assert RetryAt(1, ErrorClass.TRANSIENT, "x") != RetryAt(1, ErrorClass.TRANSIENT, "x", "a")
    assert hash(Sent("a", "m")) == hash(Sent("a", "m"))
