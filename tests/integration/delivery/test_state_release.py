"""Ended deliveries' state leaves Redis once projected (``streams.delivery.state_release``), against
real Redis, PostgreSQL, a worker, the projector and the feedback processor: a SENT state goes,
a FAILED one (whose dead letter a replay re-checks) stays; the status API then answers from
the read model, and answers 503 rather than "as accepted" while the read model is away; a
receipt for a released delivery still moves it, and the same receipt again (in another
callback) is recognised in the read model and applied once; a worker that wakes after the
release (stopped meanwhile) neither sends nor records anything."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import httpx
import pytest
from redis.asyncio import Redis

from app.api.app import create_app
from app.settings import Settings
from streams.core import codec
from streams.core.consumer_groups import DELIVERY_GROUP, ensure_group
from streams.core.events import ProviderFeedbackReceived
from streams.core.keys import KeySpace
from streams.core.vocabulary import ErrorClass, Priority
from streams.delivery import outcomes as delivery_outcomes
from streams.delivery.leases import LeasedDelivery
from streams.delivery.store import DeliveryStore
from streams.dlq.entries import Worker
from streams.feedback.store import Feedback, Inbox, VerifiedCallback
from tests.conftest import http_client, stream_events
from tests.integration.api_support import accept, status_of
from tests.integration.delivery_support import running_worker, state, wait_until
from tests.integration.feedback.test_processor import (
    SECRET,
    Running,
    feedback_catalog,
    status_is,
)

pytestmark = pytest.mark.timeout(60)

ORDER = {
    "recipient": {"id": "u-r", "email": "anna@example.com"},
    "type": "order_confirmed", "channels": ["EMAIL"], "data": {"order_id": "A-1"},
}  # fmt: skip
REFUSED = {**ORDER, "data": {"order_id": "A-2", "sandbox": {"EMAIL": {"fail_permanent": 1}}}}


@pytest.fixture
def keys(key_prefix: str) -> KeySpace:
    return KeySpace(key_prefix)


@pytest.fixture
async def api(
    real_redis: Redis, settings: Settings, pool: asyncpg.Pool
) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(settings, redis=real_redis, catalog=feedback_catalog(), db=pool,
                     environ={"SANDBOX_FEEDBACK": SECRET})  # fmt: skip
    async with http_client(app) as client:
        yield client


def releasing(redis: Redis, pool: asyncpg.Pool, keys: KeySpace) -> Running:
    """The projector, letting projected states go at once, and the feedback processor."""
    return Running(redis, pool, keys, projected_state_retention_ms=0)


async def projected(pool: asyncpg.Pool, delivery_id: str) -> asyncpg.Record | None:
    row: asyncpg.Record | None = await pool.fetchrow(
        "SELECT status, version, provider_message_id FROM delivery WHERE id = $1", delivery_id
    )
    return row


async def released(redis: Redis, keys: KeySpace, delivery_id: str) -> bool:
    return not await redis.exists(keys.notification_shard(delivery_id).delivery(delivery_id))


async def settled(pool: asyncpg.Pool, delivery_id: str, status: str) -> None:
    """Wait until the read model has the delivery in ``status``."""
    await wait_until(lambda: status_is(pool, delivery_id, status), within=20)


def receipt(message_id: str, feedback_id: str) -> Feedback:
    """A provider's delivery receipt, as a verified callback holds it."""
    now_ms = time.time_ns() // 1_000_000
    return Feedback(provider="sandbox", feedback_id=feedback_id, message_id=message_id,
                    kind="delivered", at_ms=now_ms, received_ms=now_ms)  # fmt: skip


async def test_a_projected_end_leaves_redis_and_the_read_model_answers_for_it(
    api: httpx.AsyncClient, real_redis: Redis, keys: KeySpace, pool: asyncpg.Pool
) -> None:
    sent = await accept(api, ORDER, "r-1")
    refused = await accept(api, REFUSED, "r-2")
    sent_id, refused_id = sent["deliveries"][0]["id"], refused["deliveries"][0]["id"]
    async with (
        running_worker(real_redis, keys, feedback_catalog()),
        releasing(real_redis, pool, keys),
    ):
        await settled(pool, sent_id, "SENT")
        await settled(pool, refused_id, "FAILED")
        await wait_until(lambda: released(real_redis, keys, sent_id))

    # The FAILED state stays: its dead letter's replay re-checks it.
    assert (await state(real_redis, keys, refused_id))["status"] == "FAILED"
    # The status API answers from the read model, with what the state said.
    row = await projected(pool, sent_id)
    assert row is not None
    body = (await status_of(api, sent["id"])).json()
    [delivery] = body["deliveries"]
    assert (delivery["status"], delivery["provider_message_id"]) == (
        "SENT", row["provider_message_id"],
    )  # fmt: skip


async def test_without_the_read_model_a_released_notification_is_503_not_queued(
    api: httpx.AsyncClient,
    real_redis: Redis,
    keys: KeySpace,
    pool: asyncpg.Pool,
    settings: Settings,
) -> None:
    sent = await accept(api, ORDER, "r-1")
    async with (
        running_worker(real_redis, keys, feedback_catalog()),
        releasing(real_redis, pool, keys),
    ):
        await settled(pool, sent["deliveries"][0]["id"], "SENT")
        await wait_until(lambda: released(real_redis, keys, sent["deliveries"][0]["id"]))
    fresh = await accept(api, {**ORDER, "data": {"order_id": "A-3"}}, "r-3")

    async def status_without_read_model(retention_s: int, notification_id: str) -> Any:
        no_read_model = dataclasses.replace(settings, projected_state_retention_seconds=retention_s)
        app = create_app(no_read_model, redis=real_redis, catalog=feedback_catalog(),
                         environ={"SANDBOX_FEEDBACK": SECRET})  # fmt: skip
        async with http_client(app) as client:
            return await status_of(client, notification_id)

    # States may leave Redis at once: a delivery without one may have ended, unknown here.
    gone = await status_without_read_model(0, sent["id"])
    assert (gone.status_code, gone.headers["retry-after"]) == (503, "5")
    assert "read model" in gone.json()["detail"]
    # A notification younger than the retention cannot have lost a state: as accepted.
    young = await status_without_read_model(300, fresh["id"])
    assert young.status_code == 200
    assert [d["status"] for d in young.json()["deliveries"]] == ["QUEUED"]


async def test_a_receipt_for_a_released_delivery_is_applied_once(
    api: httpx.AsyncClient, real_redis: Redis, keys: KeySpace, pool: asyncpg.Pool
) -> None:
    sent = await accept(api, ORDER, "r-1")
    delivery_id = sent["deliveries"][0]["id"]
    inbox = Inbox(real_redis, keys)
    async with (
        running_worker(real_redis, keys, feedback_catalog()),
        releasing(real_redis, pool, keys),
    ):
        await settled(pool, delivery_id, "SENT")
        await wait_until(lambda: released(real_redis, keys, delivery_id))
        row = await projected(pool, delivery_id)
        assert row is not None
        message_id = row["provider_message_id"]
        item = receipt(message_id, "evt-1")
        assert await inbox.take(VerifiedCallback("sandbox", "callback-1", 60_000, [item]))
        await settled(pool, delivery_id, "DELIVERED")
        await wait_until(lambda: released(real_redis, keys, delivery_id))
        # The provider sends the same event again, in another callback (a retried batch):
        # its mark left with the state, the read model still knows it.
        assert await inbox.take(VerifiedCallback("sandbox", "callback-2", 60_000, [item]))

        async def inbox_empty() -> bool:
            return int(await real_redis.xlen(keys.feedback_inbox)) == 0

        await wait_until(inbox_empty)

    events = [e for e in await stream_events(real_redis, keys.shard(0).events)
              if isinstance(e, ProviderFeedbackReceived)]  # fmt: skip
    assert [(e.feedback_id, e.status) for e in events] == [("evt-1", "DELIVERED")]
    after = await projected(pool, delivery_id)
    assert after is not None
    assert (after["status"], after["version"]) == ("DELIVERED", row["version"] + 1)
    assert await released(real_redis, keys, delivery_id)


async def test_a_stopped_worker_waking_after_the_release_changes_nothing(
    api: httpx.AsyncClient, real_redis: Redis, keys: KeySpace, pool: asyncpg.Pool
) -> None:
    """Workers stopped (SIGSTOP, say) around an entry wake after another worker ended its
    delivery with that entry and the projector released the state: the one stopped between
    reading and leasing finds the entry gone (TERMINAL: nothing sent), the one stopped
    between leasing and recording finds no state (ENDED: nothing recorded). Neither brings
    the state back nor appends an event."""
    sent = await accept(api, ORDER, "r-1")
    [delivery_id] = [d["id"] for d in sent["deliveries"]]
    shard, priority = keys.notification_shard(delivery_id), Priority.NORMAL
    stream, store = shard.work(priority), DeliveryStore(real_redis)
    await ensure_group(real_redis, stream, DELIVERY_GROUP)
    [[_, [(raw_id, fields)]]] = await real_redis.xreadgroup(DELIVERY_GROUP, "r", {stream: ">"})
    entry = [(raw_id.decode(), codec.decode_work_item(fields[b"w"]))]

    async def lease(consumer: str) -> LeasedDelivery:
        [taken] = await store.begin(shard, priority, entry, consumer, lease_ms=1, max_leases=5)
        return LeasedDelivery.taken(shard, entry[0][1], entry[0][0], taken, Worker(consumer, "t"))

    stopped = await lease("stopped")  # leased, then stopped before its outcome
    await asyncio.sleep(0.01)  # its lease runs out; another worker takes the entry over
    other = await lease("other")
    assert await store.finish([delivery_outcomes.sent(other, "sandbox", "m-1", 1)]) == ["OK"]
    async with releasing(real_redis, pool, keys):
        await settled(pool, delivery_id, "SENT")
        await wait_until(lambda: released(real_redis, keys, delivery_id))
    events = await real_redis.xlen(shard.events)

    [woken] = await store.begin(shard, priority, entry, "r", lease_ms=60_000, max_leases=5)
    failed = delivery_outcomes.failed(stopped, ErrorClass.PERMANENT, "late", 2, attempts=1)

    assert woken.verdict == "TERMINAL"
    assert await store.finish([failed]) == ["ENDED"]
    assert await released(real_redis, keys, delivery_id)
    assert await real_redis.xlen(shard.events) == events
    row = await projected(pool, delivery_id)
    assert row is not None
    assert (row["status"], row["provider_message_id"]) == ("SENT", "m-1")
