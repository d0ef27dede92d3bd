"""The FAILED dashboard's queries on real PostgreSQL: failure rates over the deliveries that
ended, failures by error class, the failed list, what waits SCHEDULED (escalation steps
among it), the escalation steps skipped, the digests the producer's notifications joined,
and a notification's timeline with its steps and fallbacks."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import asyncpg

from projections.dashboard.queries import (
    RATED_STATUSES,
    ChannelFailureRate,
    DigestCounts,
    ErrorClassCount,
    FailureFilter,
    ScheduledDeliveries,
    SkippedSteps,
    digest_counts,
    failed_deliveries,
    failure_rates,
    failures_by_error_class,
    scheduled_deliveries,
    skipped_steps,
    timeline,
)
from streams.core.events import (
    DeliveryDeadLettered,
    DeliveryQueued,
    DeliveryScheduled,
)
from streams.core.ids import new_id
from streams.core.vocabulary import Channel, Priority
from streams.delivery.state import TERMINAL, DeliveryStatus
from tests.integration.projection_support import (
    accepted,
    delivered,
    digest_closed,
    digested,
    project,
    steps_and_a_fallback,
)


def ago(**delta: float) -> datetime:
    return datetime.now(UTC) - timedelta(**delta)


async def deliveries(
    pool: asyncpg.Pool,
    *ended: tuple[str, str, datetime],
    producer: str = "shop",
    notification_type: str = "otp",
    error_class: str = "PERMANENT",
) -> list[str]:
    """One notification per (channel, status, time); the delivery ids."""
    ids = []
    for channel, status, at in ended:
        notification_id, delivery_id = new_id(0), new_id(0)
        await project(pool, [
            accepted(notification_id, [delivery_id], at=at, producer=producer,
                     notification_type=notification_type),
            *delivered(notification_id, delivery_id, status, at=at, channel=channel,
                       error_class=error_class),
        ])  # fmt: skip
        ids.append(delivery_id)
    return ids


def test_rates_are_taken_over_every_terminal_status_but_those_never_meant_to_be_sent() -> None:
    assert set(RATED_STATUSES) == TERMINAL - {
        DeliveryStatus.SUPPRESSED, DeliveryStatus.CANCELLED, DeliveryStatus.SKIPPED,
        DeliveryStatus.DIGESTED,
    }  # fmt: skip
    assert len(RATED_STATUSES) == len(set(RATED_STATUSES))


async def test_failure_rates_count_failed_among_the_deliveries_that_ended(
    pool: asyncpg.Pool,
) -> None:
    await deliveries(
        pool,
        ("SMS", "FAILED", ago(minutes=10)),
        ("SMS", "SENT", ago(minutes=10)),
        ("SMS", "DELIVERED", ago(minutes=5)),
        ("SMS", "EXPIRED", ago(minutes=20)),
        ("SMS", "SUPPRESSED", ago(minutes=10)),  # never meant to be attempted: not counted
        ("SMS", "SKIPPED", ago(minutes=10)),  # a step not needed: not counted either
        ("SMS", "QUEUED", ago(minutes=10)),  # not ended: not counted
        ("SMS", "SCHEDULED", ago(minutes=10)),
        ("SMS", "FAILED", ago(hours=3)),  # in the last day, not the last hour
        ("SMS", "SENT", ago(days=2)),  # too old for either
        ("EMAIL", "SENT", ago(minutes=30)),
    )
    await deliveries(pool, ("SMS", "FAILED", ago(minutes=10)), producer="other")

    assert await failure_rates(pool, "shop") == [
        ChannelFailureRate("EMAIL", failed_hour=0, ended_hour=1, failed_day=0, ended_day=1),
        ChannelFailureRate("SMS", failed_hour=1, ended_hour=4, failed_day=2, ended_day=5),
    ]
    assert await failure_rates(pool, "nobody") == []


async def test_failures_are_counted_by_error_class_most_first(pool: asyncpg.Pool) -> None:
    await deliveries(pool, ("SMS", "FAILED", ago(minutes=10)), ("SMS", "FAILED", ago(hours=3)))
    await deliveries(pool, ("EMAIL", "FAILED", ago(minutes=1)), error_class="TRANSIENT")
    await deliveries(pool, ("PUSH", "FAILED", ago(days=3)), error_class="BUG")
    await deliveries(pool, ("SMS", "SENT", ago(minutes=1)), ("SMS", "EXPIRED", ago(minutes=1)))
    # Dead-lettered, but its DeliveryFailed (with the class) is not projected (yet).
    notification_id, delivery_id = new_id(0), new_id(0)
    ids = {"at": ago(minutes=2), "notification_id": notification_id, "delivery_id": delivery_id}
    await project(pool, [
        accepted(notification_id, [delivery_id], at=ago(minutes=2)),
        DeliveryQueued(**ids, version=1, channel="SMS", priority="HIGH"),  # type: ignore[arg-type]
        DeliveryDeadLettered(**ids, version=3, error_class="PERMANENT"),  # type: ignore[arg-type]
    ])  # fmt: skip
    await deliveries(pool, ("SMS", "FAILED", ago(minutes=1)), producer="other")

    assert await failures_by_error_class(pool, "shop") == [
        ErrorClassCount("PERMANENT", last_hour=1, last_day=2, total=2),
        ErrorClassCount("BUG", last_hour=0, last_day=0, total=1),
        ErrorClassCount("TRANSIENT", last_hour=1, last_day=1, total=1),
        ErrorClassCount("UNKNOWN", last_hour=1, last_day=1, total=1),
    ]


async def test_the_failed_list_filters_and_shows_the_newest_first(pool: asyncpg.Pool) -> None:
    old_sms, new_sms = await deliveries(
        pool, ("SMS", "FAILED", ago(hours=2)), ("SMS", "FAILED", ago(minutes=1))
    )
    [email] = await deliveries(
        pool, ("EMAIL", "FAILED", ago(minutes=30)), notification_type="order_confirmed",
        error_class="TRANSIENT",
    )  # fmt: skip
    await deliveries(pool, ("SMS", "SENT", ago(minutes=1)))
    await deliveries(pool, ("SMS", "FAILED", ago(minutes=1)), producer="other")

    async def listed(limit: int = 100, **where: str) -> list[str]:
        found = await failed_deliveries(pool, "shop", FailureFilter(**where), limit)
        return [failed.id for failed in found]

    assert await listed() == [new_sms, email, old_sms]
    assert await listed(limit=2) == [new_sms, email]
    assert await listed(channel="SMS") == [new_sms, old_sms]
    assert await listed(notification_type="order_confirmed") == [email]
    assert await listed(error_class="PERMANENT", channel="SMS") == [new_sms, old_sms]
    assert await listed(error_class="BUG") == []
    [shown] = await failed_deliveries(pool, "shop", FailureFilter(channel="EMAIL"))
    assert (shown.error_class, shown.last_error, shown.attempts) == (
        "TRANSIENT", "refused: TRANSIENT", 1,
    )  # fmt: skip


async def test_a_timeline_shows_every_event_of_a_producers_notification(
    pool: asyncpg.Pool,
) -> None:
    at = ago(minutes=5)
    notification_id = new_id(0)
    sms, email = new_id(0), new_id(0)
    await project(pool, [
        accepted(notification_id, [sms, email], at=at),
        *delivered(notification_id, sms, "FAILED", at=at, channel="SMS"),
        *delivered(notification_id, email, "SENT", at=at, channel="EMAIL"),
    ])  # fmt: skip

    found = await timeline(pool, "shop", uuid.UUID(notification_id))

    assert found is not None
    assert (found.notification.id, found.notification.type) == (notification_id, "otp")
    assert [(d.channel, d.status) for d in found.deliveries] == [("EMAIL", "SENT"),
                                                                  ("SMS", "FAILED")]  # fmt: skip
    # The acceptance first, then each delivery's changes in version order.
    assert [(e.type, e.version) for e in found.events][:1] == [("NotificationAccepted", None)]
    versions = [(e.delivery_id, e.version) for e in found.events[1:]]
    assert sorted(versions, key=lambda pair: pair[1] or 0) == versions
    assert {e.type for e in found.events if e.delivery_id == sms} == {
        "DeliveryQueued", "DeliveryFailed", "DeliveryDeadLettered",
    }  # fmt: skip
    [failure] = [e for e in found.events if e.type == "DeliveryFailed"]
    assert failure.body["error"] == "refused: PERMANENT"
    assert await timeline(pool, "other", uuid.UUID(notification_id)) is None
    assert await timeline(pool, "shop", uuid.UUID(new_id(0))) is None


async def test_what_waits_scheduled_is_counted_with_the_first_due_time(
    pool: asyncpg.Pool,
) -> None:
    assert await scheduled_deliveries(pool, "shop") == ScheduledDeliveries(0, 0, None, 0)
    await deliveries(pool, ("SMS", "SCHEDULED", ago(minutes=3)))  # a retry, due at its time
    await deliveries(pool, ("SMS", "SENT", ago(minutes=1)), ("SMS", "QUEUED", ago(minutes=1)))
    await deliveries(pool, ("SMS", "SCHEDULED", ago(minutes=9)), producer="other")
    due = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=1)
    notification_id, delivery_id = new_id(0), new_id(0)
    await project(pool, [
        accepted(notification_id, [delivery_id], at=ago(minutes=1)),
        DeliveryScheduled(at=ago(minutes=1), notification_id=notification_id,
                          delivery_id=delivery_id, version=1, channel=Channel.EMAIL,
                          priority=Priority.NORMAL, until=due),
    ])  # fmt: skip

    counted = await scheduled_deliveries(pool, "shop")
    assert (counted.waiting, counted.sent_later) == (2, 1)
    assert counted.next_due is not None
    assert abs((counted.next_due - ago(minutes=3)).total_seconds()) < 5
    found = await timeline(pool, "shop", uuid.UUID(notification_id))
    assert found is not None
    [later] = found.deliveries
    assert (later.status, later.reason, later.due_at) == ("SCHEDULED", "scheduled", due)


async def test_escalation_steps_waiting_and_skipped_are_counted(pool: asyncpg.Pool) -> None:
    assert await skipped_steps(pool, "shop") == SkippedSteps(0, 0)
    await deliveries(
        pool,
        ("SMS", "SKIPPED", ago(minutes=10)),
        ("EMAIL", "SKIPPED", ago(hours=5)),  # in the last day, not the last hour
        ("SMS", "SKIPPED", ago(days=2)),  # too old for either
        ("SMS", "SUPPRESSED", ago(minutes=1)),
    )
    await deliveries(pool, ("SMS", "SKIPPED", ago(minutes=1)), producer="other")
    # A step still waiting: SCHEDULED, counted among what waits and as a step.
    notification_id, delivery_id = new_id(0), new_id(0)
    await project(pool, [
        accepted(notification_id, [delivery_id], at=ago(minutes=1)),
        DeliveryScheduled(at=ago(minutes=1), notification_id=notification_id,
                          delivery_id=delivery_id, version=1, channel=Channel.SMS,
                          priority=Priority.HIGH, until=ago(minutes=-10), step=2,
                          unless=["read"]),
    ])  # fmt: skip

    assert await skipped_steps(pool, "shop") == SkippedSteps(last_hour=1, last_day=2)
    waiting = await scheduled_deliveries(pool, "shop")
    assert (waiting.waiting, waiting.sent_later, waiting.steps) == (1, 0, 1)


async def test_a_timeline_shows_its_steps_fallbacks_and_skips(pool: asyncpg.Pool) -> None:
    nid, first, step, fallback = (new_id(0) for _ in range(4))
    for entry in steps_and_a_fallback(nid, first, step, fallback, accepted_at=ago(minutes=5)):
        await project(pool, entry)

    found = await timeline(pool, "shop", uuid.UUID(nid))

    assert found is not None
    shown = {d.id: (d.channel, d.status, d.reason, d.step, d.fallback_of) for d in found.deliveries}
    assert shown == {
        first: ("EMAIL", "FAILED", None, 0, None),
        step: ("SMS", "SKIPPED", "read", 2, None),
        fallback: ("PUSH", "SENT", None, 0, first),
    }
    [skip] = [e for e in found.events if e.type == "DeliverySkipped"]
    assert (skip.delivery_id, skip.body["reason"], skip.body["because_of"]) == (step, "read", first)
    made = [
        e.body["fallback_of"] for e in found.events if e.delivery_id == fallback and e.version == 1
    ]
    assert made == [first]


async def test_digests_opened_and_closed_and_items_joined_in_the_last_hour_are_counted(
    pool: asyncpg.Pool,
) -> None:
    assert await digest_counts(pool, "shop") == DigestCounts(0, 0, 0)

    async def join(digest_id: str, at: datetime, count: int, producer: str = "shop") -> None:
        await project(pool, digested(new_id(0), new_id(0), digest_id, at=at, count=count,
                                     producer=producer))  # fmt: skip

    await join("open", ago(minutes=10), 1)  # opened in the last hour, still open
    await join("open", ago(minutes=5), 2)
    await join("closed", ago(hours=20), 1)  # opened long ago, closed in the last hour
    await project(pool, [digest_closed("closed", at=ago(minutes=30), count=1, made=new_id(0))])
    await join("old", ago(hours=3), 1)  # opened and closed before the last hour
    await project(pool, [digest_closed("old", at=ago(hours=2), count=1, made=new_id(0))])
    await join("theirs", ago(minutes=1), 1, producer="other")  # another producer's only
    await join("shared", ago(minutes=10), 1, producer="other")  # opened by another, joined
    await join("shared", ago(minutes=2), 2)

    assert await digest_counts(pool, "shop") == DigestCounts(opened=2, closed=1, items=3)
    assert await digest_counts(pool, "other") == DigestCounts(opened=2, closed=0, items=2)
