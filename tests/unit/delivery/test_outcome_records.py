"""What every outcome records besides its change, and the outcomes of steps and fallbacks:
a step not needed ends SKIPPED with the condition; a delivery later steps look at is kept
(``held``) when it ends; a permanent failure of a delivery with a fallback makes the
fallback, due now, in the same outcome, without a dead letter, and numbers only its own
events after its version."""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec

from streams.core import codec
from streams.core.events import AnyEvent, DeliveryFailed, DeliveryScheduled, DeliverySkipped
from streams.core.vocabulary import ErrorClass
from streams.delivery import outcomes
from streams.delivery.decisions import Failed, Sent, Skipped, Suppressed
from streams.delivery.delayed import work_item_of_member
from streams.delivery.outcome_records import at, version
from streams.delivery.store import Outcome
from tests.unit.delivery_examples import leased

NOW = 6_000
FALLBACK = ["f", "SMS", "+4915112345678"]


def events(outcome: Outcome) -> list[AnyEvent]:
    return codec.decode_events(outcome.events) if outcome.events else []


def test_a_step_not_needed_ends_skipped_with_the_condition_that_held() -> None:
    step = leased(version=1, channel="PUSH", step=2, unless=["read"], watch=["in-app"])
    outcome = outcomes.outcome(step, Skipped("read", because_of="in-app"), NOW)
    assert events(outcome) == [
        DeliverySkipped(at=at(NOW), notification_id="n", delivery_id="d", version=2,
                        channel="PUSH", step=2, reason="read", because_of="in-app"),
    ]  # fmt: skip
    assert (outcome.fields["status"], outcome.fields["reason"]) == ("SKIPPED", "read")
    assert outcome.fields["version"] == 2
    assert "held" not in outcome.fields  # nothing looks at a step that was skipped


def test_a_delivery_later_steps_look_at_is_held_when_it_ends_and_not_before() -> None:
    watched = leased(channel="IN_APP", step=1, watched=True)
    assert outcomes.outcome(watched, Sent("inbox", "m"), NOW).fields["held"] == 1
    retry = outcomes.retry_later(watched, ErrorClass.TRANSIENT, "busy", NOW + 1_000, NOW)
    assert "held" not in retry.fields
    assert "held" not in outcomes.outcome(leased(), Sent("sandbox", "m"), NOW).fields


def test_a_permanent_failure_with_a_fallback_makes_it_in_the_same_outcome() -> None:
    push = leased(version=3, attempts=0, channel="PUSH", address="tok", fallback=FALLBACK)
    failed = Failed(ErrorClass.PERMANENT, "invalid token", attempts=1, provider="fcm")
    outcome = outcomes.outcome(push, failed, NOW)
    [failure, made] = events(outcome)
    assert isinstance(failure, DeliveryFailed)
    assert (failure.delivery_id, failure.version) == ("d", 4)
    assert made == DeliveryScheduled(
        at=at(NOW), notification_id="n", delivery_id="f", version=1, channel="SMS",
        priority=push.item.priority, until=at(NOW), fallback_of="d",
    )  # fmt: skip
    assert outcome.fields["version"] == 4  # the fallback's event is its own delivery's
    assert outcome.dead_letter == {}  # the fallback took it over
    assert outcome.due_ms == NOW
    item = codec.decode_work_item(work_item_of_member(outcome.delayed_member))
    assert (item.delivery_id, item.channel, item.address) == ("f", "SMS", "+4915112345678")
    assert (item.send_at_ms, item.await_until_ms, item.fallback, item.attempts) == (NOW, 0, [], 0)


def test_a_fallback_without_an_address_looks_the_profile_up_when_it_comes_due() -> None:
    push = leased(channel="PUSH", address="tok", fallback=["f", "SMS", ""])
    outcome = outcomes.outcome(push, Failed(ErrorClass.PERMANENT, "gone", attempts=2), NOW)
    item = codec.decode_work_item(work_item_of_member(outcome.delayed_member))
    assert (item.address, item.await_until_ms) == ("", NOW)


def test_a_delivery_whose_address_turned_out_dead_makes_its_fallback() -> None:
    push = leased(channel="PUSH", address="tok", fallback=FALLBACK)
    outcome = outcomes.outcome(push, Suppressed("invalid_address"), NOW)
    made = [type(e).__name__ for e in events(outcome)]
    assert made == ["DeliverySuppressed", "DeliveryScheduled"]
    assert outcome.delayed_member
    opted_out = outcomes.outcome(push, Suppressed("opted_out"), NOW)
    assert opted_out.delayed_member == b""  # the recipient said no: no other way either


def test_a_transient_failure_given_up_is_dead_lettered_and_makes_no_fallback() -> None:
    push = leased(channel="PUSH", address="tok", fallback=FALLBACK)
    outcome = outcomes.outcome(push, Failed(ErrorClass.TRANSIENT, "down", attempts=6), NOW)
    assert outcome.dead_letter
    assert outcome.delayed_member == b""
    assert [type(e).__name__ for e in events(outcome)] == ["DeliveryFailed", "DeliveryDeadLettered"]


def test_a_step_that_came_due_counts_its_due_event_first() -> None:
    step = msgspec.structs.replace(leased(version=1, send_at_ms=5_500), came_due=True)
    assert version(step) == 2
    outcome = outcomes.outcome(step, Skipped("delivered", because_of="e"), NOW)
    assert [(type(e).__name__, e.version) for e in events(outcome)] == [  # type: ignore[union-attr]
        ("DeliveryDue", 2), ("DeliverySkipped", 3),
    ]  # fmt: skip
    assert at(NOW) == datetime.fromtimestamp(6, UTC)
