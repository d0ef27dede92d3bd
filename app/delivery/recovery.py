"""Recovery: work other consumers left behind is taken over; what nobody can deliver is
dead-lettered, so it never blocks a consumer group or loops forever.

Every few seconds (``reclaim_interval_s``, jittered) each work stream is swept with
XAUTOCLAIM for entries idle longer than the lease. An entry handed out more than
``max_deliveries`` times is POISON: its delivery ends FAILED and goes to the dead-letter
queue. An entry that cannot be read at all goes there raw. Entries trimmed from the stream
meanwhile are acknowledged.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import msgspec
import structlog
from redis.asyncio import Redis

from app.metrics import DELIVERY_FAILURES, UNKNOWN_CHANNEL
from streams import codec, delivery_outcomes
from streams.consumer_groups import DELIVERY_GROUP, Entry, autoclaim, delivery_counts
from streams.delivery_outcomes import LeasedDelivery
from streams.delivery_store import DeliveryStore
from streams.dlq.entries import Worker, poison_entry
from streams.keys import KeySpace, ShardKeys
from streams.metrics_recorder import MetricsRecorder
from streams.vocabulary import ErrorClass, Priority

log = structlog.get_logger(__name__)

RECLAIM_BATCH = 100
MAX_REASON_TEXT = 500

# What the worker does with entries recovery hands back: (shard, priority, entries).
HandleEntries = Callable[[ShardKeys, Priority, Sequence[Entry]], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class RecoveryOptions:
    lease_ms: int  # entries idle this long are taken over
    max_deliveries: int  # handed out more often than this: POISON
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
        """Take over what other consumers left idle in one work stream; what was handed out
        too often goes to the dead-letter queue instead (``_sift``)."""
        stream = shard.work(priority)
        cursor = "0-0"
        while True:
            cursor, claimed, deleted = await autoclaim(
                self.redis, stream, DELIVERY_GROUP, self.worker.name,
                min_idle_ms=self.options.lease_ms, start=cursor, count=RECLAIM_BATCH,
            )  # fmt: skip
            if deleted:  # trimmed away: nothing left to deliver
                await self.redis.xack(stream, DELIVERY_GROUP, *deleted)
            if claimed:
                log.info("reclaim.claimed", stream=stream, count=len(claimed))
                await self.handle(shard, priority, await self._sift(shard, priority, claimed))
            if cursor == "0-0":
                return

    async def _sift(
        self, shard: ShardKeys, priority: Priority, claimed: list[Entry]
    ) -> list[Entry]:
        """The claimed entries to deliver; those handed out too often are dead-lettered.

        The counters are read after the claim, so no entry can pass its lease between the
        check and the claim. The claim itself counted as a delivery: the count before it
        is compared with the limit.
        """
        ids = [entry_id for entry_id, _ in claimed]
        counts = await delivery_counts(self.redis, shard.work(priority), DELIVERY_GROUP, ids)
        keep: list[Entry] = []
        for entry_id, fields in claimed:
            before = counts.get(entry_id, 1) - 1
            if before > self.options.max_deliveries:
                reason = f"delivered {before} times without finishing"
                await self._give_up(shard, priority, entry_id, fields, reason)
            else:
                keep.append((entry_id, fields))
        return keep

    async def _give_up(
        self,
        shard: ShardKeys,
        priority: Priority,
        entry_id: str,
        fields: dict[bytes, bytes],
        reason: str,
    ) -> None:
        """Dead-letter an entry handed out too often. Its delivery ends FAILED (POISON):
        acknowledging the entry alone would leave it QUEUED or SENDING for ever."""
        try:
            item = codec.decode_work_item(fields[codec.WORK_FIELD.encode()])
        except (KeyError, msgspec.DecodeError, msgspec.ValidationError):
            await self.poison(shard, priority, entry_id, fields, reason)
            return
        [lease] = await self.store.begin(shard, [item], self.worker.name, self.options.lease_ms)
        leased = LeasedDelivery(shard, item, entry_id, lease, self.worker)
        if lease.verdict == "LEASED":
            return  # a live worker is on it now: it finishes it, or the entry comes back
        if lease.verdict == "TERMINAL":
            await self.store.finish([delivery_outcomes.acknowledge_only(leased)])
            return
        log.warning(
            "delivery.poison", stream=shard.work(priority), entry_id=entry_id, reason=reason
        )
        outcome = delivery_outcomes.failed(
            leased, ErrorClass.POISON, reason, lease.now_ms, attempts=lease.attempts
        )
        await self.store.finish([outcome])
        self.metrics.inc(DELIVERY_FAILURES, (item.channel, ErrorClass.POISON))

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
