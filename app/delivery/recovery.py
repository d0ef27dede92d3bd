"""Recovery: work other consumers left behind is taken over; what nobody can deliver is
dead-lettered, so it never blocks a consumer group or loops forever.

Every few seconds (``reclaim_interval_s``, jittered) each work stream is swept with
XAUTOCLAIM for entries idle longer than the lease, and the worker handles what it claims
like anything it reads. A delivery leased more than ``max_deliveries`` times without an
outcome is POISON (the lease says so, ``streams.delivery.store``): its delivery ends FAILED
and goes to the dead-letter queue. The stream's own delivery counter is not used for this:
it also counts hand-outs whose lease Redis refused (out of memory, say), which must never
make a delivery POISON. An entry that cannot be read at all goes to the dead-letter queue
raw. Entries trimmed from the stream meanwhile are acknowledged. A work stream whose group
is gone (Redis restarted empty) gets it again.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import structlog
from redis.asyncio import Redis
from redis.exceptions import ResponseError

from app.metrics import DELIVERY_FAILURES, UNKNOWN_CHANNEL
from streams.core.consumer_groups import (
    DELIVERY_GROUP,
    Entry,
    autoclaim,
    ensure_group,
    is_missing_group,
)
from streams.core.keys import KeySpace, ShardKeys
from streams.core.vocabulary import ErrorClass, Priority
from streams.delivery.store import DeliveryStore
from streams.dlq.entries import Worker, poison_entry
from streams.metrics.recorder import MetricsRecorder

log = structlog.get_logger(__name__)

RECLAIM_BATCH = 100
MAX_REASON_TEXT = 500

# What the worker does with entries recovery hands back: (shard, priority, entries).
HandleEntries = Callable[[ShardKeys, Priority, Sequence[Entry]], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class RecoveryOptions:
    lease_ms: int  # entries idle this long are taken over
    interval_s: float  # a sweep every interval (0.5 to 1.5 times it)


class Recovery:
    """Sweeps one worker process's work streams for abandoned and poison entries."""

    def __init__(
        self,
        redis: Redis,
        keys: KeySpace,
        store: DeliveryStore,
        *,
        worker: Worker,
        options: RecoveryOptions,
        metrics: MetricsRecorder,
        handle: HandleEntries,
    ) -> None:
        self.redis = redis
        self.keys = keys
        self.store = store
        self.worker = worker
        self.options = options
        self.metrics = metrics
        self.handle = handle

    async def run(self, stopping: asyncio.Event) -> None:
        """Sweep every work stream until ``stopping`` is set (or cancelled)."""
        while not stopping.is_set():
            await asyncio.sleep(self.options.interval_s * (0.5 + random.random()))
            for shard in self.keys.all_shards():
                for priority in Priority:
                    try:
                        await self.reclaim(shard, priority)
                    except asyncio.CancelledError:
                        raise
                    except Exception:
                        log.exception("reclaim.failed", stream=shard.work(priority))

    async def reclaim(self, shard: ShardKeys, priority: Priority) -> None:
        """Take over what other consumers left idle in one work stream and hand it to the
        worker, whose lease turns a delivery leased too often without an outcome POISON."""
        stream = shard.work(priority)
        cursor = "0-0"
        while True:
            try:
                cursor, claimed, deleted = await autoclaim(
                    self.redis, stream, DELIVERY_GROUP, self.worker.name,
                    min_idle_ms=self.options.lease_ms, start=cursor, count=RECLAIM_BATCH,
                )  # fmt: skip
            except ResponseError as error:
                if not is_missing_group(error):
                    raise
                log.warning("reclaim.group_missing", stream=stream)
                await ensure_group(self.redis, stream, DELIVERY_GROUP)
                return
            if deleted:  # trimmed away: nothing left to deliver
                await self.redis.xack(stream, DELIVERY_GROUP, *deleted)
            if claimed:
                log.info("reclaim.claimed", stream=stream, count=len(claimed))
                await self.handle(shard, priority, claimed)
            if cursor == "0-0":
                return

    async def poison(
        self,
        shard: ShardKeys,
        priority: Priority,
        entry_id: str,
        fields: dict[bytes, bytes],
        reason: str,
    ) -> None:
        """Dead-letter an entry nobody can handle, as it is; never let it block the group."""
        log.warning(
            "delivery.poison", stream=shard.work(priority), entry_id=entry_id, reason=reason
        )
        entry = poison_entry(entry_id, fields, reason=reason[:MAX_REASON_TEXT], worker=self.worker)
        await self.store.dead_letter_raw(shard, priority, entry_id, entry)
        self.metrics.inc(DELIVERY_FAILURES, (UNKNOWN_CHANNEL, ErrorClass.POISON))
