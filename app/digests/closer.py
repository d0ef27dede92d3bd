"""Closing due digests, in every worker process.

Each worker process looks at every shard's due digests every ``TICK_S`` (or as soon as the
next one is due): a due digest is sealed (no notification joins it any more), its items are
read, and its notification is ingested like any other under the idempotency key
``digest:<id>``, from the producer of its first item, with the items' data as ``items``, their
number as ``count`` and the digest's ``key``; then the digest is closed. Processes that close
the same digest at once, or a close repeated after a crash, make one notification: the
idempotency key sees to it.

A digest whose notification the ingest refuses for good (its type left the catalog, say) is
closed without one and logged, so it does not come back every tick; one refused for now
(Redis or the recipient busy) stays due and is tried again.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import msgspec
import structlog
from redis.asyncio import Redis

from app.catalog import Catalog
from app.ingest.fanout import Planner
from app.ingest.ingestor import Ingestor
from app.ingest.requests import NotificationRequest, Recipient
from app.settings import Settings
from streams.core.clock import now_ms as wall_clock_ms
from streams.core.errors import Conflict, Unavailable
from streams.core.keys import KeySpace, ShardKeys
from streams.digests import store
from streams.digests.ids import digest_key
from streams.metrics.recorder import MetricsRecorder

log = structlog.get_logger(__name__)

TICK_S = 0.1  # how often each shard's due digests are looked at, at most
BATCH = 100  # digests closed per shard and look


class _Id(msgspec.Struct):
    id: str


class DigestCloser:
    """Closes due digests into their notifications."""

    def __init__(
        self,
        redis: Redis,
        keys: KeySpace,
        ingestor: Ingestor,
        now_ms: Callable[[], int] = wall_clock_ms,
    ) -> None:
        self.redis = redis
        self.keys = keys
        self.ingestor = ingestor
        self.now_ms = now_ms
        self._stop = asyncio.Event()

    def stop(self) -> None:
        self._stop.set()

    async def run(self) -> None:
        """Close due digests until stopped."""
        while not self._stop.is_set():
            for shard in self.keys.all_shards():
                try:
                    await self.close_due(shard)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("digests.close_failed", shard=shard.shard)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(TICK_S):
                    await self._stop.wait()

    async def close_due(self, shard: ShardKeys) -> int:
        """Close ``shard``'s digests due now; how many were closed."""
        closed = 0
        for digest in await store.due(self.redis, shard, self.now_ms(), BATCH):
            closed += await self.close(shard, digest)
        return closed

    async def close(self, shard: ShardKeys, digest: str) -> bool:
        """Seal ``digest``, make its notification and close it; whether it closed."""
        sealed = await store.seal(self.redis, shard, digest)
        if sealed is None:
            return False
        if not sealed.items:  # every notification left it (cancelled): nothing to send
            await store.close(self.redis, shard, sealed, "", self.now_ms())
            return True
        answer = await self.ingestor.ingest(sealed.producer, digest_key(digest), _request(sealed))
        if answer.error is not None:
            if isinstance(answer.error, Conflict | Unavailable):
                return False  # tried again next time
            log.error(
                "digests.refused", digest_id=digest, notification_type=sealed.notification_type,
                error=str(answer.error),
            )  # fmt: skip
            await store.close(self.redis, shard, sealed, "", self.now_ms())
            return True
        notification_id = msgspec.json.decode(answer.response, type=_Id).id
        await store.close(self.redis, shard, sealed, notification_id, self.now_ms())
        return True


def digest_closer(
    settings: Settings, redis: Redis, keys: KeySpace, catalog: Catalog
) -> DigestCloser | None:
    """A worker process's closer, ingesting as the API does (None: no type has a digest)."""
    if not catalog.digests:
        return None
    planner = Planner(catalog, settings.address_digest())
    ingestor = Ingestor(
        redis, keys, planner, settings.idempotency_ttl_seconds, metrics=MetricsRecorder(redis, keys)
    )
    return DigestCloser(redis, keys, ingestor)


def _request(sealed: store.Sealed) -> NotificationRequest:
    """The digest's notification: its recipient as the last item gave it, its items."""
    items = [msgspec.json.decode(item) for item in sealed.items]
    return NotificationRequest(
        recipient=msgspec.json.decode(sealed.recipient, type=Recipient),
        type=sealed.notification_type,
        locale=sealed.locale or None,
        data={"items": items, "count": len(items), "key": sealed.key},
    )
