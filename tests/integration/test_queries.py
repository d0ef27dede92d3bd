"""The status API's queries on real PostgreSQL: one producer's deliveries by status, paged by
keyset; a notification with its deliveries in the order it was accepted with, each saying
whether it is an escalation step or a fallback."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from projections.queries import (
    DELIVERY_STATUSES,
    DeliveryFilter,
    DeliveryRow,
    list_deliveries,
    notification_status,
)
from projections.rows import apply, rows_of
from streams.core.ids import new_id
from tests.integration.projection_support import (
    accepted,
    delivered,
    entries,
    project,
    steps_and_a_fallback,
)

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
ENDED = [
    "QUEUED", "SCHEDULED", "SENT", "DELIVERED", "EXPIRED", "SUPPRESSED", "FAILED", "SKIPPED",
]  # fmt: skip


async def one_of_each_status(pool: asyncpg.Pool, producer: str = "shop") -> dict[str, str]:
    """A delivery in each status the read model can hold, a minute apart; their ids."""
    ids = {}
    for minute, status in enumerate(ENDED):
        notification_id, delivery_id = new_id(0), new_id(0)
        at = T0 + timedelta(minutes=minute)
        await project(pool, [
            accepted(notification_id, [delivery_id], at=at, producer=producer),
            *delivered(notification_id, delivery_id, status, at=at),
        ])  # fmt: skip
        ids[status] = delivery_id
    return ids


async def page(pool: asyncpg.Pool, **selection: object) -> tuple[list[DeliveryRow], bool]:
    return await list_deliveries(pool, DeliveryFilter(producer="shop", **selection))  # type: ignore[arg-type]


async def test_the_status_filter_selects_exactly_that_status(pool: asyncpg.Pool) -> None:
    mine = await one_of_each_status(pool)
    await one_of_each_status(pool, producer="other")
    for status in DELIVERY_STATUSES:
        rows, more = await page(pool, status=status)
        expected = [mine[status]] if status in mine else []  # SENDING is never projected
        assert [row.id for row in rows] == expected, status
        assert {row.status for row in rows} <= {status}
        assert not more
    rows, _ = await page(pool)
    assert len(rows) == len(ENDED)  # every status of this producer, no other producer's


async def test_an_unknown_status_is_the_callers_mistake(pool: asyncpg.Pool) -> None:
    with pytest.raises(KeyError):
        await page(pool, status="failed")


async def test_pages_walk_every_row_once_newest_change_first(pool: asyncpg.Pool) -> None:
    # Seven deliveries; three share one time, so the id decides between them.
    notification_id = new_id(0)
    delivery_ids = [new_id(0) for _ in range(7)]
    times = [T0 + timedelta(seconds=s) for s in (0, 5, 5, 5, 9, 1, 3)]
    events = [accepted(notification_id, delivery_ids, at=T0)]
    for delivery_id, at in zip(delivery_ids, times, strict=True):
        events += delivered(notification_id, delivery_id, "SENT", at=at)
    await project(pool, events)
    expected = [d for _, d in sorted(zip(times, delivery_ids, strict=True), reverse=True)]

    seen: list[str] = []
    more_flags: list[bool] = []
    after = None
    while True:
        rows, more = await page(pool, limit=3, after=after)
        seen += [row.id for row in rows]
        more_flags.append(more)
        if not more:
            break
        after = (rows[-1].updated_at, rows[-1].id)

    assert seen == expected
    assert more_flags == [True, True, False]
    rows, more = await page(pool, limit=7)  # a page that ends exactly at the last row
    assert (len(rows), more) == (7, False)
    rows, more = await page(pool, limit=2, status="SENT", after=(times[1], delivery_ids[2]))
    assert [row.id for row in rows] == expected[expected.index(delivery_ids[2]) + 1 :][:2]
    assert more


async def test_filters_narrow_the_list_and_times_are_since_inclusive_until_exclusive(
    pool: asyncpg.Pool,
) -> None:
    ids = await one_of_each_status(pool)
    sent_at = T0 + timedelta(minutes=ENDED.index("SENT"))

    async def found(**selection: object) -> set[str]:
        return {row.id for row in (await page(pool, **selection))[0]}

    assert await found(since=sent_at, until=sent_at + timedelta(minutes=1)) == {ids["SENT"]}
    assert await found(until=sent_at) == {ids["QUEUED"], ids["SCHEDULED"]}
    assert await found(error_class="PERMANENT") == {ids["FAILED"]}
    assert await found(error_class="TRANSIENT") == {ids["SCHEDULED"]}
    assert await found(channel="SMS", notification_type="otp") == set(ids.values())
    assert await found(channel="EMAIL") == set()
    assert await found(notification_type="marketing") == set()


async def test_a_notification_lists_its_deliveries_in_the_order_it_accepted_them(
    pool: asyncpg.Pool,
) -> None:
    notification_id = new_id(0)
    by_id = sorted(new_id(0) for _ in range(3))
    in_order = [by_id[2], by_id[0], by_id[1]]  # not the order of the ids
    events = [accepted(notification_id, in_order, at=T0, producer="shop")]
    for channel, delivery_id in zip(["PUSH", "EMAIL", "SMS"], in_order, strict=True):
        events += delivered(notification_id, delivery_id, "SENT", at=T0, channel=channel)
    await project(pool, events)

    found = await notification_status(pool, notification_id)

    assert found is not None
    assert (found.id, found.producer, found.type, found.priority, found.recipient_id) == (
        notification_id, "shop", "otp", "HIGH", "u-1",
    )  # fmt: skip
    assert found.created_at == T0
    assert [d.id for d in found.deliveries] == in_order
    assert [d.channel for d in found.deliveries] == ["PUSH", "EMAIL", "SMS"]
    assert await notification_status(pool, new_id(0)) is None
    # Once the acceptance is gone from the history (retention), the ids decide.
    async with pool.acquire() as connection:
        await connection.execute("DELETE FROM delivery_event WHERE type = 'NotificationAccepted'")
    again = await notification_status(pool, notification_id)
    assert again is not None
    assert [d.id for d in again.deliveries] == by_id


async def test_a_notifications_steps_and_fallbacks_say_what_they_are(pool: asyncpg.Pool) -> None:
    nid, first, step, fallback = (new_id(0) for _ in range(4))
    await apply(pool, "s0", rows_of(0, entries(steps_and_a_fallback(nid, first, step, fallback))))
    found = await notification_status(pool, nid)
    assert found is not None
    # As accepted, then the fallback the failure made.
    assert [(d.id, d.status, d.reason, d.step, d.fallback_of) for d in found.deliveries] == [
        (first, "FAILED", None, 0, None),
        (step, "SKIPPED", "read", 2, None),
        (fallback, "SENT", None, 0, first),
    ]
    rows, _ = await page(pool, status="SKIPPED")
    assert [(row.id, row.step, row.reason) for row in rows] == [(step, 2, "read")]
