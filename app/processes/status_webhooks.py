"""The status-webhooks process: final statuses to producers' URLs, until SIGTERM."""

from __future__ import annotations

import asyncio
import signal
import socket
from functools import partial

import structlog
import uvloop

from app.catalog import load_catalog
from app.logging import configure_logging
from app.processes.gc_tuning import tune_gc
from app.processes.redis_checks import check_redis
from app.settings import Settings
from app.status_webhooks.owners import ReadModelOwners
from app.status_webhooks.service import StatusWebhookService
from projections.database import connect as connect_database
from streams.core.connection import connect
from streams.core.keys import KeySpace
from streams.metrics.recorder import MetricsRecorder

log = structlog.get_logger(__name__)


def consumer_name() -> str:
    """Stable per host, so a restarted process reads its own pending events first."""
    return f"{socket.gethostname()}-status-webhooks"


async def serve(settings: Settings) -> None:
    """Run until SIGTERM or SIGINT (also one that arrives while starting)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    catalog = load_catalog(settings.config_path)
    redis = connect(settings.redis_url, max_connections=64, health_check_interval=30)
    try:
        await check_redis(redis, settings.redis_url)
        keys = KeySpace(settings.key_prefix, settings.shards)
        metrics = MetricsRecorder(redis, keys)
        service = StatusWebhookService(
            redis,
            keys,
            catalog.status_webhooks,
            consumer=consumer_name(),
            dlq_retention_ms=settings.dlq_retention_seconds * 1000,
            read_model=ReadModelOwners(
                partial(connect_database, settings.database_url, max_size=2)
            ),
            recorder=metrics,
        )
        async with metrics.flushing():
            running = asyncio.create_task(service.run())
            stopping = asyncio.create_task(stop.wait())
            await asyncio.wait({running, stopping}, return_when=asyncio.FIRST_COMPLETED)
            service.stop()
            stopping.cancel()
            await running  # raises what made the service end on its own, if anything
    finally:
        await redis.aclose()


def main() -> None:
    """Process entry point (``clarion status-webhooks``)."""
    settings = Settings.from_env()
    configure_logging(settings.log_format, settings.log_level)
    tune_gc()
    uvloop.run(serve(settings))
