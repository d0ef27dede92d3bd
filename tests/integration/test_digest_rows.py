"""Digests in the read model: a digest's row opened by its first join and counted by the
next, each notification's membership kept once, the close recorded with the notification
made of it, whatever repetition the events come in; a joined notification's deliveries
DIGESTED and its status naming the digest."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import asyncpg

from projections import queries
from streams.core.events import DeliveryDigested, DigestClosed, NotificationDigested
from tests.integration.projection_support import accepted, project

AT = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
CLOSES = AT + timedelta(minutes=10)
DIGEST = "9f2c4e1a7b3d5f60"
FIRST = "019bc123-4567-7abc-8def-0123456789ab"
SECOND = "019bc123-4567-7abc-8def-0123456789ac"
MADE = "019bc123-4567-7abc-8def-0123456789ad"
FIRST_EMAIL = "019bc123-4567-7abc-8def-0123456789a0"


def joined(notification_id: str, count: int, at: datetime = AT) -> NotificationDigested:
    return NotificationDigested(
        at=at, notification_id=notification_id, digest_id=DIGEST, recipient_id="u-1",
        notification_type="comment", count=count, closes_at=CLOSES,
    )  # fmt: skip


def closed(count: int, notification_id: str = MADE) -> DigestClosed:
    return DigestClosed(
        at=CLOSES, digest_id=DIGEST, recipient_id="u-1", notification_type="comment",
        count=count, notification_id=notification_id,
    )  # fmt: skip


async def digest_row(pool: asyncpg.Pool) -> asyncpg.Record:
    async with pool.acquire() as connection:
        return await connection.fetchrow("SELECT * FROM digest WHERE id = $1", DIGEST)


async def test_joins_open_and_count_a_digest_and_its_close_names_the_notification_made(
    pool: asyncpg.Pool,
) -> None:
    first_email = DeliveryDigested(
        at=AT, notification_id=FIRST, delivery_id=FIRST_EMAIL, version=1, channel="EMAIL"
    )
    await project(pool, [accepted(FIRST, [FIRST_EMAIL], at=AT), first_email, joined(FIRST, 1)])
    await project(pool, [joined(SECOND, 2, AT + timedelta(seconds=5)), joined(FIRST, 1)])
    row = await digest_row(pool)
    assert (row["recipient_id"], row["notification_type"], row["items"]) == ("u-1", "comment", 2)
    assert (row["opened_at"], row["closes_at"], row["closed_at"]) == (AT, CLOSES, None)

    await project(pool, [closed(2)])
    await project(pool, [joined(SECOND, 2), closed(2)])  # again: nothing changes
    row = await digest_row(pool)
    assert (row["items"], row["closed_at"], str(row["notification_id"])) == (2, CLOSES, MADE)
    async with pool.acquire() as connection:
        members = await connection.fetch(
            "SELECT notification_id::text, digest_id FROM digest_member ORDER BY joined_at"
        )
    assert [tuple(m) for m in members] == [(FIRST, DIGEST), (SECOND, DIGEST)]

    status = await queries.notification_status(pool, FIRST)
    assert status is not None
    assert status.digest_id == DIGEST
    [delivery] = status.deliveries
    assert (delivery.status, delivery.reason) == ("DIGESTED", "digest")


async def test_a_digest_every_item_of_which_left_closes_without_a_notification(
    pool: asyncpg.Pool,
) -> None:
    await project(pool, [joined(FIRST, 1), closed(0, notification_id="")])
    row = await digest_row(pool)
    assert (row["items"], row["closed_at"], row["notification_id"]) == (0, CLOSES, None)


async def test_a_close_whose_joins_were_never_projected_still_makes_the_row(
    pool: asyncpg.Pool,
) -> None:
    await project(pool, [closed(3)])
    row = await digest_row(pool)
    assert (row["opened_at"], row["closed_at"], row["items"]) == (CLOSES, CLOSES, 3)
