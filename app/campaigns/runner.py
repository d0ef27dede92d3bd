"""The campaign runner in every worker process: finds due campaigns and runs each one's
generator while this process holds the campaign's lease.

Every worker looks for due campaigns (``streams.campaigns.store.CampaignStore.due``) a few times a
second; the first to take a campaign's lease generates it, the others leave it. The lease
is renewed between batches; a worker that dies leaves its lease to run out, and another
worker takes the campaign over then, at the batch it had not recorded.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Final

import structlog
from redis.asyncio import Redis
from redis.exceptions import RedisError

from app.campaigns.generator import Generator, GeneratorOptions
from app.catalog import Catalog
from app.ingest.fanout import Planner
from app.ingest.ingestor import Ingestor
from app.settings import Settings
from streams.campaigns.store import CampaignStore
from streams.core import clock
from streams.core.keys import KeySpace
from streams.core.leases import Lease
from streams.metrics.recorder import MetricsRecorder

log = structlog.get_logger(__name__)

LEASE_MS: Final = 15_000


class CampaignRunner:
    """Runs the generators of due campaigns whose lease this process takes."""

    def __init__(
        self,
        redis: Redis,
        keys: KeySpace,
        generator: Generator,
        holder: str,
        *,
        poll_s: float = 0.5,
        lease_ms: int = LEASE_MS,
        metrics: MetricsRecorder | None = None,
    ) -> None:
        self.redis = redis
        self.keys = keys
        self.store = CampaignStore(redis, keys)
        self.generator = generator
        self.holder = holder
        self.poll_s = poll_s
        self.lease_ms = lease_ms
        # What the generator's ingestor records (suppressions, opt-outs, ...): flushed to
        # Redis while ``run`` runs, and once more when it ends.
        self.metrics = metrics
        self._running: dict[str, asyncio.Task[None]] = {}
        self._stopping = asyncio.Event()

    async def run(self) -> None:
        """Look for due campaigns until ``stop``; then let the generators finish their
        batch."""
        flushing = self.metrics.flushing() if self.metrics else contextlib.nullcontext()
        async with flushing:
            await self._poll()

    async def _poll(self) -> None:
        try:
            while not self._stopping.is_set():
                try:
                    due = await self.store.due(clock.now_ms())
                except RedisError as error:
                    log.warning("campaign.poll_failed", error=str(error))
                    due = []
                for campaign_id in due:
                    if campaign_id not in self._running:
                        self._running[campaign_id] = asyncio.create_task(
                            self._generate(campaign_id)
                        )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), self.poll_s)
        finally:
            if self._running:
                await asyncio.gather(*self._running.values(), return_exceptions=True)

    def stop(self) -> None:
        self._stopping.set()

    async def _generate(self, campaign_id: str) -> None:
        home = self.keys.campaign_home(campaign_id)
        lease = Lease(self.redis, home.campaign(campaign_id).lease, self.holder, self.lease_ms)

        async def renew() -> bool:
            return not self._stopping.is_set() and await lease.take()

        try:
            await self.generator.run(campaign_id, renew)
        except RedisError as error:
            log.warning("campaign.generator_interrupted", campaign_id=campaign_id, error=str(error))
        except Exception:
            log.exception("campaign.generator_failed", campaign_id=campaign_id)
        finally:
            self._running.pop(campaign_id, None)
            with contextlib.suppress(RedisError):  # else it runs out by itself
                await lease.release()


def campaign_runner(
    settings: Settings, redis: Redis, keys: KeySpace, catalog: Catalog, holder: str
) -> CampaignRunner:
    """A worker process's runner, its generator ingesting (and counting) as the API does."""
    metrics = MetricsRecorder(redis, keys)
    ingestor = Ingestor(
        redis,
        keys,
        Planner(catalog, settings.address_digest()),
        settings.idempotency_ttl_seconds,
        metrics=metrics,
    )
    store = CampaignStore(redis, keys)
    generator = Generator(ingestor, store, GeneratorOptions(backlog=settings.campaign_backlog))
    return CampaignRunner(redis, keys, generator, holder, metrics=metrics)
