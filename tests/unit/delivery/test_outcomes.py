"""The outcomes of a leased delivery: the state each records, its events numbered after the
version the lease found, and its ``delayed`` member or dead letter."""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec

from streams.core import codec
from streams.core.events import (
    AnyEvent,
    DeliveryAttemptFailed,
    DeliveryCancelled,
    DeliveryDeadLettered,
    DeliveryDeferred,
    DeliveryExpired,
    DeliveryFailed,
    DeliverySent,
    DeliverySuppressed,
)
from streams.core.vocabulary import ErrorClass, Priority
from streams.delivery import outcomes as delivery_outcomes
from streams.delivery.decisions import (
    AcknowledgeOnly,
    Cancelled,
    Deferred,
    Expired,
    Failed,
    RetryAt,
    Sent,
    SentToInbox,
    Suppressed,
)
from streams.delivery.delayed import work_item_of_member
from streams.delivery.outcomes import MAX_ERROR_TEXT
from streams.delivery.store import Outcome
from streams.inbox.messages import InboxMessage
from tests.unit.delivery_examples import ITEM, leased

NOW = 6_000
LATER = 9_000
ENDS_THE_LEASE = {"lease_owner": "", "lease_until": 0, "leases": 0, "updated_ms": NOW}


def events(outcome: Outcome) -> list[AnyEvent]:
    return codec.decode_events(outcome.events) if outcome.events else []


def at(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


def test_a_send_counts_the_attempt_and_keeps_the_first_attempt_time() -> None:
    outcome = delivery_outcomes.sent(leased(version=2, attempts=1), "sandbox", "m-1", NOW)
    [event] = events(outcome)
    assert event == DeliverySent(
        at=at(NOW), notification_id="n", delivery_id="d", version=3, attempt=2,
        provider="sandbox", provider_message_id="m-1",
    )  # fmt: skip
    assert outcome.fields == {
        "status": "SENT", "attempts": 2, "provider": "sandbox", "provider_message_id": "m-1",
        "first_attempt_ms": 4_000, "last_attempt_ms": NOW, "version": 3, **ENDS_THE_LEASE,
    }  # fmt: skip
    assert (outcome.expected_version, outcome.entry_id) == (2, "1-0")
    assert (outcome.delayed_member, outcome.dead_letter) == (b"", {})


def test_the_first_attempt_is_stamped_now_when_there_was_none() -> None:
    outcome = delivery_outcomes.sent(leased(attempts=0, first_attempt_ms=0), "sandbox", "m", NOW)
    assert (outcome.fields["first_attempt_ms"], outcome.fields["attempts"]) == (NOW, 1)


def test_an_expiry_records_why_and_counts_no_attempt() -> None:
    outcome = delivery_outcomes.expired(leased(version=4), NOW)
    assert events(outcome) == [
        DeliveryExpired(at=at(NOW), notification_id="n", delivery_id="d", version=5,
                        channel="SMS", reason="ttl"),
    ]  # fmt: skip
    assert outcome.fields == {"status": "EXPIRED", "reason": "ttl", "version": 5, **ENDS_THE_LEASE}
    reason = delivery_outcomes.expired(leased(), NOW, reason="quiet_hours_past_ttl")
    assert reason.fields["reason"] == "quiet_hours_past_ttl"


def test_a_cancellation_names_the_campaign_counts_no_attempt_and_frees_shared_data() -> None:
    held = leased(version=3, campaign="c-7", shared_data=True, data={})
    outcome = delivery_outcomes.cancelled(held, NOW)
    assert events(outcome) == [
        DeliveryCancelled(at=at(NOW), notification_id="n", delivery_id="d", version=4,
                          channel="SMS", campaign_id="c-7"),
    ]  # fmt: skip
    assert outcome.fields == {
        "status": "CANCELLED", "reason": "campaign c-7 cancelled", "version": 4, **ENDS_THE_LEASE
    }  # fmt: skip
    assert (outcome.entry_id, outcome.expected_version) == ("1-0", 3)  # acknowledged with it
    assert (outcome.delayed_member, outcome.dead_letter) == (b"", {})
    assert outcome.releases_data == held.shard.data("n")


def test_a_cancellation_names_who_cancelled_when_the_marker_said() -> None:
    decision = delivery_outcomes.outcome(
        leased(version=3, campaign="c-7"), Cancelled(by="shop"), NOW
    )
    [event] = events(decision)
    assert isinstance(event, DeliveryCancelled)
    assert event.cancelled_by == "shop"
    assert decision.fields["reason"] == "campaign c-7 cancelled by shop"


def test_a_rate_limited_delivery_waits_in_delayed_without_counting_an_attempt() -> None:
    outcome = delivery_outcomes.deferred(leased(version=2, attempts=1), LATER, NOW)
    assert events(outcome) == [
        DeliveryDeferred(at=at(NOW), notification_id="n", delivery_id="d", version=3,
                         channel="SMS", reason="rate_limited", until=at(LATER)),
    ]  # fmt: skip
    assert outcome.fields == {"status": "SCHEDULED", "due_ms": LATER, "version": 3,
                              **ENDS_THE_LEASE}  # fmt: skip
    assert outcome.delayed_member.startswith(b"high ")
    assert codec.decode_work_item(work_item_of_member(outcome.delayed_member)) == ITEM
    assert outcome.due_ms == LATER


def test_a_delivery_waiting_on_for_an_address_moves_its_due_time_without_an_event() -> None:
    decision = Deferred(LATER, "awaiting_address", event=False)
    outcome = delivery_outcomes.outcome(leased(version=1), decision, NOW)
    assert outcome.events == b""
    assert outcome.fields == {"status": "SCHEDULED", "due_ms": LATER, "version": 1,
                              **ENDS_THE_LEASE}  # fmt: skip
    assert (outcome.due_ms, outcome.expected_version) == (LATER, 1)
    assert codec.decode_work_item(work_item_of_member(outcome.delayed_member)) == ITEM


def test_a_delivery_that_waited_for_an_address_in_vain_ends_suppressed() -> None:
    outcome = delivery_outcomes.outcome(leased(version=1), Suppressed("no_address"), NOW)
    assert events(outcome) == [
        DeliverySuppressed(at=at(NOW), notification_id="n", delivery_id="d", version=2,
                           channel="SMS", reason="no_address"),
    ]  # fmt: skip
    assert outcome.fields == {"status": "SUPPRESSED", "reason": "no_address", "version": 2,
                              **ENDS_THE_LEASE}  # fmt: skip
    assert outcome.delayed_member == b""


def test_a_retry_counts_the_attempt_in_the_state_and_in_the_work_item() -> None:
    held = leased(version=3, attempts=1, priority=Priority.LOW)
    outcome = delivery_outcomes.retry_later(held, ErrorClass.TRANSIENT, "503", LATER, NOW)
    assert events(outcome) == [
        DeliveryAttemptFailed(at=at(NOW), notification_id="n", delivery_id="d", version=4,
                              attempt=2, error_class="TRANSIENT", error="503",
                              retry_at=at(LATER)),
    ]  # fmt: skip
    assert outcome.fields == {
        "status": "SCHEDULED", "attempts": 2, "error_class": "TRANSIENT", "last_error": "503",
        "due_ms": LATER, "first_attempt_ms": 4_000, "last_attempt_ms": NOW, "version": 4,
        **ENDS_THE_LEASE,
    }  # fmt: skip
    assert outcome.delayed_member.startswith(b"low ")
    retried = codec.decode_work_item(work_item_of_member(outcome.delayed_member))
    assert (retried.delivery_id, retried.attempts) == ("d", 2)
    assert outcome.due_ms == LATER


def test_a_failure_ends_the_delivery_and_dead_letters_it_with_its_context() -> None:
    held = leased(version=2, attempts=2, first_attempt_ms=4_000)
    outcome = delivery_outcomes.failed(held, ErrorClass.PERMANENT, "no such number", NOW,
                                       attempts=3)  # fmt: skip
    assert events(outcome) == [
        DeliveryFailed(at=at(NOW), notification_id="n", delivery_id="d", version=3,
                       attempts=3, error_class="PERMANENT", error="no such number"),
        DeliveryDeadLettered(at=at(NOW), notification_id="n", delivery_id="d", version=4,
                             error_class="PERMANENT"),
    ]  # fmt: skip
    assert outcome.fields == {
        "status": "FAILED", "attempts": 3, "error_class": "PERMANENT",
        "last_error": "no such number", "first_attempt_ms": 4_000, "last_attempt_ms": NOW,
        "version": 4, **ENDS_THE_LEASE,
    }  # fmt: skip
    assert outcome.dead_letter == {
        "delivery_id": "d", "notification_id": "n", "type": "otp", "channel": "SMS",
        "priority": "HIGH", "producer": "", "error_class": "PERMANENT",
        "last_error": "no such number",
        "attempts": 3, "first_attempt_ms": 4_000, "last_attempt_ms": NOW, "worker": "w",
        "worker_version": "1", "version": 4, "work_entry_id": "1-0",
        "work": codec.encode_work_item(ITEM),
    }  # fmt: skip
    assert outcome.delayed_member == b""


def test_a_failure_without_an_attempt_now_keeps_the_attempt_times_as_they_were() -> None:
    # A delivery leased too often without an outcome: no provider was called now.
    held = leased(attempts=2, first_attempt_ms=4_000)
    outcome = delivery_outcomes.failed(held, ErrorClass.POISON, "leased 6 times", NOW,
                                       attempts=2)  # fmt: skip
    assert "last_attempt_ms" not in outcome.fields
    assert "first_attempt_ms" not in outcome.fields
    assert (outcome.dead_letter["first_attempt_ms"], outcome.dead_letter["last_attempt_ms"]) == (
        4_000,
        0,
    )
    never_tried = delivery_outcomes.failed(
        leased(attempts=0, first_attempt_ms=0), ErrorClass.POISON, "x", NOW, attempts=0
    )
    assert (never_tried.dead_letter["first_attempt_ms"],
            never_tried.dead_letter["last_attempt_ms"]) == (0, 0)  # fmt: skip


def test_error_texts_are_cut_to_length_everywhere_they_are_kept() -> None:
    long = "x" * (MAX_ERROR_TEXT + 100)
    retry = delivery_outcomes.retry_later(leased(), ErrorClass.TRANSIENT, long, LATER, NOW)
    failed = delivery_outcomes.failed(leased(), ErrorClass.PERMANENT, long, NOW, attempts=2)
    [retried] = events(retry)
    first, _ = events(failed)
    assert isinstance(retried, DeliveryAttemptFailed)
    assert isinstance(first, DeliveryFailed)
    for text in (retry.fields["last_error"], retried.error, failed.fields["last_error"],
                 first.error, failed.dead_letter["last_error"]):  # fmt: skip
        assert text == "x" * MAX_ERROR_TEXT


def test_acknowledging_only_records_nothing() -> None:
    outcome = delivery_outcomes.acknowledge_only(leased(version=7))
    assert (outcome.events, outcome.fields, outcome.dead_letter) == (b"", {}, {})
    assert (outcome.entry_id, outcome.expected_version, outcome.status) == ("1-0", 7, None)


def test_an_ending_outcome_releases_the_shared_data_and_a_dead_letter_keeps_a_copy() -> None:
    held = leased(shared_data=True, data={})
    held = msgspec.structs.replace(held, data={"code": "9"})
    sent = delivery_outcomes.sent(held, "sandbox", "m-1", NOW)
    assert sent.releases_data == held.shard.data("n")
    retry = delivery_outcomes.retry_later(held, ErrorClass.TRANSIENT, "busy", NOW + 1, NOW)
    assert retry.releases_data == ""  # it is not over: the retry still needs the data
    assert codec.decode_work_item(work_item_of_member(retry.delayed_member)).shared_data
    failed = delivery_outcomes.failed(held, ErrorClass.PERMANENT, "no", NOW, attempts=2)
    kept = codec.decode_work_item(failed.dead_letter["work"])  # type: ignore[arg-type]
    assert (kept.shared_data, kept.data) == (False, {"code": "9"})


def test_each_decision_is_recorded_by_its_own_outcome() -> None:
    held = leased(attempts=2)
    message = InboxMessage(
        id="d", notification_id="n", type="otp", title="t", body="b", created_at=at(NOW)
    )
    pairs = [
        (Sent("sandbox", "m-1", 2), delivery_outcomes.sent(held, "sandbox", "m-1", NOW, 2)),
        (
            SentToInbox("inbox", message, keep=10, ttl_ms=1_000, feed=(5, 2_000)),
            delivery_outcomes.sent_to_inbox(
                held, "inbox", message, NOW, keep=10, ttl_ms=1_000, feed=(5, 2_000)
            ),
        ),
        (
            RetryAt(LATER, ErrorClass.TRANSIENT, "busy", provider="a", fail_over=True),
            delivery_outcomes.retry_later(
                held, ErrorClass.TRANSIENT, "busy", LATER, NOW, provider="a", fail_over=True
            ),
        ),
        (
            Failed(ErrorClass.PERMANENT, "no", attempts=3, provider="a"),
            delivery_outcomes.failed(
                held, ErrorClass.PERMANENT, "no", NOW, attempts=3, provider="a"
            ),
        ),
        (
            Deferred(LATER, "circuit_open"),
            delivery_outcomes.deferred(held, LATER, NOW, "circuit_open"),
        ),
        (
            Expired("quiet_hours_past_ttl"),
            delivery_outcomes.expired(held, NOW, "quiet_hours_past_ttl"),
        ),
        (Cancelled(), delivery_outcomes.cancelled(held, NOW)),
        (AcknowledgeOnly(), delivery_outcomes.acknowledge_only(held)),
    ]
    for decision, expected in pairs:
        outcome = delivery_outcomes.outcome(held, decision, NOW)
        assert outcome == expected, decision
        assert outcome.status == (decision.status and str(decision.status)), decision
