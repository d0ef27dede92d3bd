"""Sending one producer's outbox: in order per delivery, retried, given up into dead letters.

A ``Sender`` reads the producer's outbox from its first entry (what is there is not done:
``streams.status_webhooks.outbox``) and deals each entry to one of ``lanes`` lanes by its delivery
id, so all statuses of a delivery go through one lane, in the order they were put in. Each
lane POSTs its entries one at a time and goes to the next only when the one before was
answered 2xx or given up: a failing status holds back its lane, never the others, and never
another producer (each has its own sender, connections and lanes). At most ``window``
entries are held in memory; the rest wait in Redis. A producer that asked for batches
(``max_batch``) gets up to that many of a lane's waiting statuses per POST, in order
(``payloads.batch_body``); a batch is retried and given up as one.

A failed POST is retried after a random wait below ``base·2^(attempt-1)`` capped at
``max_seconds`` (full jitter), or the answer's Retry-After if longer, as long as the retry
falls within ``give_up_seconds`` of the status being put in the outbox; otherwise the
status goes to the producer's dead letters with its attempts, last HTTP status and error.
When any lane gets through again, lanes waiting out a backoff try at once. A status that
reaches the head of its lane already past its time while the endpoint is failing is given
up without another attempt, so a long outage drains quickly once it ends.

Done entries are deleted from the outbox in batches (every 10 ms at most); a crash before that
sends them again (at least once: the ``webhook-id`` lets the receiver drop the repeat).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import zlib
from collections import deque
from collections.abc import Callable
from datetime import UTC, datetime
from itertools import islice

import structlog
from redis.asyncio import Redis
from redis.exceptions import RedisError

from app.catalog.status_webhooks import StatusWebhooksConfig
from app.metrics import STATUS_WEBHOOKS
from app.status_webhooks.endpoint import Answer, Endpoint
from app.status_webhooks.payloads import batch_body, batch_webhook_id
from streams.core import clock
from streams.core.connection import being_cancelled
from streams.core.keys import KeySpace
from streams.metrics.recorder import MetricsRecorder
from streams.status_webhooks.outbox import (
    GivenUp,
    OutboxEntry,
    dead_letter,
    delete_done,
    read_outbox,
)
from streams.status_webhooks.store import StatusWebhook

log = structlog.get_logger(__name__)

# How often the outbox is looked at when nobody said something was put in.
POLL_S = 1.0
REDIS_BACKOFF_S = 1.0
# Done entries are deleted together: after this long, or once this many are done. (One XDEL
# per few entries cost more CPU than the POSTs; a crash repeats at most this much more.)
FLUSH_DELAY_S = 0.01
FLUSH_BATCH = 200


class _Lane:
    """Entries of the deliveries that hash to one lane, in outbox order."""

    __slots__ = ("queue", "ready")

    def __init__(self) -> None:
        self.queue: deque[OutboxEntry] = deque()
        self.ready = asyncio.Event()


class Sender:
    """Sends one producer's outbox until ``stop()``."""

    def __init__(
        self,
        redis: Redis,
        keys: KeySpace,
        producer: str,
        endpoint: Endpoint,
        config: StatusWebhooksConfig,
        *,
        dlq_retention_ms: int,
        recorder: MetricsRecorder | None = None,
        uniform: Callable[[float, float], float] = random.uniform,
    ) -> None:
        self.redis = redis
        self.producer = producer
        self.hooks = keys.status_webhooks(producer)
        self.endpoint = endpoint
        self.config = config
        self.dlq_retention_ms = dlq_retention_ms
        self.recorder = recorder
        self._uniform = uniform
        self._lanes = [_Lane() for _ in range(config.lanes)]
        self._held = 0
        self._refill = max(1, config.window // 4)
        self._cursor = "-"
        self._wake = asyncio.Event()
        self._room = asyncio.Event()
        self._done: list[str] = []
        self._done_ready = asyncio.Event()
        # The last failed answer while the endpoint fails; None once a POST got through.
        self._failing: Answer | None = None
        self._recovered = asyncio.Event()
        self._stopping = False
        self.max_batch = 1

    def configure(self, hook: StatusWebhook) -> None:
        """Send to ``hook``'s URL with its secret and batch size, from the next POST on."""
        self.endpoint.configure(hook)
        self.max_batch = hook.max_batch

    def wake(self) -> None:
        """New statuses are in the outbox."""
        self._wake.set()

    def stop(self) -> None:
        """Stop reading; each lane ends after the POST it is making, if any."""
        self._stopping = True
        for event in (
            self._wake,
            self._room,
            self._recovered,
            *(lane.ready for lane in self._lanes),
        ):
            event.set()

    async def run(self) -> None:
        """Send until stopped; then delete what was done from the outbox."""
        lanes = [asyncio.create_task(self._lane(lane)) for lane in self._lanes]
        flusher = asyncio.create_task(self._flush_when_done())
        try:
            await self._read()
            await asyncio.gather(*lanes)
        finally:
            self.stop()
            for task in lanes:
                task.cancel()
            await asyncio.gather(*lanes, return_exceptions=True)
            self._done_ready.set()
            await flusher  # ends once what was done is deleted (or Redis refused it)

    async def _read(self) -> None:
        """Deal the outbox's entries to the lanes as room frees up, until stopped."""
        lanes = self._lanes
        while not self._stopping and not being_cancelled():
            room = self.config.window - self._held
            if room < self._refill and self._held:
                # Read again once a worthwhile share of the window is free, not after each
                # POST: one read per status was the sender's largest cost with a backlog.
                self._room.clear()
                await _wait(self._room, POLL_S)
                continue
            self._wake.clear()
            try:
                entries = await read_outbox(self.redis, self.hooks, self._cursor, room)
            except (RedisError, OSError) as error:
                if being_cancelled():  # the client turned a cancellation into an error
                    raise asyncio.CancelledError from error
                log.warning(
                    "status_webhooks.outbox_unreadable", producer=self.producer, error=str(error)
                )
                await asyncio.sleep(REDIS_BACKOFF_S)
                continue
            for entry in entries:
                lane = lanes[zlib.crc32(entry.delivery_id.encode()) % len(lanes)]
                lane.queue.append(entry)
                lane.ready.set()
            if entries:
                self._held += len(entries)
                self._cursor = entries[-1].entry_id
            if len(entries) < room:
                await _wait(self._wake, POLL_S)

    async def _lane(self, lane: _Lane) -> None:
        queue = lane.queue
        while not self._stopping:
            if not queue:
                lane.ready.clear()
                await lane.ready.wait()
                continue
            batch = [queue[0]] if self.max_batch == 1 else list(islice(queue, self.max_batch))
            if not await self._deliver(batch):
                return
            for _ in batch:
                queue.popleft()
            self._held -= len(batch)
            if self.config.window - self._held >= self._refill:
                self._room.set()

    async def _deliver(self, batch: list[OutboxEntry]) -> bool:
        """POST ``batch`` until it is answered 2xx or given up; False when stopped first."""
        retry = self.config.retry
        # The first entry is the oldest: the batch is given up when it has to be.
        deadline = batch[0].added_ms + int(retry.give_up_seconds * 1000)
        webhook_id, body = self._request(batch)
        attempts, first_ms, last = 0, 0, self._failing
        while not self._stopping:
            now = clock.now_ms()
            if now >= deadline and (attempts or self._failing is not None):
                return await self._give_up(batch, attempts, first_ms, last)
            answer = await self._post(webhook_id, body)
            attempts, first_ms, last = attempts + 1, first_ms or now, answer
            if answer.ok:
                self._got_through()
                self._done += [entry.entry_id for entry in batch]
                self._done_ready.set()
                self._count("sent", len(batch))
                return True
            self._failed(answer, len(batch))
            ceiling = min(retry.max_seconds, retry.base_seconds * 2.0 ** (attempts - 1))
            wait = max(self._uniform(0.0, ceiling), answer.retry_after or 0.0)
            if clock.now_ms() + wait * 1000 > deadline:
                return await self._give_up(batch, attempts, first_ms, last)
            # Woken early when another lane gets through: the endpoint is back.
            await _wait(self._recovered, wait)
        return False

    async def _post(self, webhook_id: str, body: bytes) -> Answer:
        """One POST; a bug in it is logged and counts as a failed attempt, so the lane goes on."""
        try:
            return await self.endpoint.post(webhook_id, body)
        except Exception as error:
            log.error("status_webhooks.post_failed", producer=self.producer, exc_info=error)
            return Answer(ok=False, error=f"internal error ({type(error).__name__})")

    def _request(self, batch: list[OutboxEntry]) -> tuple[str, bytes]:
        """The webhook-id and body of one POST: a status alone, or a batch."""
        if self.max_batch == 1:
            return batch[0].webhook_id, batch[0].body
        ids = [entry.webhook_id for entry in batch]
        return batch_webhook_id(ids), batch_body([e.body for e in batch], datetime.now(UTC))

    def _got_through(self) -> None:
        if self._failing is not None:
            self._failing = None
            log.info("status_webhooks.endpoint_recovered", producer=self.producer)
            recovered, self._recovered = self._recovered, asyncio.Event()
            recovered.set()

    def _failed(self, answer: Answer, statuses: int) -> None:
        if self._failing is None:
            log.warning(
                "status_webhooks.endpoint_failing",
                producer=self.producer, status_code=answer.status_code, error=answer.error,
            )  # fmt: skip
        self._failing = answer
        self._count("failed_attempt", statuses)

    async def _give_up(
        self, batch: list[OutboxEntry], attempts: int, first_ms: int, last: Answer | None
    ) -> bool:
        """Move ``batch`` to the dead letters (retried while Redis is away); False when
        stopped first."""
        error = last.error if last is not None else "no attempt"
        if attempts == 0:
            error = f"not sent: past give_up_seconds while the endpoint was failing ({error})"
        why = GivenUp(
            attempts=attempts,
            first_attempt_ms=first_ms,
            last_attempt_ms=clock.now_ms() if attempts else 0,
            status_code=last.status_code if last is not None else 0,
            error=error,
        )
        while not self._stopping:
            try:
                await dead_letter(self.redis, self.hooks, batch, self.dlq_retention_ms, why)
            except (RedisError, OSError) as failure:
                if being_cancelled():  # the client turned a cancellation into an error
                    raise asyncio.CancelledError from failure
                log.warning(
                    "status_webhooks.dead_letter_failed", producer=self.producer, error=str(failure)
                )
                await asyncio.sleep(REDIS_BACKOFF_S)
                continue
            log.warning(
                "status_webhooks.dead_lettered",
                producer=self.producer, webhook_ids=[e.webhook_id for e in batch[:5]],
                statuses=len(batch), attempts=attempts, status_code=why.status_code, error=error,
            )  # fmt: skip
            self._count("dead_lettered", len(batch))
            return True
        return False

    def _count(self, outcome: str, statuses: int) -> None:
        if self.recorder is not None:
            self.recorder.inc(STATUS_WEBHOOKS, (self.producer, outcome), statuses)

    async def _flush_when_done(self) -> None:
        while True:
            await self._done_ready.wait()
            if not self._stopping and len(self._done) < FLUSH_BATCH:
                await asyncio.sleep(FLUSH_DELAY_S)
            self._done_ready.clear()
            try:
                await self._flush()
            except (RedisError, OSError) as error:
                if self._stopping or being_cancelled():
                    return  # what was not deleted is sent again by the next sender
                log.warning(
                    "status_webhooks.outbox_delete_failed", producer=self.producer, error=str(error)
                )
                await asyncio.sleep(REDIS_BACKOFF_S)
                self._done_ready.set()
            if self._stopping and not self._done:
                return

    async def _flush(self) -> None:
        """Delete the done entries from the outbox (put back when Redis refused)."""
        done, self._done = self._done, []
        try:
            await delete_done(self.redis, self.hooks, done)
        except BaseException:
            self._done = done + self._done
            raise


async def _wait(event: asyncio.Event, seconds: float) -> None:
    """Until ``event`` is set, at most ``seconds``."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), seconds)
