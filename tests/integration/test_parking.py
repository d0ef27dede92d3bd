"""Far-future work items parked in PostgreSQL and put back ahead of their time, on real Redis
and PostgreSQL: a notification sent 30 days ahead leaves nothing in ``delayed`` once parked,
comes back an hour before it is due and is then sent like any other; a repeat of either step
changes nothing; one cancelled meanwhile never comes back."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import asyncpg
from redis.asyncio import Redis

from projections.parking import Parker
from projections.rows import apply as apply_rows
from projections.rows import rows_of
from streams.core.keys import KeySpace
from streams.delivery import cancellations
from tests.integration.delivery_support import accept, fast_catalog

DAY_MS = 86_400_000
HOUR_MS = 3_600_000


def later(key: str, days: int = 30) -> dict[str, Any]:
    return {
        "recipient": {"id": "u-far", "email": "anna@example.com"},
        "type": "order_confirmed",
        "channels": ["EMAIL"],
        "data": {"order_id": key},
        "delay": days * 86400,
    }


class Clock:
    def __init__(self, now_ms: int) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


async def parked_rows(pool: asyncpg.Pool) -> list[tuple[str, int]]:
    rows = await pool.fetch("SELECT delivery_id::text, due_ms FROM parked_work ORDER BY due_ms")
    return [(row[0], row[1]) for row in rows]


async def test_parked_then_promoted_an_hour_ahead_and_a_repeat_changes_nothing(
    real_redis: Redis, key_prefix: str, pool: asyncpg.Pool
) -> None:
    keys = KeySpace(key_prefix)
    delayed = keys.shard(0).delayed
    far = (await accept(real_redis, keys, fast_catalog(), later("far"), "k-far"))["deliveries"][0]
    near = await accept(real_redis, keys, fast_catalog(), later("near", 0), "k-near")
    clock = Clock(int(datetime.now(UTC).timestamp() * 1000))
    parker = Parker(real_redis, pool, keys, clock=clock)
    members = await real_redis.zrange(delayed, 0, -1)

    assert await parker.round() == (1, 0)
    assert await parked_rows(pool) == [(far["id"], far["due_ms"])]
    assert await real_redis.zcard(delayed) == len(members) - 1  # only the far one left Redis
    assert await parker.round() == (0, 0)
    assert near  # sent at once: never parked

    clock.now_ms = far["due_ms"] - HOUR_MS + 1000  # within the hour before it is due
    assert await parker.round() == (0, 1)
    assert await parked_rows(pool) == []
    assert set(await real_redis.zrange(delayed, 0, -1)) == set(members)
    # Promoted again (a crash before the rows were deleted): the same member, nothing added.
    await pool.execute(
        "INSERT INTO parked_work VALUES (0, $1, $2, $3)",
        far["id"], far["due_ms"],
        next(m for m in members if far["id"].encode() in m),
    )  # fmt: skip
    assert await parker.round() == (0, 0)
    assert await real_redis.zcard(delayed) == len(members)


async def test_a_notification_cancelled_while_parked_never_comes_back(
    real_redis: Redis, key_prefix: str, pool: asyncpg.Pool
) -> None:
    keys = KeySpace(key_prefix)
    shard = keys.shard(0)
    answer = await accept(real_redis, keys, fast_catalog(), later("gone"), "k-gone")
    [delivery] = answer["deliveries"]
    clock = Clock(int(datetime.now(UTC).timestamp() * 1000))
    parker = Parker(real_redis, pool, keys, clock=clock)
    assert await parker.round() == (1, 0)
    records = [r for r in await cancellations.records_of(real_redis, shard, [answer["id"]]) if r]
    [done] = await cancellations.cancel(
        real_redis, shard, records, by="orders", retention_ms=60_000, now=datetime.now(UTC),
        parked_after_ms=6 * HOUR_MS,
    )  # fmt: skip
    assert [d.status for d in done.deliveries] == ["CANCELLED"]
    state = await real_redis.hgetall(shard.delivery(delivery["id"]))
    assert state[b"held"] == b"1"  # a parked copy may come back: the state stays
    assert await real_redis.pttl(shard.delivery(delivery["id"])) > 29 * DAY_MS

    clock.now_ms = delivery["due_ms"] - HOUR_MS + 1000
    assert await parker.round() == (0, 0)  # the state says CANCELLED: dropped
    assert await parked_rows(pool) == []
    assert await real_redis.zcard(shard.delayed) == 0


async def test_one_the_read_model_has_ended_is_dropped_without_asking_redis(
    real_redis: Redis, key_prefix: str, pool: asyncpg.Pool
) -> None:
    keys = KeySpace(key_prefix)
    shard = keys.shard(0)
    answer = await accept(real_redis, keys, fast_catalog(), later("ended"), "k-ended")
    [delivery] = answer["deliveries"]
    clock = Clock(int(datetime.now(UTC).timestamp() * 1000))
    parker = Parker(real_redis, pool, keys, clock=clock)
    assert await parker.round() == (1, 0)
    records = [r for r in await cancellations.records_of(real_redis, shard, [answer["id"]]) if r]
    await cancellations.cancel(
        real_redis, shard, records, by="orders", retention_ms=60_000, now=datetime.now(UTC),
        parked_after_ms=6 * HOUR_MS,
    )  # fmt: skip
    entries = [(e.decode(), f[b"e"]) for e, f in await real_redis.xrange(shard.events)]
    await apply_rows(pool, "s0", rows_of(0, entries))  # the read model has it CANCELLED
    await real_redis.delete(shard.delivery(delivery["id"]))  # as if its state were released
    clock.now_ms = delivery["due_ms"] - HOUR_MS + 1000
    assert await parker.round() == (0, 0)
    assert await parked_rows(pool) == []
    assert await real_redis.zcard(shard.delayed) == 0
