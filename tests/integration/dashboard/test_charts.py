"""The charts' per-minute query on real PostgreSQL: deliveries that ended in the window, per
channel and minute, FAILED among them, one producer's only; and it reads the window through
the status index, not every delivery the read model keeps."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import asyncpg

from projections.dashboard.charts import _PER_MINUTE, MinuteCount, ended_per_minute
from projections.dashboard.queries import RATED_STATUSES
from streams.core.ids import new_id

UNTIL = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
SINCE = UNTIL - timedelta(hours=24)


async def insert(
    pool: asyncpg.Pool, channel: str | None, status: str, at: datetime, producer: str = "shop"
) -> None:
    await pool.execute(
        "INSERT INTO delivery (id, notification_id, producer, channel, status, updated_at,"
        " version) VALUES ($1, $2, $3, $4, $5, $6, 3)",
        new_id(0), new_id(0), producer, channel, status, at,
    )  # fmt: skip


async def test_deliveries_that_ended_are_counted_per_channel_and_minute(
    pool: asyncpg.Pool,
) -> None:
    minute = UNTIL - timedelta(minutes=30)
    for channel, status, at in [
        ("SMS", "SENT", minute + timedelta(seconds=1)),
        ("SMS", "FAILED", minute + timedelta(seconds=59)),
        ("SMS", "DELIVERED", minute + timedelta(minutes=1)),  # the next minute
        ("SMS", "QUEUED", minute),  # not ended
        ("SMS", "SUPPRESSED", minute),  # never meant to be attempted
        ("EMAIL", "EXPIRED", SINCE),  # the first instant of the window is in it
        ("EMAIL", "SENT", UNTIL),  # its end is not
        ("EMAIL", "SENT", SINCE - timedelta(seconds=1)),  # too old
        (None, "FAILED", minute),  # a delivery without a channel still counts
    ]:
        await insert(pool, channel, status, at)
    await insert(pool, "SMS", "FAILED", minute, producer="other")

    assert await ended_per_minute(pool, "shop", SINCE, UNTIL) == [
        MinuteCount("?", minute, ended=1, failed=1),
        MinuteCount("EMAIL", SINCE, ended=1, failed=0),
        MinuteCount("SMS", minute, ended=2, failed=1),
        MinuteCount("SMS", minute + timedelta(minutes=1), ended=1, failed=0),
    ]
    assert await ended_per_minute(pool, "nobody", SINCE, UNTIL) == []


async def test_a_day_is_read_through_the_status_index(pool: asyncpg.Pool) -> None:
    """Ten days of deliveries, 2,000 a day: the plan range-scans ``delivery_by_status`` for
    the window instead of reading the table, and reads only the window's rows."""
    await pool.execute(
        "INSERT INTO delivery (id, notification_id, producer, channel, status, updated_at,"
        " version)"
        " SELECT gen_random_uuid(), gen_random_uuid(), 'shop',"
        " (ARRAY['SMS', 'EMAIL', 'PUSH'])[1 + n % 3],"
        " (ARRAY['SENT', 'FAILED', 'DELIVERED'])[1 + n % 3],"
        " $1::timestamptz - n * interval '43.2 seconds', 3"
        " FROM generate_series(1, 20000) AS n",
        UNTIL,
    )  # fmt: skip
    await pool.execute("ANALYZE delivery")
    explain = "EXPLAIN (ANALYZE, FORMAT JSON) " + _PER_MINUTE
    plan = json.loads(await pool.fetchval(explain, "shop", list(RATED_STATUSES), SINCE, UNTIL))
    nodes = list(walk(plan[0]["Plan"]))
    scans = [n for n in nodes if n.get("Relation Name", "").startswith("delivery")]
    assert scans, nodes
    # The day partitions made for today are empty; the rows are read by index, and only
    # the window's (the producer filter and a recheck remove none outside it).
    reading = [n for n in scans if n["Actual Rows"]]
    assert reading, scans
    assert all(n["Node Type"] != "Seq Scan" for n in reading), reading
    read = sum(
        int(n["Actual Rows"]) + int(n.get("Rows Removed by Filter", 0))
        + int(n.get("Rows Removed by Index Recheck", 0))
        for n in scans
    )  # fmt: skip
    assert 1990 <= read <= 2001, read
    assert len(await ended_per_minute(pool, "shop", SINCE, UNTIL)) > 1000


def walk(node: dict[str, object]) -> list[dict[str, object]]:
    """``node`` and every node under it in an EXPLAIN plan."""
    found = [node]
    for child in node.get("Plans", []):  # type: ignore[attr-defined]
        found += walk(child)
    return found
