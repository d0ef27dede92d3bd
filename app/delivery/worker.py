"""The delivery worker: reads work items per priority lane and hands them to providers.

Per shard and priority one reader task takes entries from ``work:<priority>`` with the
consumer group ``delivery``; every priority has its own bound on sends in flight, so LOW can
never take HIGH's capacity. A batch read is leased in one script call, rate-limited in one,
and its outcomes are recorded in shared pipelines. On start a consumer first drains its own
pending entries; a reclaim task takes over entries other consumers left idle for longer than
the lease, and dead-letters those delivered too often. A scheduler task per shard moves due
``delayed`` members back to their streams.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec
import structlog
from redis.asyncio import Redis
from redis.exceptions import RedisError

from app import __version__
from app.catalog import Catalog
from app.delivery import outcomes as delivery_step
from app.delivery.outcomes import Step
from app.delivery.provider_timeouts import Deadlines
from app.delivery.rendering import RenderError, render
from app.metrics import DELIVERY_FAILURES, UNKNOWN_CHANNEL, record_outcome
from app.providers.base import ErrorClass, Message, Provider, ProviderError
from streams import codec
from streams.delivery import (
    FAILED_STATE_RETENTION_MS,
    GROUP,
    STATE_RETENTION_MS,
    DeliveryStore,
    Outcome,
    autoclaim,
    delivery_counts,
    ensure_group,
)
from streams.keys import KeySpace, Priority, ShardKeys
from streams.metrics import MetricsRecorder
from streams.rate_limiter import Rate, RateLimiter
from streams.recipient_settings import RecipientSettingsStore
from streams.scheduler import move_due
from streams.work_items import WorkItem

log = structlog.get_logger(__name__)

READ_BLOCK_MS = 1000
SCHEDULER_IDLE_S = 1.0  # longest sleep: entries other processes add are seen this late
RECLAIM_BATCH = 100


@dataclass(frozen=True, slots=True)
class WorkerOptions:
    lanes: Mapping[Priority, int] = field(
        default_factory=lambda: {Priority.HIGH: 64, Priority.NORMAL: 128, Priority.LOW: 8}
    )
    # How long a worker may hold a delivery; XAUTOCLAIM takes entries idle this long.
    lease_ms: int = 15_000
    max_deliveries: int = 5
    # How long an ended delivery's state stays in Redis; a FAILED one's, for DLQ replays.
    state_retention_ms: int = STATE_RETENTION_MS
    failed_state_retention_ms: int = FAILED_STATE_RETENTION_MS
    reclaim_interval_s: float = 5.0
    shutdown_grace_s: float = 10.0


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
        options: WorkerOptions | None = None,
        now_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
    ) -> None:
        self.redis = redis
        self.keys = keys
        self.catalog = catalog
        self.providers = providers
        self.consumer = consumer
        self.options = options or WorkerOptions()
        self.now_ms = now_ms
        self.store = DeliveryStore(
            redis,
            state_retention_ms=self.options.state_retention_ms,
            failed_state_retention_ms=self.options.failed_state_retention_ms,
        )
        self.rate_limiter = RateLimiter(redis, keys)
        self.recipient_settings = RecipientSettingsStore(redis, keys)
        self.metrics = MetricsRecorder(redis, keys)
        self._lanes = {p: asyncio.Semaphore(n) for p, n in self.options.lanes.items()}
        self._in_flight: set[asyncio.Task[None]] = set()
        self._deadlines = Deadlines()
        self._wake = {shard: asyncio.Event() for shard in keys.all_shards()}
        self._stopping = asyncio.Event()

    # --- lifecycle -------------------------------------------------------------------

    async def run(self) -> None:
        """Run until ``stop()``; then finish what is in flight, within the grace period."""
        shards = self.keys.all_shards()
        await self._ensure_groups(shards)
        loops = [
            asyncio.create_task(self._read_lane(shard, priority), name=f"lane-{priority}")
            for shard in shards
            for priority in Priority
        ]
        loops += [asyncio.create_task(self._schedule(shard)) for shard in shards]
        loops.append(asyncio.create_task(self._reclaim()))
        flusher = asyncio.create_task(self.metrics.run())
        watchdog = asyncio.create_task(self._deadlines.run())
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
        watchdog.cancel()
        flusher.cancel()
        await asyncio.gather(watchdog, flusher, return_exceptions=True)
        log.info("worker.stopped", consumer=self.consumer, unfinished=len(self._in_flight))

    async def _ensure_groups(self, shards: Sequence[ShardKeys]) -> None:
        """Create the consumer groups, waiting out a Redis that is briefly away: a worker
        (re)started while Redis restarts must wait for it, not exit."""
        delay = 0.1
        while not self._stopping.is_set():
            try:
                for shard in shards:
                    for priority in Priority:
                        await ensure_group(self.redis, shard.work(priority))
                return
            except (RedisError, OSError) as error:
                log.warning("worker.redis_unavailable", error=type(error).__name__, retry_in=delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)

    def stop(self) -> None:
        """Ask ``run`` to stop reading and return."""
        self._stopping.set()

    # --- reading -----------------------------------------------------------------------

    async def _read_lane(self, shard: ShardKeys, priority: Priority) -> None:
        stream = shard.work(priority)
        lane = self._lanes[priority]
        cursor = "0"  # first this consumer's own pending entries, then new ones
        # Every loop also checks the flag: a client library that turns a cancellation into
        # an error of its own must not keep a stopping worker alive.
        while not self._stopping.is_set():
            free = await self._wait_for_room(lane)
            try:
                reply: Any = await self.redis.xreadgroup(
                    GROUP,
                    self.consumer,
                    {stream: cursor},
                    count=free,
                    block=None if cursor != ">" else READ_BLOCK_MS,
                )
                entries = reply[0][1] if reply else []
                if cursor != ">":
                    if not entries:
                        cursor = ">"
                        continue
                    # Go on after what was just read: these entries stay pending while they
                    # are sent, and reading them again would send them again.
                    last_id = entries[-1][0]
                    cursor = last_id.decode() if isinstance(last_id, bytes) else last_id
                await self._handle_entries(shard, priority, entries)
            except asyncio.CancelledError:
                raise
            except Exception:
                # Whatever was read stays pending: the reclaimer hands it out again, and
                # the delivery counter dead-letters an entry that keeps failing.
                log.exception("worker.read_failed", stream=stream)
                await asyncio.sleep(1)

    async def _wait_for_room(self, lane: asyncio.Semaphore) -> int:
        """Wait until the lane has a free slot; how many are free."""
        async with lane:  # blocks while the lane is full
            pass
        return max(1, lane._value)

    async def _handle_entries(
        self,
        shard: ShardKeys,
        priority: Priority,
        entries: Sequence[tuple[bytes | str, dict[bytes, bytes]]],
    ) -> None:
        items: list[tuple[str, WorkItem]] = []
        for raw_id, fields in entries:
            entry_id = raw_id.decode() if isinstance(raw_id, bytes) else raw_id
            try:
                items.append((entry_id, codec.decode_work_item(fields[codec.WORK_FIELD.encode()])))
            except (KeyError, msgspec.DecodeError, msgspec.ValidationError) as error:
                await self._poison(shard, priority, entry_id, fields, f"undecodable: {error}")
        if not items:
            return
        leases = await self.store.begin(
            shard,
            [(item.delivery_id, item.notification_id, item.channel) for _, item in items],
            self.consumer,
            self.options.lease_ms,
        )
        steps = [
            Step(shard, item, entry_id, lease, self.consumer)
            for (entry_id, item), lease in zip(items, leases, strict=True)
        ]
        ended = [step for step in steps if step.lease.verdict == "TERMINAL"]
        if ended:  # a duplicate of a delivery that already ended: drop it
            await self.store.finish([delivery_step.acknowledge_only(s) for s in ended])
        leased = [step for step in steps if step.lease.verdict == "GO"]
        # LEASED items stay pending: their holder finishes them or the reclaimer returns them.
        await self._start(leased)

    async def _start(self, steps: list[Step]) -> None:
        now = self.now_ms()
        ready: list[Step] = []
        outcomes: list[Outcome] = []
        for step in steps:
            if now >= step.item.expires_ms:
                outcomes.append(delivery_step.expired(step, now))
            else:
                ready.append(step)
        waits = await self._quota(ready)
        for step, wait in zip(ready, waits, strict=True):
            if wait > 0:
                until = now + max(1, round(wait * 1000))
                outcomes.append(delivery_step.deferred(step, until, now))
                self._wake_scheduler(step.shard, until)
            else:
                lane = self._lanes[step.priority]
                await lane.acquire()
                task = asyncio.create_task(self._send(step, lane))
                self._in_flight.add(task)
                task.add_done_callback(self._in_flight.discard)
        if outcomes:
            await self.store.finish(outcomes)

    async def _quota(self, steps: list[Step]) -> list[float]:
        """Seconds each step must wait for its provider's quota (0: go now)."""
        waits = [0.0] * len(steps)
        requests: list[tuple[str, Rate, str]] = []
        limited: list[int] = []
        for index, step in enumerate(steps):
            provider = self.catalog.channels[step.item.channel].provider
            limit = self.catalog.providers[provider].rate_limit
            if limit is not None:
                rate = Rate(limit.per_second, limit.burst, limit.normal_share, limit.low_share)
                requests.append((provider, rate, step.item.priority))
                limited.append(index)
        if requests:
            granted = await self.rate_limiter.acquire_many(requests)
            for index, wait in zip(limited, granted, strict=True):
                waits[index] = wait
        return waits

    # --- one delivery ----------------------------------------------------------------------

    async def _send(self, step: Step, lane: asyncio.Semaphore) -> None:
        # Each send is a task of its own, so these ids reach every line logged about it.
        structlog.contextvars.bind_contextvars(
            notification_id=step.item.notification_id,
            delivery_id=step.item.delivery_id,
            channel=step.item.channel,
        )
        try:
            outcome = await self._attempt(step)
            [recorded] = await self.store.finish([outcome])
            if recorded == "OK":
                record_outcome(self.metrics, step.item, outcome)
            elif recorded == "BROKEN":  # the entry stays pending and is dead-lettered in time
                log.error("delivery.state_broken", delivery_id=step.item.delivery_id)
            else:  # another worker got there first: nothing recorded twice
                log.info(
                    "delivery.outcome_skipped", delivery_id=step.item.delivery_id, why=recorded
                )
            if outcome.delayed_member:
                self._wake_scheduler(step.shard, outcome.due_ms)
        except Exception:
            # The work entry stays pending: the reclaimer retries it, and the delivery
            # counter dead-letters it if this keeps happening.
            log.exception("worker.step_failed", delivery_id=step.item.delivery_id)
        finally:
            lane.release()

    async def _attempt(self, step: Step) -> Outcome:
        item = step.item
        provider_name = self.catalog.channels[item.channel].provider
        policy = self.catalog.channels[item.channel].retry
        try:
            title, body = render(self.catalog, item)
        except RenderError as error:
            log.warning("delivery.render_failed", error=str(error))
            return delivery_step.failed_attempt(
                step,
                error_class=ErrorClass.PERMANENT,
                error=str(error),
                policy=policy,
                now_ms=self.now_ms(),
            )
        message = Message(
            delivery_id=item.delivery_id,
            idempotency_key=item.delivery_id,
            channel=item.channel,
            address=item.address,
            title=title,
            body=body,
            attempt=step.lease.attempts + 1,
            data=item.data,
        )
        provider = self.providers[provider_name]
        timeout = self.catalog.providers[provider_name].timeout_seconds
        try:
            message_id = await self._deadlines.limit(timeout, provider.send(message))
        except ProviderError as error:
            log.info("delivery.attempt_failed", error_class=error.error_class, error=error.message)
            if error.invalid_address:
                await self._forget_address(item)
            return delivery_step.failed_attempt(
                step,
                error_class=error.error_class,
                error=error.message,
                policy=policy,
                now_ms=self.now_ms(),
                retry_after=error.retry_after,
            )
        except TimeoutError:
            return delivery_step.failed_attempt(
                step,
                error_class=ErrorClass.TRANSIENT,
                error=f"{provider_name}: no answer within {timeout:g} s",
                policy=policy,
                now_ms=self.now_ms(),
            )
        except Exception as error:  # a bug, here or in the adapter: survive it
            log.exception("delivery.bug")
            return delivery_step.failed(
                step,
                ErrorClass.BUG,
                f"{type(error).__name__}: {error}",
                self.now_ms(),
                attempts=step.lease.attempts + 1,
            )
        return delivery_step.sent(step, provider_name, message_id, self.now_ms())

    async def _forget_address(self, item: WorkItem) -> None:
        try:
            await self.recipient_settings.mark_address_invalid(
                item.recipient_id, item.channel, item.address
            )
        except Exception:
            log.exception("delivery.mark_invalid_failed", delivery_id=item.delivery_id)

    async def _poison(
        self,
        shard: ShardKeys,
        priority: Priority,
        entry_id: str,
        fields: dict[bytes, bytes],
        reason: str,
    ) -> None:
        """Dead-letter an entry nobody can handle; never let it block the group."""
        log.warning(
            "delivery.poison", stream=shard.work(priority), entry_id=entry_id, reason=reason
        )
        dead_letter: dict[str, Any] = {
            "error_class": ErrorClass.POISON.value,
            "last_error": reason[:500],
            "work_entry_id": entry_id,
            "worker": self.consumer,
            "worker_version": __version__,
        }
        for name, value in fields.items():
            dead_letter[f"raw_{name.decode(errors='replace')}"] = value
        await self.store.dead_letter_raw(shard, priority, entry_id, dead_letter)
        self.metrics.inc(DELIVERY_FAILURES, (UNKNOWN_CHANNEL, ErrorClass.POISON.value))

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
            await self._poison(shard, priority, entry_id, fields, reason)
            return
        [lease] = await self.store.begin(
            shard,
            [(item.delivery_id, item.notification_id, item.channel)],
            self.consumer,
            self.options.lease_ms,
        )
        step = Step(shard, item, entry_id, lease, self.consumer)
        if lease.verdict == "LEASED":
            return  # a live worker is on it now: it finishes it, or the entry comes back
        if lease.verdict == "TERMINAL":
            await self.store.finish([delivery_step.acknowledge_only(step)])
            return
        log.warning(
            "delivery.poison", stream=shard.work(priority), entry_id=entry_id, reason=reason
        )
        outcome = delivery_step.failed(
            step, ErrorClass.POISON, reason, self.now_ms(), attempts=lease.attempts
        )
        await self.store.finish([outcome])
        self.metrics.inc(DELIVERY_FAILURES, (item.channel, ErrorClass.POISON.value))

    # --- scheduler and reclaimer ---------------------------------------------------------

    def _wake_scheduler(self, shard: ShardKeys, due_ms: int) -> None:
        self._wake[shard].set()

    async def _schedule(self, shard: ShardKeys) -> None:
        wake = self._wake[shard]
        while not self._stopping.is_set():
            try:
                moved = await move_due(self.redis, shard, self.now_ms())
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("scheduler.failed", shard=shard.shard)
                await asyncio.sleep(1)
                continue
            if moved.count >= 1000:
                continue  # more is due right now
            sleep = SCHEDULER_IDLE_S
            if moved.next_due_ms is not None:
                sleep = min(sleep, max(0.0, (moved.next_due_ms - self.now_ms()) / 1000))
            wake.clear()
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a
            # cancellation that coincides with the wake-up, and the worker would never stop.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(sleep):
                    await wake.wait()

    async def _reclaim(self) -> None:
        while not self._stopping.is_set():
            await asyncio.sleep(self.options.reclaim_interval_s * (0.5 + random.random()))
            for shard in self.keys.all_shards():
                for priority in Priority:
                    try:
                        await self._reclaim_stream(shard, priority)
                    except asyncio.CancelledError:
                        raise
                    except Exception:
                        log.exception("reclaim.failed", stream=shard.work(priority))

    async def _reclaim_stream(self, shard: ShardKeys, priority: Priority) -> None:
        stream = shard.work(priority)
        idle = self.options.lease_ms
        # Take over what other consumers left idle; what was handed out too often goes to
        # the dead-letter queue instead (_sift).
        cursor = "0-0"
        while True:
            cursor, claimed, deleted = await autoclaim(
                self.redis, stream, self.consumer, min_idle_ms=idle, start=cursor,
                count=RECLAIM_BATCH,
            )  # fmt: skip
            if deleted:  # trimmed away: nothing left to deliver
                await self.redis.xack(stream, GROUP, *deleted)
            if claimed:
                log.info("reclaim.claimed", stream=stream, count=len(claimed))
                await self._handle_entries(
                    shard, priority, await self._sift(shard, priority, claimed)
                )
            if cursor == "0-0":
                return

    async def _sift(
        self,
        shard: ShardKeys,
        priority: Priority,
        claimed: list[tuple[str, dict[bytes, bytes]]],
    ) -> list[tuple[str, dict[bytes, bytes]]]:
        """The claimed entries to deliver; those handed out too often are dead-lettered.

        The counters are read after the claim, so no entry can pass its lease between the
        check and the claim. The claim itself counted as a delivery: the count before it
        is compared with the limit.
        """
        stream = shard.work(priority)
        counts = await delivery_counts(self.redis, stream, [entry_id for entry_id, _ in claimed])
        keep: list[tuple[str, dict[bytes, bytes]]] = []
        for entry_id, fields in claimed:
            before = counts.get(entry_id, 1) - 1
            if before > self.options.max_deliveries:
                reason = f"delivered {before} times without finishing"
                await self._give_up(shard, priority, entry_id, fields, reason)
            else:
                keep.append((entry_id, fields))
        return keep
