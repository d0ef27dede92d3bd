"""Leasing a batch read: the deliveries of its work items leased in one script call.

A lease says whether to send (GO), to leave the item to the live lease holding it (LEASED),
or not to send at all: the delivery ended already (TERMINAL), its campaign was cancelled
(CANCELLED), or it was leased too often without an outcome (POISON). The outcomes of the
deliveries not to be sent are recorded here, in one call; the rest go back to the worker.
"""

from __future__ import annotations

from dataclasses import dataclass

import structlog

from app.delivery import decide
from app.metrics import DELIVERY_FAILURES, DUPLICATES_SKIPPED
from streams.core.keys import ShardKeys
from streams.core.vocabulary import ErrorClass, Priority
from streams.delivery import outcomes as delivery_outcomes
from streams.delivery.leases import LeasedDelivery, LeaseVerdict
from streams.delivery.store import DeliveryStore, Outcome
from streams.delivery.work_items import WorkItem
from streams.dlq.entries import Worker
from streams.metrics.recorder import MetricsRecorder

log = structlog.get_logger(__name__)

# Read once, not per delivery: on Python 3.11 a read of a member off its enum class costs
# about 1,000 instructions (``EnumType.__getattr__``'s hook). A duplicate is a work item
# whose delivery ended already (TERMINAL) or that another live lease holds (LEASED).
_GO, _LEASED, _TERMINAL = LeaseVerdict.GO, LeaseVerdict.LEASED, LeaseVerdict.TERMINAL


@dataclass(frozen=True, slots=True)
class Leasing:
    """Leases batches of deliveries for one consumer."""

    store: DeliveryStore
    worker: Worker
    metrics: MetricsRecorder
    lease_ms: int
    max_deliveries: int

    async def lease(
        self, shard: ShardKeys, priority: Priority, items: list[tuple[str, WorkItem]]
    ) -> list[LeasedDelivery]:
        """Lease the items' deliveries in one call, record what is not to be sent; the
        deliveries leased to us to send. LEASED items stay pending: their holder finishes
        them or recovery hands them out again."""
        leases = await self.store.begin(
            shard, priority, items, self.worker.name,
            lease_ms=self.lease_ms, max_leases=self.max_deliveries,
        )  # fmt: skip
        held = [
            LeasedDelivery.taken(shard, item, entry_id, lease, self.worker)
            for (entry_id, item), lease in zip(items, leases, strict=True)
        ]
        # One pass, by identity: most batches hold only GO leases.
        sendable: list[LeasedDelivery] = []
        dropped: list[Outcome] = []
        skipped = 0
        for leased in held:
            verdict = leased.lease.verdict
            if verdict is _GO:
                sendable.append(leased)
                continue
            if verdict is not _LEASED:  # TERMINAL, CANCELLED or POISON: recorded now
                dropped.append(self._unsent(leased))
            if verdict is _TERMINAL or verdict is _LEASED:
                skipped += 1
        if skipped:
            self.metrics.inc(DUPLICATES_SKIPPED, ("worker",), skipped)
        if dropped:
            await self.store.finish(dropped)
        return sendable

    def _unsent(self, leased: LeasedDelivery) -> Outcome:
        """The outcome of a delivery its lease says not to send (TERMINAL, CANCELLED, POISON)."""
        lease = leased.lease
        if lease.verdict is LeaseVerdict.POISON:
            limit = self.max_deliveries
            log.warning("delivery.poison", delivery_id=leased.item.delivery_id, leases=limit + 1)
            self.metrics.inc(DELIVERY_FAILURES, (leased.item.channel, ErrorClass.POISON))
        decision = decide.not_to_send(lease, self.max_deliveries)
        return delivery_outcomes.outcome(leased, decision, lease.now_ms)
