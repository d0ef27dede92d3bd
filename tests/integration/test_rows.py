"""The rows events write on real PostgreSQL: idempotent, never moving a delivery back, and a
campaign's deliveries naming their campaign, a throttled delivery with its detail, an
escalation step's and a fallback's rows saying which they are, a step not needed SKIPPED."""

from __future__ import annotations

import asyncpg

from projections.rows import apply, rows_of, write_rows
from streams.campaigns.ids import notification_key
from streams.core.events import (
    DeliveryCancelled,
    DeliveryFailed,
    DeliverySuppressed,
    DeliveryThrottled,
)
from streams.core.ids import new_id
from tests.integration.projection_support import (
    DID,
    NID,
    T0,
    accepted,
    delivered,
    entries,
    snapshot,
    steps_and_a_fallback,
    story,
)


async def test_projecting_the_same_events_twice_leaves_identical_rows(
    pool: asyncpg.Pool,
) -> None:
    rows = rows_of(0, entries(story()))
    await apply(pool, "s0", rows)
    once = await snapshot(pool)
    await apply(pool, "s0", rows)
    assert await snapshot(pool) == once
    assert len(once["delivery"]) == 1
    assert len(once["delivery_event"]) == 4


async def test_a_batch_partly_projected_before_writes_each_event_once(
    pool: asyncpg.Pool,
) -> None:
    accepted, failed, sent = entries(story())
    await apply(pool, "s0", rows_of(0, [accepted]))
    # The copy straight into delivery_event meets the first entry's events and fails; the
    # batch is written again the idempotent way.
    await apply(pool, "s0", rows_of(0, [accepted, failed, sent]))
    async with pool.acquire() as connection:
        history = await connection.fetch("SELECT event_id FROM delivery_event ORDER BY 1")
        row = await connection.fetchrow("SELECT status, version FROM delivery WHERE id = $1", DID)
        checkpoint = await connection.fetchval("SELECT last_id FROM projection_checkpoint")
    assert [r["event_id"] for r in history] == ["0-1-0-0", "0-1-0-1", "0-2-0-0", "0-3-0-0"]
    assert (row["status"], row["version"]) == ("SENT", 3)
    assert checkpoint == "3-0"


async def test_new_events_are_copied_straight_into_the_history(pool: asyncpg.Pool) -> None:
    rows = rows_of(0, entries(story()))
    async with pool.acquire() as connection, connection.transaction():
        await write_rows(connection, rows, events_may_repeat=False)
    async with pool.acquire() as connection:
        history = await connection.fetch(
            "SELECT event_id, type, delivery_id, version, body FROM delivery_event ORDER BY 1"
        )
    assert [(r["event_id"], r["type"], r["version"]) for r in history] == [
        ("0-1-0-0", "NotificationAccepted", None),
        ("0-1-0-1", "DeliveryQueued", 1),
        ("0-2-0-0", "DeliveryAttemptFailed", 2),
        ("0-3-0-0", "DeliverySent", 3),
    ]
    assert str(history[3]["delivery_id"]) == DID
    assert '"provider_message_id": "m-1"' in history[3]["body"]


async def test_reordered_and_repeated_events_never_move_a_delivery_backwards(
    pool: asyncpg.Pool,
) -> None:
    accepted, failed, sent = entries(story())
    # The newest change first, then the older ones, then the newest again.
    for batch in ([accepted], [sent], [failed], [accepted, failed, sent]):
        await apply(pool, "s0", rows_of(0, batch))
    async with pool.acquire() as connection:
        row = await connection.fetchrow("SELECT * FROM delivery WHERE id = $1", DID)
    assert row["status"] == "SENT"
    assert row["version"] == 3
    assert row["attempts"] == 2
    assert row["provider_message_id"] == "m-1"
    assert row["producer"] == "shop"
    assert row["notification_type"] == "otp"
    async with pool.acquire() as connection:
        history = await connection.fetchval("SELECT count(*) FROM delivery_event")
    assert history == 4  # the skipped older change is still in the history, once


async def test_a_campaigns_deliveries_name_it_and_may_end_cancelled(pool: asyncpg.Pool) -> None:
    campaign_nid, campaign_did, own_nid, own_did = (new_id(0) for _ in range(4))
    key = notification_key("c-1", "u-1")
    accepted_then = [
        [accepted(campaign_nid, [campaign_did], at=T0, idempotency_key=key),
         *delivered(campaign_nid, campaign_did, "QUEUED", at=T0)],
        [accepted(own_nid, [own_did], at=T0, idempotency_key="campaign-c-1"),
         *delivered(own_nid, own_did, "QUEUED", at=T0)],
    ]  # fmt: skip
    await apply(pool, "s0", rows_of(0, entries(accepted_then)))
    # Cancelled in a later batch, which knows nothing of the notification: the row keeps it.
    cancelled = DeliveryCancelled(at=T0, notification_id=campaign_nid, delivery_id=campaign_did,
                                  version=2, channel="SMS", campaign_id="c-1")  # fmt: skip
    await apply(pool, "s0", rows_of(0, entries([[cancelled]], first=3)))

    async with pool.acquire() as connection:
        rows = {
            str(row["id"]): (row["status"], row["campaign_id"], row["version"])
            for row in await connection.fetch("SELECT * FROM delivery")
        }
    assert rows == {campaign_did: ("CANCELLED", "c-1", 2), own_did: ("QUEUED", None, 1)}


def test_a_batch_names_the_deliveries_it_ends_for_good_with_their_newest_version() -> None:
    accepted_, failed, sent = entries(story())
    assert rows_of(0, [accepted_, failed]).ended() == {}  # queued, then a retry ahead
    assert rows_of(0, [accepted_, failed, sent]).ended() == {DID: 3}
    assert rows_of(0, [sent, failed]).ended() == {DID: 3}  # the newest version decides
    refused = entries([[DeliveryFailed(
        at=T0, notification_id=NID, delivery_id=DID, version=4, error_class="PERMANENT",
        error="550", attempts=3,
    )]], first=9)  # fmt: skip
    # FAILED stays: its dead letter's replay reads its state.
    assert rows_of(0, [sent, *refused]).ended() == {}


async def test_a_throttled_delivery_is_suppressed_throttled_with_its_detail_in_the_history(
    pool: asyncpg.Pool,
) -> None:
    ids = {"at": T0, "notification_id": NID, "delivery_id": DID}
    throttled = [
        DeliverySuppressed(**ids, version=2, channel="SMS", reason="throttled"),
        DeliveryThrottled(
            **ids, version=3, channel="SMS", notification_type="otp", action="suppress",
            limit=3, per_seconds=3600, scope="t:otp",
        ),
    ]  # fmt: skip
    await apply(pool, "s0", rows_of(0, entries([story()[0], throttled])))
    async with pool.acquire() as connection:
        row = await connection.fetchrow("SELECT status, reason, version FROM delivery")
        history = await connection.fetch(
            "SELECT type, version, body->>'limit' AS lim FROM delivery_event "
            "WHERE delivery_id IS NOT NULL ORDER BY version"
        )
    assert tuple(row) == ("SUPPRESSED", "throttled", 3)
    assert [tuple(r) for r in history][-2:] == [
        ("DeliverySuppressed", 2, None), ("DeliveryThrottled", 3, "3")
    ]  # fmt: skip


async def test_a_steps_and_a_fallbacks_rows_say_which_they_are_whatever_the_order(
    pool: asyncpg.Pool,
) -> None:
    nid, first, step, fallback = (new_id(0) for _ in range(4))
    batches = entries(steps_and_a_fallback(nid, first, step, fallback))
    # In order; then again, newest first (the older changes are not applied twice).
    await apply(pool, "s0", rows_of(0, batches))
    for batch in reversed(batches):
        await apply(pool, "s0", rows_of(0, [batch]))
    async with pool.acquire() as connection:
        found = {
            str(row["id"]): (row["status"], row["reason"], row["step"],
                             row["fallback_of"] and str(row["fallback_of"]))
            for row in await connection.fetch("SELECT * FROM delivery")
        }  # fmt: skip
    assert found == {
        first: ("FAILED", None, 0, None),
        step: ("SKIPPED", "read", 2, None),
        fallback: ("SENT", None, 0, first),
    }
    # A step whose skip is projected before the event that made it keeps its number too.
    other_nid, other_first, other_step, other_fallback = (new_id(0) for _ in range(4))
    story_ = steps_and_a_fallback(other_nid, other_first, other_step, other_fallback)
    await apply(pool, "s0", rows_of(0, entries([story_[3]], first=20)))
    await apply(pool, "s0", rows_of(0, entries([story_[0]], first=21)))
    async with pool.acquire() as connection:
        row = await connection.fetchrow(
            "SELECT status, step, version FROM delivery WHERE id = $1", other_step
        )
    assert tuple(row) == ("SKIPPED", 2, 3)


def test_a_skipped_step_is_ended_for_good() -> None:
    nid, first, step, fallback = (new_id(0) for _ in range(4))
    batches = entries(steps_and_a_fallback(nid, first, step, fallback))
    assert rows_of(0, batches).ended() == {step: 3, fallback: 3}
