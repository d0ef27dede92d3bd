"""The projector process: events into PostgreSQL, until SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
from datetime import UTC, datetime

import asyncpg
import structlog
import uvloop
from redis.asyncio import Redis

from app.feedback.processor import FeedbackProcessor
from app.logging import configure_logging
from app.processes.gc_tuning import tune_gc
from app.processes.redis_checks import check_redis
from app.settings import Settings
from projections.database import DatabaseNotReady
from projections.database import connect as connect_database
from projections.parking import PROMOTE_AHEAD_MS, Parker
from projections.partitions import drop_expired_partitions, ensure_partitions
from projections.projector import Projector
from streams.core.connection import connect
from streams.core.keys import KeySpace
from streams.core.retention import keep_trimmed, policies
from streams.metrics.recorder import MetricsRecorder

log = structlog.get_logger(__name__)

# How often streams are trimmed; a stream holds at most this much more than its retention.
TRIM_INTERVAL_S = 60.0


async def serve(settings: Settings) -> None:
    """Run the projector until SIGTERM or SIGINT (also one that arrives while starting).

    The stream trimmer runs here, from the start: one per deployment rather than one per
    worker process, and it keeps Redis bounded even while PostgreSQL is away.
    """
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    redis = connect(settings.redis_url, max_connections=16, health_check_interval=30)
    trimmer: asyncio.Task[None] | None = None
    try:
        await check_redis(redis, settings.redis_url)
        keys = KeySpace(settings.key_prefix, settings.shards)
        trimmer = _start_trimming(settings, redis, keys)
        pool = await _database(settings, stop)
        if pool is None:
            return
        await _project(settings, redis, keys, pool, stop)
        await pool.close()
    finally:
        if trimmer is not None:
            trimmer.cancel()
            await asyncio.gather(trimmer, return_exceptions=True)
        await redis.aclose()


def _start_trimming(settings: Settings, redis: Redis, keys: KeySpace) -> asyncio.Task[None]:
    """The task that keeps every stream trimmed to its retention."""
    retention = policies(
        keys,
        stream_retention_ms=settings.stream_retention_seconds * 1000,
        dlq_retention_ms=settings.dlq_retention_seconds * 1000,
    )
    return asyncio.create_task(
        keep_trimmed(redis, retention, min(TRIM_INTERVAL_S, settings.stream_retention_seconds))
    )


async def _project(
    settings: Settings, redis: Redis, keys: KeySpace, pool: asyncpg.Pool, stop: asyncio.Event
) -> None:
    """Project the events and match providers' feedback, keeping the history's partitions,
    until ``stop`` is set or the projector or the feedback processor ends."""
    consumer = f"{socket.gethostname()}-projector"
    projector = Projector(
        redis, pool, keys, consumer=consumer,
        projected_state_retention_ms=settings.projected_state_retention_seconds * 1000,
    )  # fmt: skip
    metrics = MetricsRecorder(redis, keys)
    feedback = _feedback_processor(settings, redis, keys, pool, consumer=consumer, metrics=metrics)
    async with metrics.flushing():
        running = asyncio.create_task(projector.run())
        matching = asyncio.create_task(feedback.run())
        upkeep = asyncio.create_task(_keep_partitions(pool, settings.retention_days))
        parking = _parking(settings, redis, keys, pool)
        stopping = asyncio.create_task(stop.wait())
        await asyncio.wait({running, matching, stopping}, return_when=asyncio.FIRST_COMPLETED)
        projector.stop()
        feedback.stop()
        stopping.cancel()
        upkeep.cancel()
        for task in parking:  # a round cut short is repeated whole by the next one
            task.cancel()
        await asyncio.gather(running, matching)


def _feedback_processor(
    settings: Settings,
    redis: Redis,
    keys: KeySpace,
    pool: asyncpg.Pool,
    *,
    consumer: str,
    metrics: MetricsRecorder,
) -> FeedbackProcessor:
    """Provider feedback is matched here: by the read model, which only this process has."""

    async def read_model() -> asyncpg.Pool:
        return pool

    return FeedbackProcessor(
        redis,
        keys,
        read_model,
        consumer=consumer,
        state_retention_ms=settings.delivery_state_retention_seconds * 1000,
        metrics=metrics,
    )


def _parking(
    settings: Settings, redis: Redis, keys: KeySpace, pool: asyncpg.Pool
) -> list[asyncio.Task[None]]:
    """Far-future work items parked in PostgreSQL (``projections.parking``), unless off."""
    after_ms = settings.park_after_seconds * 1000
    if not after_ms:
        return []
    ahead_ms = min(PROMOTE_AHEAD_MS, after_ms // 2)
    parker = Parker(redis, pool, keys, park_after_ms=after_ms, promote_ahead_ms=ahead_ms)
    return [asyncio.create_task(parker.run(asyncio.Event()))]


async def _keep_partitions(pool: asyncpg.Pool, retention_days: int) -> None:
    """Create tomorrow's history partitions ahead and drop those past the retention, hourly."""
    while True:
        today = datetime.now(UTC).date()
        try:
            async with pool.acquire() as connection:
                await ensure_partitions(connection, today)
                dropped = await drop_expired_partitions(connection, today, retention_days)
            if dropped:
                log.info("projector.partitions_dropped", partitions=dropped)
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as error:
            log.warning("projector.partition_upkeep_failed", error=str(error))
        await asyncio.sleep(3600)


async def _database(settings: Settings, stop: asyncio.Event) -> asyncpg.Pool | None:
    """Connect (creating and migrating the database), retrying while PostgreSQL is away:
    ingest and delivery never wait for the read model."""
    backoff = 0.5
    while not stop.is_set():
        try:
            return await connect_database(settings.database_url)
        except (DatabaseNotReady, OSError, asyncpg.PostgresError) as error:
            log.warning("projector.database_unavailable", error=str(error), retry_in=backoff)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(backoff):
                    await stop.wait()
            backoff = min(10.0, backoff * 2)
    return None


def main() -> None:
    """Process entry point (``clarion projector``)."""
    settings = Settings.from_env()
    configure_logging(settings.log_format, settings.log_level)
    tune_gc()
    uvloop.run(serve(settings))
