"""What becomes of a leased delivery, decided without I/O: a lease that says not to send, a
TTL that has passed, a quota wait, and what a failed attempt leads to (retried while allowed,
expired rather than retried past the TTL, FAILED once the attempts are used up), every
stored error text masked."""

from __future__ import annotations

import msgspec
import pytest

from app.catalog.channels import RetryPolicy
from app.delivery import decide
from app.providers.base import ProviderError, Reason
from streams.core import codec
from streams.core.events import DeliveryAttemptFailed
from streams.core.vocabulary import ErrorClass
from streams.delivery import outcomes as delivery_outcomes
from streams.delivery.decisions import (
    AcknowledgeOnly,
    Cancelled,
    Deferred,
    Expired,
    Failed,
    RetryAt,
)
from streams.delivery.delayed import work_item_of_member
from streams.delivery.leases import LeasedDelivery, LeaseVerdict
from streams.delivery.outcomes import MAX_ERROR_TEXT
from streams.delivery.store import Outcome
from tests.unit.delivery_examples import ITEM, leased

NOW = 100_000
POLICY = RetryPolicy(base_seconds=2, max_seconds=60, max_attempts=4)
TOLD_TO_WAIT = 3.0  # a Retry-After above every jittered delay of the tests' attempts


def failure(held: LeasedDelivery, error_class: ErrorClass, error: str = "503") -> Outcome:
    """The outcome recording the decision after a failed attempt."""
    decision = decide.after_failure(
        held, error_class=error_class, error=error, policy=POLICY, now_ms=NOW,
        retry_after=TOLD_TO_WAIT,
    )  # fmt: skip
    return delivery_outcomes.outcome(held, decision, NOW)


def test_a_transient_failure_is_retried_while_attempts_are_left() -> None:
    outcome = failure(leased(attempts=0), ErrorClass.TRANSIENT)
    assert outcome.status == "SCHEDULED"
    assert outcome.due_ms == NOW + 3_000  # the Retry-After; the drawn delay is at most 2 s
    assert outcome.fields["attempts"] == 1
    retried = codec.decode_work_item(work_item_of_member(outcome.delayed_member))
    assert retried.attempts == 1
    [event] = codec.decode_events(outcome.events)
    assert isinstance(event, DeliveryAttemptFailed)
    assert (event.attempt, event.error_class, event.error) == (1, "TRANSIENT", "503")


def test_the_retry_waits_a_jittered_delay_below_the_ceiling() -> None:
    decision = decide.after_failure(
        leased(attempts=2), error_class=ErrorClass.TRANSIENT, error="503", policy=POLICY,
        now_ms=NOW,
    )  # fmt: skip
    assert isinstance(decision, RetryAt)
    assert NOW <= decision.due_ms <= NOW + 8_000  # third attempt: a ceiling of 2 * 2^2 s


def test_a_retry_that_would_land_past_the_ttl_expires_instead() -> None:
    outcome = failure(leased(attempts=0, expires_ms=NOW + 2_999), ErrorClass.TRANSIENT)
    assert (outcome.status, outcome.fields["reason"]) == ("EXPIRED", "ttl")
    assert outcome.delayed_member == b""
    assert outcome.dead_letter == {}
    at_the_edge = failure(leased(attempts=0, expires_ms=NOW + 3_000), ErrorClass.TRANSIENT)
    assert at_the_edge.status == "EXPIRED"  # due exactly when it expires: never sent
    in_time = failure(leased(attempts=0, expires_ms=NOW + 3_001), ErrorClass.TRANSIENT)
    assert in_time.status == "SCHEDULED"


def test_a_transient_failure_with_the_attempts_used_up_fails_the_delivery() -> None:
    outcome = failure(leased(attempts=3), ErrorClass.TRANSIENT)  # the fourth of four
    assert outcome.status == "FAILED"
    assert (outcome.fields["attempts"], outcome.fields["error_class"]) == (4, "TRANSIENT")
    assert outcome.dead_letter["attempts"] == 4


@pytest.mark.parametrize("error_class", [ErrorClass.PERMANENT, ErrorClass.POISON, ErrorClass.BUG])
def test_any_other_failure_fails_at_once(error_class: ErrorClass) -> None:
    outcome = failure(leased(attempts=0), error_class)
    assert outcome.status == "FAILED"
    assert (outcome.fields["attempts"], outcome.dead_letter["error_class"]) == (1, error_class)


def test_error_texts_are_masked_wherever_they_are_kept() -> None:
    error = "number +4915112345678 of jane@example.com does not exist"
    for outcome in (failure(leased(attempts=0), ErrorClass.TRANSIENT, error),
                    failure(leased(attempts=0), ErrorClass.PERMANENT, error)):  # fmt: skip
        kept = [outcome.fields["last_error"], outcome.events.decode()]
        kept += [str(outcome.dead_letter.get("last_error", ""))]
        for text in kept:
            assert "+4915112345678" not in text
            assert "jane@example.com" not in text
        assert outcome.fields["last_error"] == "number <phone> of <email> does not exist"


def exactly(value: float) -> decide.Uniform:
    """A draw of the jitter that always gives ``value`` (within its bounds)."""
    return lambda low, high: min(max(value, low), high)


def test_a_transient_failure_decides_a_retry_at_the_drawn_delay() -> None:
    decision = decide.after_failure(
        leased(attempts=1, expires_ms=NOW + 60_000), error_class=ErrorClass.TRANSIENT,
        error="503 for jane@example.com", policy=POLICY, now_ms=NOW, provider="a",
        fail_over=True, uniform=exactly(1.5),
    )  # fmt: skip
    assert decision == RetryAt(
        NOW + 1_500, ErrorClass.TRANSIENT, "503 for <email>", provider="a", fail_over=True
    )


def test_a_retry_after_is_the_least_wait() -> None:
    decision = decide.after_failure(
        leased(attempts=0), error_class=ErrorClass.TRANSIENT, error="429", policy=POLICY,
        now_ms=NOW, retry_after=30.0, uniform=exactly(0.0),
    )  # fmt: skip
    assert isinstance(decision, RetryAt)
    assert decision.due_ms == NOW + 30_000


def test_a_retry_due_when_the_ttl_ends_is_an_expiry() -> None:
    held = leased(attempts=0, expires_ms=NOW + 1_000)
    decision = decide.after_failure(
        held, error_class=ErrorClass.TRANSIENT, error="503", policy=POLICY, now_ms=NOW,
        uniform=exactly(1.0),
    )  # fmt: skip
    assert decision == Expired()


def test_the_last_allowed_attempt_and_any_other_class_fail() -> None:
    used_up = decide.after_failure(
        leased(attempts=3), error_class=ErrorClass.TRANSIENT, error="503", policy=POLICY,
        now_ms=NOW, provider="a",
    )  # fmt: skip
    assert used_up == Failed(ErrorClass.TRANSIENT, "503", attempts=4, provider="a")
    refused = decide.after_failure(
        leased(attempts=0), error_class=ErrorClass.PERMANENT, error="no", policy=POLICY,
        now_ms=NOW,
    )  # fmt: skip
    assert refused == Failed(ErrorClass.PERMANENT, "no", attempts=1)


def test_a_bug_fails_at_once_naming_the_exception_masked() -> None:
    decision = decide.after_bug(leased(attempts=1), KeyError("jane@example.com"), "a")
    assert decision == Failed(ErrorClass.BUG, "KeyError: '<email>'", attempts=2, provider="a")


def test_a_refusal_is_stored_with_its_reason_and_fails_over_only_when_never_accepted() -> None:
    dead = ProviderError(ErrorClass.PERMANENT, "token invalid", reason=Reason.INVALID_ADDRESS)
    assert decide.refusal_text(dead) == f"{Reason.INVALID_ADDRESS}: token invalid"
    rejected = ProviderError(ErrorClass.PERMANENT, "word " * 400, reason=Reason.REJECTED)
    assert decide.refusal_text(rejected) == f"{Reason.REJECTED}: {'word ' * 100}"[:MAX_ERROR_TEXT]
    refused = ProviderError(ErrorClass.TRANSIENT, "503", not_accepted=True)
    assert decide.may_fail_over(refused, providers=2)
    assert not decide.may_fail_over(refused, providers=1)  # nowhere else to go
    maybe_sent = ProviderError(ErrorClass.TRANSIENT, "timeout after the request went out")
    assert not decide.may_fail_over(maybe_sent, providers=2)
    permanent = ProviderError(ErrorClass.PERMANENT, "400", not_accepted=True)
    assert not decide.may_fail_over(permanent, providers=2)


def test_a_lease_that_says_not_to_send_has_an_outcome_of_its_own() -> None:
    def verdict(name: LeaseVerdict) -> Outcome:
        held = leased(attempts=2)
        lease = msgspec.structs.replace(held.lease, verdict=name)
        decision = decide.not_to_send(lease, 5)
        return delivery_outcomes.outcome(msgspec.structs.replace(held, lease=lease), decision, 0)

    assert verdict(LeaseVerdict.TERMINAL).events == b""  # already ended: only acknowledged
    assert verdict(LeaseVerdict.CANCELLED).status == "CANCELLED"
    poison = verdict(LeaseVerdict.POISON)
    assert (poison.status, poison.dead_letter["error_class"]) == ("FAILED", "POISON")
    assert poison.dead_letter["last_error"].startswith("leased 6 times without an outcome")
    assert poison.dead_letter["attempts"] == 2  # leases are not attempts


def test_a_lease_verdict_decides_without_the_delivery() -> None:
    lease = msgspec.structs.replace(leased(attempts=2).lease, verdict=LeaseVerdict.TERMINAL)
    assert decide.not_to_send(lease, 5) == AcknowledgeOnly()
    cancelled = msgspec.structs.replace(lease, verdict=LeaseVerdict.CANCELLED)
    assert decide.not_to_send(cancelled, 5) == Cancelled()
    poison = decide.not_to_send(msgspec.structs.replace(lease, verdict=LeaseVerdict.POISON), 5)
    assert isinstance(poison, Failed)
    assert (poison.error_class, poison.attempts) == (ErrorClass.POISON, 2)


def test_a_delivery_expires_before_the_send_once_its_ttl_is_reached() -> None:
    assert decide.expired_before(ITEM, ITEM.expires_ms - 1) is None
    assert decide.expired_before(ITEM, ITEM.expires_ms) == Expired()


def test_a_quota_wait_defers_at_least_a_millisecond() -> None:
    assert decide.quota_wait(0.25, NOW) == Deferred(NOW + 250, "rate_limited")
    assert decide.quota_wait(0.0001, NOW) == Deferred(NOW + 1, "rate_limited")
