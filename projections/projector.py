"""The projector: materialises every shard's ``events`` stream into PostgreSQL.

One consumer group (``projector``) per shard's ``events`` stream. A read batch is applied in
one transaction (``projections.rows``: notifications inserted, delivery rows upserted only
when the event's version is newer, every event appended to ``delivery_event``, the
checkpoint saved) and acknowledged only after the commit. Projecting an entry again, in
whole or in part, leaves the same rows; a crash between commit and XACK therefore costs a
repeat, never a duplicate. Once a batch is committed, the state hashes of the deliveries it
ended for good are let go from Redis (``streams.delivery.state_release``). While PostgreSQL is
unreachable the batch is retried with backoff; ingest and delivery do not wait for the
projector. A group that vanished (Redis restarted empty) is made again by the projector
that finds it gone.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

import asyncpg
import structlog
from redis.asyncio import Redis
from redis.exceptions import RedisError

from projections import rows
from projections.rows import Rows
from streams.core import codec
from streams.core.consumer_groups import PROJECTOR_GROUP, autoclaim, ensure_group, is_missing_group
from streams.core.keys import KeySpace, ShardKeys
from streams.delivery.state_release import release_states

log = structlog.get_logger(__name__)

_EVENT_FIELD = codec.EVENT_FIELD.encode()
# An entry holds the events of one script call: of up to 64 notifications at ingest, of up
# to 64 deliveries when a worker records outcomes. A batch is read READ_COUNT entries at a
# time until it holds about BATCH_BYTES of events (3,000-5,000 events, by their mix) or
# nothing more is waiting: big enough to amortise a transaction's fixed cost, small enough
# to commit often. (Batches of ~1,350 events projected 25 % fewer events/s than ~11,000.)
READ_COUNT = 20
BATCH_BYTES = 1_000_000
READ_BLOCK_MS = 50
MAX_BACKOFF_S = 5.0
RECLAIM_IDLE_MS = 30_000
# How long (ms) an ended delivery's state stays in Redis once projected, by default
# (``CLARION_PROJECTED_STATE_RETENTION``).
PROJECTED_STATE_RETENTION_MS = 300_000


class Projector:
    """Projects every shard's events stream; one instance per projector process."""

    def __init__(
        self,
        redis: Redis,
        pool: asyncpg.Pool,
        keys: KeySpace,
        consumer: str,
        *,
        projected_state_retention_ms: int = PROJECTED_STATE_RETENTION_MS,
    ) -> None:
        self.redis = redis
        self.pool = pool
        self.keys = keys
        self.consumer = consumer
        self.projected_state_retention_ms = projected_state_retention_ms
        self._stopping = asyncio.Event()

    async def run(self) -> None:
        """Project until ``stop()``; the batch in hand is finished first.

        A shard's loop waits out Redis and PostgreSQL being away; one that fails otherwise
        ends the run with its error (every other shard's loop stopped first), so that the
        process exits and is restarted: it once went on with that shard's projection dead.
        """
        tasks = [asyncio.create_task(self._project(shard)) for shard in self.keys.all_shards()]
        stopped = asyncio.create_task(self._stopping.wait())
        await asyncio.wait([stopped, *tasks], return_when=asyncio.FIRST_COMPLETED)
        self._stopping.set()
        outcomes = await asyncio.gather(*tasks, return_exceptions=True)
        await stopped
        for outcome in outcomes:
            if isinstance(outcome, Exception):
                log.error("projector.failed", exc_info=outcome)
                raise outcome

    def stop(self) -> None:
        self._stopping.set()

    async def _ensure_group(self, stream: str) -> None:
        """Make the group, waiting out a Redis that is away (a restart, say)."""
        backoff = 0.1
        while not self._stopping.is_set():
            try:
                await ensure_group(self.redis, stream, PROJECTOR_GROUP)
                return
            except RedisError as error:
                log.warning("projector.redis_unavailable", error=str(error), retry_in=backoff)
                await asyncio.sleep(backoff)
                backoff = min(MAX_BACKOFF_S, backoff * 2)

    async def _project(self, shard: ShardKeys) -> None:
        stream = shard.events
        await self._ensure_group(stream)
        cursor = "0"  # first this consumer's own pending entries, then new ones
        backoff = 0.1
        # New entries are read and turned into rows while PostgreSQL writes the batch
        # before them: the two halves of the work overlap instead of taking turns. At
        # most one batch is being written; batches commit in stream order.
        writing = _Writing()
        try:
            while not self._stopping.is_set():
                try:
                    if cursor != ">":  # the pending entries include those being written
                        await writing.finish()
                    entries = await self._read(stream, cursor)
                    backoff = 0.1
                    if not entries:
                        await writing.finish()
                        if cursor == "0":
                            cursor = ">"
                        else:
                            await self._reclaim(shard)
                        continue
                    batch = _Batch.of(shard.shard, entries)
                    await writing.finish()
                    if cursor == ">":
                        writing.start(self._write(shard, batch))
                    else:
                        await self._write(shard, batch)
                except RedisError as error:
                    # Redis is unreachable or restarting. What was read and not
                    # acknowledged is still pending under this consumer: read that first
                    # once it is back. A group that vanished (Redis restarted empty) is
                    # made again at once.
                    cursor = "0"
                    if is_missing_group(error):
                        log.warning("projector.group_missing", stream=stream)
                        await self._ensure_group(stream)
                        continue
                    log.warning(
                        "projector.redis_unavailable",
                        error=str(error) or type(error).__name__,
                        retry_in=backoff,
                    )
                    await asyncio.sleep(backoff)
                    backoff = min(MAX_BACKOFF_S, backoff * 2)
        finally:
            await writing.finish()

    async def _read(self, stream: str, cursor: str) -> list[tuple[Any, dict[bytes, Any]]]:
        """The next batch: entries after ``cursor`` ("0": this consumer's own pending ones,
        ">": new ones, waiting up to READ_BLOCK_MS for the first)."""
        entries: list[tuple[Any, dict[bytes, Any]]] = []
        size = 0
        while True:
            reply: Any = await self.redis.xreadgroup(
                PROJECTOR_GROUP, self.consumer, {stream: cursor}, count=READ_COUNT,
                block=None if cursor != ">" or entries else READ_BLOCK_MS,
            )  # fmt: skip
            read = reply[0][1] if reply else []
            entries += read
            size += sum(len(fields.get(_EVENT_FIELD, b"")) for _, fields in read)
            if len(read) < READ_COUNT or size >= BATCH_BYTES:
                return entries
            if cursor != ">":  # reading pending entries: go on after the last one read
                cursor = _text(read[-1][0])

    async def _write(self, shard: ShardKeys, batch: _Batch) -> None:
        """Apply a batch (retrying while PostgreSQL is away), let go of the states it ended,
        then acknowledge its entries."""
        backoff = 0.1
        while True:
            try:
                await rows.apply(self.pool, shard.events, batch.rows)
                break
            except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as error:
                if self._stopping.is_set():
                    return  # unacknowledged: the next start projects these entries again
                log.warning("projector.postgres_unavailable", error=str(error), retry_in=backoff)
                await asyncio.sleep(backoff)
                backoff = min(MAX_BACKOFF_S, backoff * 2)
        await release_states(
            self.redis, shard, batch.rows.ended(), self.projected_state_retention_ms
        )
        await self.redis.xack(shard.events, PROJECTOR_GROUP, *batch.ids)

    async def _reclaim(self, shard: ShardKeys) -> None:
        """Take over entries a crashed projector consumer left pending."""
        _, claimed, deleted = await autoclaim(
            self.redis, shard.events, PROJECTOR_GROUP, self.consumer,
            min_idle_ms=RECLAIM_IDLE_MS, start="0-0", count=READ_COUNT,
        )  # fmt: skip
        if deleted:
            await self.redis.xack(shard.events, PROJECTOR_GROUP, *deleted)
        if claimed:
            await self._write(shard, _Batch.of(shard.shard, claimed))


@dataclass(frozen=True, slots=True)
class _Batch:
    """Entries read from one shard's stream: their ids and the rows they write."""

    ids: list[str]
    rows: Rows

    @classmethod
    def of(cls, shard: int, entries: list[tuple[Any, dict[bytes, Any]]]) -> _Batch:
        ids = [_text(entry_id) for entry_id, _ in entries]
        encoded = [
            (entry_id, fields.get(_EVENT_FIELD, b"[]"))
            for entry_id, (_, fields) in zip(ids, entries, strict=True)
        ]
        return cls(ids, rows.rows_of(shard, encoded))


class _Writing:
    """The batch write that runs in the background while the next batch is read."""

    def __init__(self) -> None:
        self._task: asyncio.Task[None] | None = None

    def start(self, write: Coroutine[Any, Any, None]) -> None:
        assert self._task is None, "one batch write at a time"
        self._task = asyncio.create_task(write)

    async def finish(self) -> None:
        """Wait for the write in progress, if any; its errors are raised here."""
        task, self._task = self._task, None
        if task is not None:
            await task


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
