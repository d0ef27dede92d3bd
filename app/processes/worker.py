"""A delivery worker process: settings from the environment, stops cleanly on SIGTERM."""

from __future__ import annotations

import asyncio
import signal
import socket

import structlog
import uvloop

from app import tracing
from app.campaigns.runner import CampaignRunner, campaign_runner
from app.catalog import Catalog, load_catalog
from app.delivery.feeder import Feeder
from app.delivery.worker import DeliveryWorker, WorkerOptions
from app.digests.closer import DigestCloser, digest_closer
from app.logging import configure_logging
from app.processes.gc_tuning import tune_gc
from app.processes.redis_checks import check_redis
from app.providers.registry import build_providers, close_providers
from app.settings import Settings
from app.unsubscribe import unsubscribe_links
from streams.core.connection import connect
from streams.core.keys import KeySpace
from streams.core.vocabulary import Channel, Priority

log = structlog.get_logger(__name__)


def consumer_name(slot: int) -> str:
    """Stable per host and process slot, so a restarted worker finds its own pending work."""
    return f"{socket.gethostname()}-{slot}"


def worker_options(settings: Settings) -> WorkerOptions:
    """The worker's lanes, lease and poison threshold from the settings."""
    return WorkerOptions(
        lanes={
            Priority.HIGH: settings.lane_high,
            Priority.NORMAL: settings.lane_normal,
            Priority.LOW: settings.lane_low,
        },
        lease_ms=settings.lease_ms,
        max_deliveries=settings.max_deliveries,
        state_retention_ms=settings.delivery_state_retention_seconds * 1000,
        failed_state_retention_ms=settings.dlq_retention_seconds * 1000,
        # Look for abandoned work a few times per lease.
        reclaim_interval_s=min(5.0, settings.lease_ms / 3000),
        unsubscribe=unsubscribe_links(settings),
        recipient_cap=settings.recipient_cap,
    )


def say_whether_emails_can_be_unsubscribed(catalog: Catalog, options: WorkerOptions) -> None:
    """Log once, at start-up, when emails go out without a one-click unsubscribe link."""
    if options.unsubscribe is not None:
        return
    opt_out_emails = sorted(
        name for name, t in catalog.types.items() if t.opt_out and Channel.EMAIL in t.channels
    )
    # Mailbox providers ask bulk senders for one-click unsubscribe: worth a warning when
    # such emails go out.
    say = log.warning if opt_out_emails else log.info
    say(
        "worker.unsubscribe_links_off",
        detail="CLARION_PUBLIC_URL is not set: no List-Unsubscribe header is added to emails",
        types=opt_out_emails,
    )


async def serve(settings: Settings, slot: int) -> None:
    """Run one worker until SIGTERM or SIGINT (also one that arrives while starting)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    catalog = load_catalog(settings.config_path)
    redis = connect(settings.redis_url, max_connections=128, health_check_interval=30)
    try:
        await check_redis(redis, settings.redis_url)
        keys = KeySpace(settings.key_prefix, settings.shards)
        options = worker_options(settings)
        say_whether_emails_can_be_unsubscribed(catalog, options)
        providers = build_providers(
            catalog,
            redis,
            keys,
            remember_ms=settings.stream_retention_seconds * 1000,
            public_url=settings.public_url,
        )
        worker = DeliveryWorker(
            redis,
            keys,
            catalog,
            providers,
            consumer=consumer_name(slot),
            address_digest=settings.address_digest(),
            options=options,
        )
        campaigns = campaign_runner(settings, redis, keys, catalog, consumer_name(slot))
        closer = digest_closer(settings, redis, keys, catalog)
        try:
            await _run_until_stopped(
                worker, campaigns, Feeder(redis, catalog.fairness), keys, stop, closer=closer
            )
        finally:
            await close_providers(providers)
    finally:
        await redis.aclose()


async def _run_until_stopped(
    worker: DeliveryWorker,
    campaigns: CampaignRunner,
    feeder: Feeder,
    keys: KeySpace,
    stop: asyncio.Event,
    *,
    closer: DigestCloser | None = None,
) -> None:
    """Run the delivery worker, the campaigns' generators, the fairness feeder and the
    digests' closer until ``stop`` is set or one of them ends; then stop them all and wait
    for them."""
    feeding_stops = asyncio.Event()
    running = asyncio.create_task(worker.run())
    generating = asyncio.create_task(campaigns.run())
    feeding = asyncio.create_task(feeder.run(keys.all_shards(), feeding_stops))
    closing = asyncio.create_task(closer.run() if closer else asyncio.sleep(0))
    stopping = asyncio.create_task(stop.wait())
    parts = {running, generating, feeding, stopping} | ({closing} if closer else set())
    await asyncio.wait(parts, return_when=asyncio.FIRST_COMPLETED)
    worker.stop()
    campaigns.stop()
    if closer:
        closer.stop()
    feeding_stops.set()
    stopping.cancel()
    await running  # raises what made the worker end on its own, if anything
    await generating
    await feeding
    await closing


def main(slot: int) -> None:
    """Process entry point (also the target of ``clarion run``'s worker processes)."""
    settings = Settings.from_env()
    configure_logging(settings.log_format, settings.log_level)
    tracing.setup("worker")  # before the worker is built: it traces its attempts only when on
    tune_gc()
    try:
        uvloop.run(serve(settings, slot))
    finally:
        tracing.shutdown()  # export the last attempts' spans
