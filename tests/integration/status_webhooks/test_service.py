"""The status-webhooks role in this event loop: one active instance (a standby takes over),
webhooks followed as they change, one producer's dead endpoint never holding back another's,
every final status of real deliveries (ingest and a delivery worker) told to its producer,
and the deliveries of notifications that joined a digest told DIGESTED."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

import pytest
from redis.asyncio import Redis

from app.catalog import parse_catalog
from app.catalog.status_webhooks import StatusWebhooksConfig
from app.status_webhooks.service import StatusWebhookService
from streams.core import codec
from streams.core.ids import new_id
from streams.core.keys import KeySpace
from streams.status_webhooks.store import StatusWebhookStore
from tests.integration.delivery_support import (
    accept,
    catalog_text,
    fast_catalog,
    running_worker,
    wait_until,
)
from tests.integration.projection_support import accepted, delivered
from tests.peers.webhook import Answer, Receiver, Served, serve

SECRET = "whsec_" + base64.b64encode(b"clarion-status-hook-key-32-bytes").decode()
AT = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
# A type whose notifications join a digest per thread, closing long after the test.
COMMENT = """
[types.comment]
channels = ["EMAIL"]
priority = "NORMAL"
ttl_seconds = 3600
opt_out = true
digest = { window = "10m", key = "{{ data.thread }}" }

[types.comment.templates.en]
EMAIL = { title = "{{ count }} new", body = "{{ count }} new on {{ key }}" }
"""


def config() -> StatusWebhooksConfig:
    return parse_catalog(
        '[status_webhooks]\nallow_http_hosts = ["127.0.0.1"]\nallow_networks = ["127.0.0.0/8"]\n'
        "timeout_seconds = 0.5\nconnect_timeout_seconds = 0.5\nlanes = 4\nwindow = 100\n"
        "retry = { base_seconds = 0.05, max_seconds = 0.2 }\n"
    ).status_webhooks


@pytest.fixture
def served() -> Iterator[Served]:
    with serve(Receiver(SECRET)) as running:
        yield running


@asynccontextmanager
async def running_service(
    redis: Redis, keys: KeySpace, consumer: str = "hooks-test"
) -> AsyncIterator[StatusWebhookService]:
    service = StatusWebhookService(
        redis, keys, config(), consumer=consumer, dlq_retention_ms=60_000
    )
    task = asyncio.create_task(service.run())
    try:
        yield service
    finally:
        service.stop()
        await asyncio.wait_for(task, 10)


async def write_sent(redis: Redis, keys: KeySpace, producer: str, count: int) -> list[str]:
    """``count`` notifications of ``producer`` accepted and sent; the webhook ids due."""
    events: list[Any] = []
    due = []
    for _ in range(count):
        nid, did = new_id(0), new_id(0)
        events += [accepted(nid, [did], at=AT, producer=producer),
                   *delivered(nid, did, "SENT", at=AT)]  # fmt: skip
        due.append(f"{did}.2")
    await redis.xadd(keys.shard(0).events, {codec.EVENT_FIELD: codec.encode_events(events)})
    return due


async def test_one_instance_is_active_and_a_standby_takes_over(
    real_redis: Redis, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix)
    async with running_service(real_redis, keys, "first") as first:
        await asyncio.wait_for(first.active.wait(), 5)
        async with running_service(real_redis, keys, "second") as second:
            await asyncio.sleep(0.5)
            assert not second.active.is_set()
            first.stop()  # hands the lease back
            await asyncio.wait_for(second.active.wait(), 5)


async def test_webhooks_are_followed_as_they_change(
    real_redis: Redis, key_prefix: str, served: Served
) -> None:
    keys = KeySpace(key_prefix)
    store = StatusWebhookStore(real_redis, keys)
    async with running_service(real_redis, keys) as service:
        await asyncio.wait_for(service.active.wait(), 5)
        await store.put("shop", served.url("/shop"), SECRET)
        await asyncio.sleep(1.5)  # picked up within about a second
        first = await write_sent(real_redis, keys, "shop", 3)
        await wait_until(lambda: asyncio.sleep(0, len(served.receiver.deliveries) == 3))
        await store.remove("shop")
        await asyncio.sleep(1.5)
        await write_sent(real_redis, keys, "shop", 2)
        await asyncio.sleep(1.0)
    assert set(served.receiver.deliveries) == set(first)  # nothing after the removal
    assert await real_redis.exists(keys.status_webhooks("shop").outbox) == 0


async def test_a_dead_endpoint_never_holds_back_another_producer(
    real_redis: Redis, key_prefix: str, served: Served
) -> None:
    keys = KeySpace(key_prefix)
    store = StatusWebhookStore(real_redis, keys)
    served.receiver.script("/dead", *[Answer(503, hang_seconds=2.0)] * 1000)
    await store.put("dead", served.url("/dead"), SECRET)
    await store.put("alive", served.url("/alive"), SECRET)
    async with running_service(real_redis, keys) as service:
        await asyncio.wait_for(service.active.wait(), 5)
        started = time.monotonic()
        dead = await write_sent(real_redis, keys, "dead", 50)
        alive = await write_sent(real_redis, keys, "alive", 50)
        await wait_until(
            lambda: asyncio.sleep(0, set(alive) <= set(served.receiver.deliveries)), within=5
        )
        took = time.monotonic() - started
    assert took < 3  # while every lane of "dead" waited out its time limit
    assert not set(dead) & set(served.receiver.deliveries)
    assert len(await real_redis.xrange(keys.status_webhooks("dead").outbox)) == 50


async def test_every_final_status_of_real_deliveries_is_told(
    real_redis: Redis, key_prefix: str, served: Served
) -> None:
    keys = KeySpace(key_prefix)
    catalog = fast_catalog()
    await StatusWebhookStore(real_redis, keys).put("orders", served.url("/orders"), SECRET)
    order = {
        "recipient": {"id": "u-1", "email": "a@example.com"},
        "type": "order_confirmed",
        "data": {"order_id": "A-1", "sandbox": {"EMAIL": {"fail_permanent": "no such box"}}},
    }
    answers = [await accept(real_redis, keys, catalog, order, f"k-{n}") for n in range(3)]
    async with running_worker(real_redis, keys, catalog), running_service(real_redis, keys):
        # EMAIL fails for good, IN_APP is sent, PUSH has no address: three final statuses each.
        await wait_until(lambda: asyncio.sleep(0, len(served.receiver.deliveries) == 9), 20)
    told = {}
    for attempt in served.receiver.deliveries.values():
        data = json.loads(attempt.body)["data"]
        told[data["delivery_id"]] = (data["channel"], data["status"], data["notification_type"])
    expected = {
        d["id"]: (d["channel"], {"EMAIL": "FAILED", "IN_APP": "SENT", "PUSH": "SUPPRESSED"}[
            d["channel"]], "order_confirmed")
        for answer in answers for d in answer["deliveries"]
    }  # fmt: skip
    assert told == expected
    assert served.receiver.duplicates == served.receiver.unverified == 0


async def test_notifications_that_join_a_digest_are_told_digested(
    real_redis: Redis, key_prefix: str, served: Served
) -> None:
    keys = KeySpace(key_prefix)
    catalog = parse_catalog(catalog_text() + COMMENT, "digests.toml")
    await StatusWebhookStore(real_redis, keys).put("orders", served.url("/orders"), SECRET)
    comment = {"recipient": {"id": "u-1", "email": "a@example.com"}, "type": "comment"}
    answers = [
        await accept(real_redis, keys, catalog, {**comment, "data": {"thread": "A", "n": n}},
                     f"k-{n}")
        for n in range(2)
    ]  # fmt: skip
    assert answers[0]["digest"]["id"] == answers[1]["digest"]["id"]
    async with running_service(real_redis, keys):
        await wait_until(lambda: asyncio.sleep(0, len(served.receiver.deliveries) == 2), 10)
    told = {}
    for webhook_id, attempt in served.receiver.deliveries.items():
        payload = json.loads(attempt.body)
        data = payload["data"]
        assert webhook_id == f"{data['delivery_id']}.1"
        told[data["delivery_id"]] = (payload["type"], data["status"], data["reason"])
    assert told == {
        d["id"]: ("delivery.digested", "DIGESTED", "digest")
        for answer in answers for d in answer["deliveries"]
    }  # fmt: skip
    assert served.receiver.duplicates == served.receiver.unverified == 0
