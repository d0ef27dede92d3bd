"""The delivery worker: reads work items per priority lane and hands them to providers.

Per shard and priority one reader task (``lane_reader``) takes entries from
``work:<priority>`` with the consumer group ``delivery``; every priority has its own bound on
sends in flight (``lanes``: a place is taken before a delivery is leased), so LOW can never
take HIGH's capacity. A batch read is leased in one script call (``leasing``) and
rate-limited in one; each send is a task of its own (``attempt``), started only while its
lease covers the provider's time limit, and the outcomes of concurrent sends are recorded in
shared pipelines. On start a consumer first drains its own pending entries.
A delivery waiting for an address is looked at first (``awaiting``), then one of a throttled
type is counted against its recipient's throttle (``throttling``).
Beside the lanes run ``recovery`` (abandoned and poison entries) and the ``scheduler`` (due
``delayed`` members) of every shard, and the ``heartbeat`` (CPU share, provider waits).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import msgspec
import structlog
from redis.asyncio import Redis

from app import __version__, tracing
from app.catalog import Catalog
from app.delivery import decide
from app.delivery.attempt import Attempts
from app.delivery.awaiting import AddressAwaiter, Looked
from app.delivery.dead_addresses import DeadAddresses
from app.delivery.heartbeat import HeartbeatWriter
from app.delivery.lane_reader import LaneReader
from app.delivery.lanes import Lanes
from app.delivery.leasing import Leasing
from app.delivery.provider_quota import ProviderQuota
from app.delivery.provider_timeouts import ProviderTimeouts, start_within_ms
from app.delivery.recovery import Recovery, RecoveryOptions
from app.delivery.routing import Bulkheads, Route, Router, circuit_policies
from app.delivery.scheduler import Scheduler
from app.delivery.throttling import Throttling
from app.delivery.tracing import TracedAttempts
from app.metrics import record_outcome, record_throttled
from app.providers.base import Provider
from app.unsubscribe import UnsubscribeLinks
from streams.core import clock, codec
from streams.core.consumer_groups import Entry
from streams.core.keys import KeySpace, ShardKeys
from streams.core.vocabulary import Priority
from streams.delivery import outcomes as delivery_outcomes
from streams.delivery.circuit_breaker import CircuitBreakers
from streams.delivery.decisions import Decision, Deferred, Throttled
from streams.delivery.leases import LeasedDelivery
from streams.delivery.rate_limiter import RateLimiter
from streams.delivery.store import (
    FAILED_STATE_RETENTION_MS,
    STATE_RETENTION_MS,
    DeliveryStore,
    Outcome,
)
from streams.delivery.throttles import throttled
from streams.delivery.work_items import WorkItem
from streams.dlq.entries import Worker
from streams.metrics.recorder import MetricsRecorder
from streams.recipients.settings import AddressDigest, RecipientSettingsStore
from streams.recipients.suppressions import SuppressionStore

log = structlog.get_logger(__name__)

_WORK_FIELD = codec.WORK_FIELD.encode()


@dataclass(frozen=True, slots=True)
class WorkerOptions:
    lanes: Mapping[Priority, int] = field(
        default_factory=lambda: {Priority.HIGH: 64, Priority.NORMAL: 128, Priority.LOW: 8}
    )
    # How long a worker may hold a delivery; XAUTOCLAIM takes entries idle this long.
    lease_ms: int = 15_000
    # Leases of one delivery without an outcome before it is POISON (CLARION_MAX_DELIVERIES).
    max_deliveries: int = 5
    # How long an ended delivery's state stays in Redis; a FAILED one's, for DLQ replays.
    state_retention_ms: int = STATE_RETENTION_MS
    failed_state_retention_ms: int = FAILED_STATE_RETENTION_MS
    reclaim_interval_s: float = 5.0
    shutdown_grace_s: float = 10.0
    # One-click unsubscribe links for EMAIL of opt-out-able types (None: no such header).
    unsubscribe: UnsubscribeLinks | None = None
    # The default cap of deliveries per recipient and channel (limit, seconds;
    # CLARION_RECIPIENT_CAP), for types without a throttle of their own and not HIGH.
    recipient_cap: tuple[int, int] | None = None


class DeliveryWorker:
    """One worker process's delivery loops."""

    def __init__(
        self,
        redis: Redis,
        keys: KeySpace,
        catalog: Catalog,
        providers: Mapping[str, Provider],
        *,
        consumer: str,
        address_digest: AddressDigest,
        options: WorkerOptions | None = None,
        now_ms: Callable[[], int] = clock.now_ms,
    ) -> None:
        self.redis = redis
        self.address_digest = address_digest
        self.keys = keys
        self.catalog = catalog
        self.consumer = consumer
        self.options = options = options or WorkerOptions()
        self.now_ms = now_ms
        self.store = DeliveryStore(
            redis,
            state_retention_ms=options.state_retention_ms,
            failed_state_retention_ms=options.failed_state_retention_ms,
        )
        self.rate_limiter = RateLimiter(redis, keys)
        self.recipient_settings = RecipientSettingsStore(redis, keys)
        self.metrics = MetricsRecorder(redis, keys)
        self.heartbeat = HeartbeatWriter(redis, keys, consumer)
        self.worker = Worker(consumer, __version__)
        self._leasing = Leasing(
            self.store, self.worker, self.metrics, options.lease_ms, options.max_deliveries
        )
        self._timeouts = ProviderTimeouts()
        self._suppressions = SuppressionStore(redis, keys)
        self._awaiter = AddressAwaiter(redis, catalog, self._suppressions, address_digest)
        self._attempts = self._attempts_for(providers)
        self.breakers = CircuitBreakers(redis, keys, circuit_policies(catalog))
        bounds = {name: config.max_in_flight for name, config in catalog.providers.items()}
        self._router = Router(catalog, self.breakers, Bulkheads(bounds))
        self._quota = ProviderQuota(self.rate_limiter, catalog)
        self._throttling = Throttling.of(redis, keys, catalog, options.recipient_cap)
        self._lanes = Lanes(options.lanes)
        self._start_within_ms = start_within_ms(catalog, options.lease_ms)
        self._in_flight: set[asyncio.Task[None]] = set()
        self._stopping = asyncio.Event()
        self._reader = LaneReader(redis, consumer, self._lanes, self._stopping, self.handle_entries)
        self._scheduler = Scheduler(redis, keys.all_shards())
        self._recovery = self._recovery_for(self._reader)

    def _attempts_for(self, providers: Mapping[str, Provider]) -> Attempts:
        """The attempts, which forget the addresses a provider says are dead."""
        dead = DeadAddresses(
            self.recipient_settings,
            self._suppressions,
            self.address_digest,
            self.now_ms,
        )
        # With tracing on, each attempt is a span (decided once: off, a send costs no more).
        return (TracedAttempts if tracing.ENABLED else Attempts)(
            self.catalog,
            providers,
            self._timeouts,
            self.now_ms,
            dead.forget,
            links=self.options.unsubscribe,
        )

    def _recovery_for(self, reader: LaneReader) -> Recovery:
        """Recovery, handing what it takes over to the lanes' reader (a lane's room at a time)."""
        return Recovery(
            self.redis,
            self.keys,
            self.store,
            worker=self.worker,
            options=RecoveryOptions(self.options.lease_ms, self.options.reclaim_interval_s),
            metrics=self.metrics,
            handle=reader.handle_taken_over,
        )

    # --- lifecycle -------------------------------------------------------------------

    async def run(self) -> None:
        """Run until ``stop()``; then finish what is in flight, within the grace period."""
        shards = self.keys.all_shards()
        await self._reader.ensure_groups(shards)
        loops = [
            asyncio.create_task(self._reader.read_lane(shard, priority), name=f"lane-{priority}")
            for shard in shards
            for priority in Priority
        ]
        loops += [
            asyncio.create_task(self._scheduler.run(shard, self._stopping)) for shard in shards
        ]
        loops.append(asyncio.create_task(self._recovery.run(self._stopping)))
        flusher = asyncio.create_task(self.metrics.run())
        beating = asyncio.create_task(self.heartbeat.run())
        watchdog = asyncio.create_task(self._timeouts.run())
        breakers = asyncio.create_task(self.breakers.run())
        log.info("worker.started", consumer=self.consumer, shards=len(shards))
        await self._stopping.wait()
        for task in loops:
            task.cancel()
        await asyncio.gather(*loops, return_exceptions=True)
        if self._in_flight:
            # What was read but not finished stays pending under this consumer's stable
            # name: the next start drains it first, or another worker reclaims it.
            await asyncio.wait(self._in_flight, timeout=self.options.shutdown_grace_s)
        # After the in-flight sends: their time limits hold and their outcomes are counted.
        for task in (watchdog, flusher, breakers, beating):
            task.cancel()
        await asyncio.gather(watchdog, flusher, breakers, beating, return_exceptions=True)
        log.info("worker.stopped", consumer=self.consumer, unfinished=len(self._in_flight))

    def stop(self) -> None:
        """Ask ``run`` to stop reading and return."""
        self._stopping.set()

    # --- batches read or taken over ------------------------------------------------------

    async def handle_entries(
        self, shard: ShardKeys, priority: Priority, entries: Sequence[Entry]
    ) -> None:
        """Lease the deliveries of these work entries and start the ones leased to us. The
        caller holds a place in the lane for each entry: a send takes its place over, the
        other places are given back here."""
        places = len(entries)
        try:
            items: list[tuple[str, WorkItem]] = []
            for entry_id, fields in entries:
                try:
                    items.append((entry_id, codec.decode_work_item(fields[_WORK_FIELD])))
                except (KeyError, msgspec.DecodeError, msgspec.ValidationError) as error:
                    reason = f"undecodable: {error}"
                    await self._recovery.poison(shard, priority, entry_id, fields, reason)
            if items:
                leased_at = self.now_ms()  # the leases begin in Redis after this
                go = await self._leasing.lease(shard, priority, items)
                places -= len(go)  # ``_start`` hands their places to sends or gives them back
                await self._start(priority, go, leased_at)
        finally:
            self._lanes.give_back(priority, places)

    async def _start(self, priority: Priority, held: list[LeasedDelivery], leased_at: int) -> None:
        """Expire what is past its TTL, route the rest to providers, defer what has no
        provider or quota now, send the rest: each in a lane place the caller holds."""
        now = self.now_ms()
        ready: list[tuple[LeasedDelivery, Route]] = []
        # Expired, deferred, throttled or (waiting for an address) suppressed or waiting again.
        decided: list[tuple[LeasedDelivery, Decision | Throttled]] = []
        looked = Looked()
        # Bulkhead places routing took and no send has taken over yet: whatever ends this
        # call early (Redis refusing the quota call, a stop) must not keep them for ever.
        owed: Counter[str] = Counter()
        sending = 0
        try:
            looked = await self._awaiter.look(held, now)
            decided += looked.decided
            routable = looked.held
            if self._throttling is not None:  # None: no type is throttled, nothing to ask
                routable, refused = await self._throttling.sift(routable, now)
                decided += refused
            await self._route(routable, now, ready, decided, owed)
            waits = await self._quota.waits([(route.provider, priority) for _, route in ready])
            started_at = self.now_ms()
            for (leased, route), wait in zip(ready, waits, strict=True):
                # A probe not made here is made by another delivery once its lease ends.
                if wait > 0:
                    decided.append((leased, decide.quota_wait(wait, now)))
                elif started_at - leased_at > self._start_within_ms[route.provider]:
                    # Its time limit would outlast the lease: another worker could lease and
                    # send it meanwhile. It stays pending; recovery hands it out again.
                    log.warning("delivery.lease_too_short", delivery_id=leased.item.delivery_id)
                else:
                    task = asyncio.create_task(self._send(leased, route))
                    sending += 1  # the send gives its lane place back when it ends
                    owed[route.provider] -= 1  # and its bulkhead place
                    self._in_flight.add(task)
                    task.add_done_callback(self._in_flight.discard)
        finally:
            self._lanes.give_back(priority, len(held) - sending)
            for provider, places in owed.items():
                for _ in range(places):
                    self._router.done(provider)
        if decided:
            outcomes = [self._held_back(*pair, now) for pair in decided]
            replies = await self.store.finish(outcomes)
            self._count(decided, outcomes, replies)
            if looked.waiting:
                await self._awaiter.index(looked, outcomes, replies)

    def _count(
        self,
        decided: list[tuple[LeasedDelivery, Decision | Throttled]],
        outcomes: list[Outcome],
        replies: Sequence[str],
    ) -> None:
        """Count the outcomes of deliveries held back that were recorded."""
        for (leased, decision), outcome, reply in zip(decided, outcomes, replies, strict=True):
            if reply == "OK":
                record_outcome(self.metrics, leased.item, outcome)
                if isinstance(decision, Throttled):
                    record_throttled(self.metrics, leased.item, decision.action)

    async def _route(
        self,
        held: list[LeasedDelivery],
        now: int,
        ready: list[tuple[LeasedDelivery, Route]],
        decided: list[tuple[LeasedDelivery, Decision | Throttled]],
        owed: Counter[str],
    ) -> None:
        """Sort what is held: past its TTL or without a provider now into ``decided``, the
        rest into ``ready`` with its route, each route's bulkhead place into ``owed``."""
        for leased in held:
            expired = decide.expired_before(leased.item, now)
            if expired is not None:
                decided.append((leased, expired))
                continue
            route = self._router.route_now(leased.item, now) or await self._router.route(
                leased.item, now
            )
            if route.provider:
                ready.append((leased, route))
                owed[route.provider] += 1
            else:
                decided.append((leased, Deferred(route.until_ms, route.reason)))

    def _held_back(
        self, leased: LeasedDelivery, decision: Decision | Throttled, now: int
    ) -> Outcome:
        """An expired, deferred or throttled delivery's outcome; a deferral wakes the
        scheduler."""
        if isinstance(decision, Throttled):
            if decision.action == "defer":
                self._scheduler.wake(leased.shard)
            return throttled(leased, decision, now)
        if isinstance(decision, Deferred):
            self._scheduler.wake(leased.shard)
            self.heartbeat.deferred(decision.reason)
        return delivery_outcomes.outcome(leased, decision, now)

    # --- one delivery ----------------------------------------------------------------------

    async def _send(self, leased: LeasedDelivery, route: Route) -> None:
        item = leased.item
        # Each send is a task of its own, so these ids reach every line logged about it.
        structlog.contextvars.bind_contextvars(
            notification_id=item.notification_id,
            delivery_id=item.delivery_id,
            channel=item.channel,
        )
        provider_failed: bool | None = None
        try:
            decision, at_ms, provider_failed = await self._attempts.attempt(leased, route.provider)
            if provider_failed is not None:
                self.breakers.record(route.provider, failed=provider_failed)
            outcome = delivery_outcomes.outcome(leased, decision, at_ms)
            [recorded] = await self.store.finish([outcome])
            if recorded == "OK":
                record_outcome(self.metrics, item, outcome)
            elif recorded == "BROKEN":  # the entry stays pending and is dead-lettered in time
                log.error("delivery.state_broken", delivery_id=item.delivery_id)
            else:  # another worker got there first: nothing recorded twice
                log.info("delivery.outcome_skipped", delivery_id=item.delivery_id, why=recorded)
            if outcome.delayed_member:
                self._scheduler.wake(leased.shard)
        except Exception:
            # The work entry stays pending: recovery retries it, and the delivery counter
            # dead-letters it if this keeps happening.
            log.exception("worker.step_failed", delivery_id=item.delivery_id)
        finally:
            self._lanes.give_back(leased.priority)
            self._router.done(route.provider)
            if route.probe:
                await self.breakers.probe_done(route.provider, ok=provider_failed is not True)
