"""Dead letters made the way production makes them, for the tests of the dead-letter queue.

A real worker meets a provider outage (every call fails TRANSIENT, one attempt allowed), so
the deliveries end FAILED in the DLQ; tests then list, filter and replay them.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from redis.asyncio import Redis

from app.catalog import Catalog
from app.delivery.worker import DeliveryWorker
from app.ingest.quiet_hours import window_end
from app.providers.base import Message, Provider, ProviderError
from streams.core.keys import KeySpace
from streams.core.vocabulary import ErrorClass
from streams.dlq import replay as dlq_replay
from streams.dlq.entries import parse_entry
from streams.dlq.replay import ReplayOrder, ReplayReport
from streams.dlq.scan import Selection
from tests.conftest import DIGEST
from tests.integration.delivery_support import FAST, accept, fast_catalog, wait_until


class Outage:
    """A provider that is down: every call fails TRANSIENT and reaches nobody."""

    def __init__(self, name: str) -> None:
        self.name = name

    async def send(self, message: Message) -> str:
        raise ProviderError(ErrorClass.TRANSIENT, "provider unreachable (outage)")


@asynccontextmanager
async def worker_during_outage(
    redis: Redis, keys: KeySpace, catalog: Catalog
) -> AsyncIterator[DeliveryWorker]:
    providers: dict[str, Provider] = {name: Outage(name) for name in catalog.providers}
    worker = DeliveryWorker(
        redis, keys, catalog, providers, consumer="outage-0", address_digest=DIGEST, options=FAST
    )
    task = asyncio.create_task(worker.run())
    try:
        yield worker
    finally:
        worker.stop()
        await task


def otp(n: int, ttl_seconds: int = 300, **data: Any) -> dict[str, Any]:
    return {
        "recipient": {"id": f"u-{n}", "phone": "+4915112345678"},
        "type": "otp",
        "ttl_seconds": ttl_seconds,
        "data": {"code": str(n), **data},
    }


async def dead_lettered(
    redis: Redis, keys: KeySpace, bodies: list[dict[str, Any]]
) -> tuple[list[str], Catalog]:
    """Accept ``bodies`` and let a worker fail each during an outage; the delivery ids in the
    order they were dead-lettered (the order a replay takes them)."""
    catalog = fast_catalog(attempts=1)
    accepted = 0
    for n, body in enumerate(bodies):
        answer = await accept(redis, keys, catalog, body, f"key-{n}")
        accepted += len(answer["deliveries"])
    async with worker_during_outage(redis, keys, catalog):
        await wait_until(lambda: dlq_length_is(redis, keys, accepted))
    entries = await redis.xrange(keys.shard(0).dlq)
    return [fields[b"delivery_id"].decode() for _, fields in entries], catalog


async def dlq_length_is(redis: Redis, keys: KeySpace, length: int) -> bool:
    return int(await redis.xlen(keys.shard(0).dlq)) == length


def order(limit: int = 1000, **options: Any) -> ReplayOrder:
    """A replay as ``app.operations.dlq.replay_order`` makes it from the catalog."""
    selection = options.pop("selection", Selection())
    opt_out = frozenset(name for name, kind in fast_catalog().types.items() if kind.opt_out)
    return ReplayOrder(
        selection=selection, limit=limit, operator="anna", reason="provider outage over",
        opt_out_types=opt_out, **options,
    )  # fmt: skip


async def replay(redis: Redis, keys: KeySpace, replay_order: ReplayOrder) -> ReplayReport:
    return await dlq_replay.replay(redis, keys, replay_order, window_end, address_digest=DIGEST)


def replayed_ids(report: ReplayReport) -> list[str]:
    return [result.letter.delivery_id for result in report.replayed]


def skipped(report: ReplayReport) -> dict[str, str]:
    return {result.letter.delivery_id: result.outcome for result in report.skipped}


async def delivery_of(redis: Redis, keys: KeySpace, recipient_id: str, channel: str = "") -> str:
    """The dead-lettered delivery of a recipient (on ``channel``, when given)."""
    for entry_id, fields in await redis.xrange(keys.shard(0).dlq):
        letter = parse_entry(0, entry_id.decode(), fields)
        work = letter.work
        if work is not None and work.recipient_id == recipient_id and channel in ("", work.channel):
            return letter.delivery_id
    raise AssertionError(f"no dead letter for {recipient_id}")


EMAIL_BODY = {
    "recipient": {"id": "u-9", "email": "anna@example.com"},
    "type": "order_confirmed",
    "channels": ["EMAIL"],
    "data": {"order_id": "A-1"},
}
