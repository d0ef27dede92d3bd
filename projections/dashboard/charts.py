"""Read-model queries behind the dashboard's charts: deliveries that ended, per channel and
minute, over a bounded window.

The window bounds the rows read: ``delivery_by_status`` (status, updated_at) is range-scanned
for each rated status from ``since`` to ``until`` in every partition, so a day's chart reads
that day's ended deliveries and never the older ones. At most one row per channel and minute
comes back (1,440 a channel for a day).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import asyncpg

from projections.dashboard.queries import RATED_STATUSES

_PER_MINUTE = """
SELECT COALESCE(channel, '?') AS channel,
       date_trunc('minute', updated_at) AS minute,
       count(*) AS ended,
       count(*) FILTER (WHERE status = 'FAILED') AS failed
FROM delivery
WHERE status = ANY($2::text[]) AND updated_at >= $3 AND updated_at < $4 AND producer = $1
GROUP BY 1, 2
ORDER BY 1, 2
"""


@dataclass(frozen=True, slots=True)
class MinuteCount:
    """The deliveries of one channel that ended in one minute, and the FAILED among them."""

    channel: str
    minute: datetime
    ended: int
    failed: int


async def ended_per_minute(
    pool: asyncpg.Pool, producer: str, since: datetime, until: datetime
) -> list[MinuteCount]:
    """The producer's deliveries that ended (a rated status, by the time of their last change)
    in [since, until), per channel and minute; minutes without any are left out."""
    async with pool.acquire() as connection:
        rows = await connection.fetch(_PER_MINUTE, producer, list(RATED_STATUSES), since, until)
    return [MinuteCount(row["channel"], row["minute"], row["ended"], row["failed"]) for row in rows]
