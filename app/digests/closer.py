"""Closing due digests, in every worker process.

Each worker process looks at every shard's due digests every ``TICK_S``, and at once again
after a full batch: it takes up to ``BATCH`` of them (claimed, so the other processes leave
them alone; they come due again if this one dies before closing them), seals them (no
notification joins them any more), reads their items, and ingests their notifications like
any others, in one batch per producer, each under the idempotency key ``digest:<id>``, from
the producer of its first item, with the items' data as ``items``, their number as
``count`` and the digest's ``key``; then it closes them in one round trip. A close repeated
after a crash, or two processes closing the same digest, make one notification (the
idempotency key sees to it) and one ``DigestClosed`` (the close script does).

A digest whose notification the ingest refuses for good (its type left the catalog, say), or
that cannot be made of its items at all, is closed without one and logged, so it does not
come back every tick (nor hold up the rest of its batch); one refused for now (Redis or the
recipient busy) is released, due again at once, and tried at the next tick.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import msgspec
import structlog
from redis.asyncio import Redis

from app.catalog import Catalog
from app.ingest.answers import IngestAnswer
from app.ingest.fanout import Planner
from app.ingest.ingestor import Ingestor
from app.ingest.requests import NotificationRequest, Recipient
from app.settings import Settings
from streams.core.clock import now_ms as wall_clock_ms
from streams.core.errors import Conflict, Unavailable
from streams.core.keys import KeySpace, ShardKeys
from streams.digests import closing
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
            more = False  # a shard had a full batch due: look again at once
            for shard in self.keys.all_shards():
                try:
                    more = await self.close_due(shard) >= BATCH or more
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("digests.close_failed", shard=shard.shard)
            if more:
                continue
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(TICK_S):
                    await self._stop.wait()

    async def close_due(self, shard: ShardKeys) -> int:
        """Close ``shard``'s digests due now, a batch at a time; how many this closed."""
        taken = await closing.take(self.redis, shard, self.now_ms(), BATCH)
        return await self.close_many(shard, taken) if taken else 0

    async def close(self, shard: ShardKeys, digest: str) -> bool:
        """Seal ``digest``, make its notification and close it; whether this closed it."""
        member = await closing.member_of(self.redis, shard, digest)
        return bool(member) and await self.close_many(shard, [member]) == 1

    async def close_many(self, shard: ShardKeys, members: list[str]) -> int:
        """Seal the digests of ``members`` (of the due set), make their notifications and
        close them; how many this closed (not those closed before, by another process or an
        earlier try)."""
        sealed = [s for s in await closing.seal_many(self.redis, shard, members) if s]
        made = {s.digest_id: "" for s in sealed if not s.items}  # every item left: nothing
        by_producer: dict[str, list[tuple[closing.Sealed, NotificationRequest]]] = {}
        for digest in sealed:
            if digest.items:
                request = _request(digest)
                if request is None:
                    made[digest.digest_id] = ""  # logged: closed without one, not retried
                else:
                    by_producer.setdefault(digest.producer, []).append((digest, request))
        retry: list[str] = []  # members
        for producer, pairs in by_producer.items():
            entries = [(digest_key(digest.digest_id), request) for digest, request in pairs]
            answers = await self.ingestor.ingest_many(producer, entries)
            for (digest, _), answer in zip(pairs, answers, strict=True):
                made_id = _made(digest, answer)
                if made_id is None:
                    retry.append(digest.member)
                else:
                    made[digest.digest_id] = made_id
        if retry:
            await closing.release(self.redis, shard, retry, self.now_ms())
        closes = [(digest, made[digest.digest_id]) for digest in sealed if digest.digest_id in made]
        return sum(await closing.close_many(self.redis, shard, closes, self.now_ms()))


def _made(digest: closing.Sealed, answer: IngestAnswer) -> str | None:
    """The id of the notification ``digest`` was made into; "" when the ingest refused it
    for good (logged), None when for now (tried again)."""
    if answer.error is None:
        return msgspec.json.decode(answer.response, type=_Id).id
    if isinstance(answer.error, Conflict | Unavailable):
        return None
    log.error(
        "digests.refused", digest_id=digest.digest_id,
        notification_type=digest.notification_type, error=str(answer.error),
    )  # fmt: skip
    return ""


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


def _request(sealed: closing.Sealed) -> NotificationRequest | None:
    """The digest's notification: its recipient as the last item gave it, its items; None
    (logged) when it cannot be made of them, so the digest closes instead of coming back."""
    try:
        items = [msgspec.json.decode(item) for item in sealed.items]
        return NotificationRequest(
            recipient=msgspec.json.decode(sealed.recipient, type=Recipient),
            type=sealed.notification_type,
            locale=sealed.locale or None,
            data={"items": items, "count": len(items), "key": sealed.key},
        )
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError) as error:
        log.error(
            "digests.unmakeable", digest_id=sealed.digest_id,
            notification_type=sealed.notification_type, items=len(sealed.items),
            error=str(error),
        )  # fmt: skip
        return None
