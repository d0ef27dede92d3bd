"""A campaign's deliveries in the read model, counted by status.

A delivery row names its campaign (``campaign_id``, migration 005) when its notification was
ingested under a campaign's idempotency key; the partial index ``delivery_by_campaign`` on
(campaign_id, status) answers the count without reading other deliveries.
"""

from __future__ import annotations

import asyncpg

_COUNTS = """
SELECT status, count(*) AS n FROM delivery WHERE campaign_id = $1 GROUP BY status
"""


async def campaign_counts(pool: asyncpg.Pool, campaign_id: str) -> dict[str, int]:
    """How many of the campaign's deliveries are in each status (statuses with none are
    left out)."""
    rows = await pool.fetch(_COUNTS, campaign_id)
    return {row["status"]: row["n"] for row in rows}
