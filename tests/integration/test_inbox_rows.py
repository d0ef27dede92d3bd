"""The inbox history in the read model: a message inserted once, each change applied once
and in order by version, a delivery row moving to READ and back, and an erasure removing
the recipient's messages and their text from the events."""

from __future__ import annotations

from datetime import UTC, datetime

import asyncpg

from streams.core.events import (
    InboxMessageCreated,
    InboxMessageRead,
    InboxMessageSeen,
    InboxMessageUnread,
    RecipientErased,
)
from tests.integration.projection_support import accepted, delivered, project

AT = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
NID = "019bc123-4567-7abc-8def-0123456789ab"
DID = "019bc123-4567-7abc-8def-0123456789a0"
IDS = {"at": AT, "notification_id": NID, "delivery_id": DID}


def created() -> InboxMessageCreated:
    return InboxMessageCreated(
        **IDS, version=3, recipient_id="u-1", title="Shipped", body="Order 7 is on its way.",
        action_url="https://shop.example/o/7", data={"order": "7"},
        notification_type="order_shipped",
    )  # fmt: skip


async def test_a_message_and_its_changes_are_projected_once_and_in_order(
    pool: asyncpg.Pool,
) -> None:
    await project(
        pool, [accepted(NID, [DID], at=AT), *delivered(NID, DID, "SENT", at=AT, channel="IN_APP")]
    )
    read = InboxMessageRead(**IDS, version=4, recipient_id="u-1", status="READ")
    seen = InboxMessageSeen(**IDS, version=5, recipient_id="u-1", status="READ")
    await project(pool, [created(), read, seen])
    await project(pool, [created(), read])  # again: nothing moves back
    async with pool.acquire() as connection:
        row = await connection.fetchrow("SELECT * FROM inbox_message WHERE id = $1", DID)
        status = await connection.fetchval("SELECT status FROM delivery WHERE id = $1", DID)
    assert (row["recipient_id"], row["type"], row["title"], row["action_url"]) == (
        "u-1", "order_shipped", "Shipped", "https://shop.example/o/7",
    )  # fmt: skip
    assert row["read_at"] == AT
    assert row["seen_at"] == AT
    assert row["version"] == 5
    assert status == "READ"
    await project(pool, [InboxMessageUnread(**IDS, version=6, recipient_id="u-1", status="SENT")])
    async with pool.acquire() as connection:
        row = await connection.fetchrow("SELECT * FROM inbox_message WHERE id = $1", DID)
        status = await connection.fetchval("SELECT status FROM delivery WHERE id = $1", DID)
    assert row["read_at"] is None
    assert status == "SENT"


async def test_an_erasure_removes_the_messages_and_their_text(pool: asyncpg.Pool) -> None:
    await project(pool, [accepted(NID, [DID], at=AT), created()])
    await project(pool, [RecipientErased(at=AT, recipient_id="u-1")])
    async with pool.acquire() as connection:
        left = await connection.fetchval("SELECT count(*) FROM inbox_message")
        body = await connection.fetchval(
            "SELECT body::text FROM delivery_event WHERE type = 'InboxMessageCreated'"
        )
    assert left == 0
    assert "Shipped" not in body
    assert "Order 7" not in body
    assert "u-1" in body
