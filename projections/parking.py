"""Far-future work items kept in PostgreSQL, not Redis, until they are due soon.

A notification sent days ahead would hold its ``delayed`` member (about 540 bytes of Redis
at 177 bytes of template data: ``bench/schedule.py``) for all that time; at 50 million a day
with a tenth scheduled 30 days ahead that is beyond the plan's Redis memory
(``docs/running/capacity.md``). So, per shard, every ``interval_s``:

- **park**: the ``delayed`` members due more than ``park_after_ms`` ahead are written to
  ``parked_work`` (one row per delivery; a repeat changes nothing), committed, and only then
  taken out of ``delayed``. A crash between the two leaves both: the member in Redis is
  found again and parked again, the same row.
- **promote**: the rows due within ``promote_ahead_ms`` go back into ``delayed``
  (``streams.delivery.parking.promote``: ZADD NX, so a repeat adds nothing; an item whose
  delivery ended or is with a worker is dropped), then the rows are deleted. Rows whose
  delivery the read model has ended (cancelled, say) are deleted without going back.

Promotion happens well before the due time (``promote_ahead_ms``, an hour by default), so a
repeat after a crash meets the member still waiting in ``delayed``, and an outage of
PostgreSQL shorter than that delays nothing. Ingest and delivery never wait for this: ingest
writes every member to Redis, and a member stays there while PostgreSQL is away.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Sequence

import asyncpg
import structlog
from redis.asyncio import Redis
from redis.exceptions import RedisError

from streams.core.clock import now_ms
from streams.core.keys import KeySpace, ShardKeys
from streams.core.vocabulary import DeliveryStatus
from streams.delivery import parking
from streams.delivery.parking import Parked

log = structlog.get_logger(__name__)

BATCH = 1000  # members parked or promoted per round trip
PARK_AFTER_MS = 6 * 3_600_000  # park what is due more than this far ahead
PROMOTE_AHEAD_MS = 3_600_000  # put back what is due within this
INTERVAL_S = 5.0

_PARK = """
INSERT INTO parked_work (shard, delivery_id, due_ms, member)
SELECT $1, d, t, m FROM unnest($2::uuid[], $3::bigint[], $4::bytea[]) AS u(d, t, m)
ON CONFLICT (shard, delivery_id) DO UPDATE SET due_ms = EXCLUDED.due_ms, member = EXCLUDED.member
"""
# Due soon, with the delivery's status in the read model (NULL: not projected yet).
_DUE = """
SELECT p.delivery_id::text AS delivery_id, p.due_ms, p.member, d.status
FROM parked_work p LEFT JOIN delivery d ON d.id = p.delivery_id
WHERE p.shard = $1 AND p.due_ms <= $2
ORDER BY p.due_ms
LIMIT $3
"""
_FORGET = "DELETE FROM parked_work WHERE shard = $1 AND delivery_id = ANY($2::uuid[])"
# What a parked item may still become (else it is dropped): as accepted, or waiting.
_WAITING = frozenset({None, DeliveryStatus.QUEUED, DeliveryStatus.SCHEDULED})

# Redis or PostgreSQL away: the round is tried again at the next interval.
_AWAY = (RedisError, OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError)


async def park(redis: Redis, pool: asyncpg.Pool, shard: ShardKeys, after_ms: int) -> int:
    """Park the shard's members due after ``after_ms``; how many."""
    parked = 0
    while True:
        found = await parking.far_members(redis, shard, after_ms, BATCH)
        if not found:
            return parked
        await pool.execute(
            _PARK, shard.shard, [uuid.UUID(p.delivery_id) for p in found],
            [p.due_ms for p in found], [p.member for p in found],
        )  # fmt: skip
        await parking.forget(redis, shard, found)
        parked += len(found)
        if len(found) < BATCH:
            return parked


async def promote(redis: Redis, pool: asyncpg.Pool, shard: ShardKeys, until_ms: int) -> int:
    """Put the shard's parked items due by ``until_ms`` back into ``delayed``; how many."""
    promoted = 0
    while True:
        rows = await pool.fetch(_DUE, shard.shard, until_ms, BATCH)
        if not rows:
            return promoted
        waiting = [
            Parked(row["delivery_id"], row["due_ms"], bytes(row["member"]))
            for row in rows
            if row["status"] in _WAITING
        ]
        promoted += await parking.promote(redis, shard, waiting)
        await pool.execute(_FORGET, shard.shard, [uuid.UUID(row["delivery_id"]) for row in rows])
        if len(rows) < BATCH:
            return promoted


class Parker:
    """Parks and promotes every shard's far-future work items until stopped."""

    def __init__(
        self,
        redis: Redis,
        pool: asyncpg.Pool,
        keys: KeySpace,
        *,
        park_after_ms: int = PARK_AFTER_MS,
        promote_ahead_ms: int = PROMOTE_AHEAD_MS,
        interval_s: float = INTERVAL_S,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        if promote_ahead_ms >= park_after_ms:
            raise ValueError("promote_ahead_ms must be shorter than park_after_ms")
        self.redis = redis
        self.pool = pool
        self.shards: Sequence[ShardKeys] = keys.all_shards()
        self.park_after_ms = park_after_ms
        self.promote_ahead_ms = promote_ahead_ms
        self.interval_s = interval_s
        self.clock = clock

    async def round(self) -> tuple[int, int]:
        """One round over every shard: (parked, promoted)."""
        parked = promoted = 0
        for shard in self.shards:
            now = self.clock()
            promoted += await promote(self.redis, self.pool, shard, now + self.promote_ahead_ms)
            parked += await park(self.redis, self.pool, shard, now + self.park_after_ms)
        return parked, promoted

    async def run(self, stopping: asyncio.Event) -> None:
        """Rounds every ``interval_s`` until ``stopping`` is set."""
        while not stopping.is_set():
            try:
                parked, promoted = await self.round()
                if parked or promoted:
                    log.info("parking.round", parked=parked, promoted=promoted)
            except _AWAY as error:
                log.warning("parking.unavailable", error=str(error) or type(error).__name__)
            try:
                async with asyncio.timeout(self.interval_s):
                    await stopping.wait()
            except TimeoutError:
                pass
