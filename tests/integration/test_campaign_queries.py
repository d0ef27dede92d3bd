"""A campaign's deliveries counted by status in the read model, on real PostgreSQL: only its
own deliveries, each in the status the projector last wrote."""

from __future__ import annotations

import asyncpg

from projections.campaign_queries import campaign_counts
from streams.campaigns.ids import notification_key
from streams.core.ids import new_id
from tests.integration.projection_support import T0, accepted, delivered, project


async def notification(pool: asyncpg.Pool, key: str, statuses: list[str]) -> None:
    """One notification under ``key`` whose deliveries end in ``statuses``."""
    notification_id = new_id(0)
    delivery_ids = [new_id(0) for _ in statuses]
    events = [accepted(notification_id, delivery_ids, at=T0, idempotency_key=key)]
    for delivery_id, status in zip(delivery_ids, statuses, strict=True):
        events += delivered(notification_id, delivery_id, status, at=T0)
    await project(pool, events)


async def test_a_campaigns_deliveries_are_counted_by_status(pool: asyncpg.Pool) -> None:
    await notification(pool, notification_key("c-1", "u-1"), ["SENT", "CANCELLED"])
    await notification(pool, notification_key("c-1", "u-2"), ["SENT", "FAILED"])
    await notification(pool, notification_key("c-1", "u-3"), ["CANCELLED", "QUEUED"])
    # Another campaign's, and a producer's own notification, count for neither.
    await notification(pool, notification_key("c-2", "u-1"), ["SENT"])
    await notification(pool, "c-1", ["SENT"])

    assert await campaign_counts(pool, "c-1") == {
        "SENT": 2, "CANCELLED": 2, "FAILED": 1, "QUEUED": 1,
    }  # fmt: skip
    assert await campaign_counts(pool, "c-2") == {"SENT": 1}
    assert await campaign_counts(pool, "c-3") == {}


async def test_the_migration_indexes_deliveries_by_campaign(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as connection:
        await connection.execute("SET enable_seqscan = off")  # an empty table: ask for it
        plan = await connection.fetch(
            "EXPLAIN SELECT status, count(*) FROM delivery WHERE campaign_id = 'c-1' "
            "GROUP BY status"
        )
    text = "\n".join(row[0] for row in plan)
    # Every partition is read through its copy of delivery_by_campaign (named after it).
    assert "Seq Scan" not in text, text
    assert "Index Cond: (campaign_id = 'c-1'::text)" in text, text
