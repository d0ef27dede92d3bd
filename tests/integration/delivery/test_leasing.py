"""Leasing a batch read against real Redis: two entries of one delivery in one read send
once, a stale entry of an ended delivery whose state was released is not sent again, and a
cancelled campaign's delivery ends CANCELLED without a provider call."""

from __future__ import annotations

from redis.asyncio import Redis

from streams.campaigns.ids import notification_key
from streams.core.consumer_groups import DELIVERY_GROUP, ensure_group
from streams.core.events import DeliveryCancelled
from streams.core.keys import KeySpace
from streams.core.vocabulary import Priority
from tests.conftest import stream_events
from tests.integration.delivery_support import (
    accept,
    fast_catalog,
    final_state,
    otp,
    running_worker,
    sandbox_calls,
    wait_until,
)


async def test_two_work_entries_of_one_delivery_in_one_read_send_once(
    real_redis: Redis, key_prefix: str
) -> None:
    keys, catalog = KeySpace(key_prefix), fast_catalog(idempotent=False)
    stream = keys.shard(0).work(Priority.HIGH)
    await ensure_group(real_redis, stream, DELIVERY_GROUP)
    answer = await accept(real_redis, keys, catalog, otp("1", {"latency_ms": 300}), "k1")
    delivery_id = answer["deliveries"][0]["id"]
    # A second entry for the same delivery, as a stale entry left pending by a worker that
    # was stopped and then taken over leaves one beside the current one.
    [(_, fields)] = await real_redis.xrange(stream)
    await real_redis.xadd(stream, fields)
    async with running_worker(real_redis, keys, catalog, consumer="test-0"):
        assert (await final_state(real_redis, keys, delivery_id))["status"] == "SENT"

        async def acknowledged() -> bool:
            return (await real_redis.xpending(stream, DELIVERY_GROUP))["pending"] == 0

        await wait_until(acknowledged)
    calls = await sandbox_calls(real_redis, keys)
    assert [c["delivery_id"] for c in calls] == [delivery_id]


async def test_a_cancelled_campaigns_delivery_ends_cancelled_without_a_provider_call(
    real_redis: Redis, key_prefix: str
) -> None:
    keys, catalog = KeySpace(key_prefix), fast_catalog()
    shard = keys.shard(0)
    await real_redis.set(shard.campaign_cancelled("c-1"), "orders")  # who cancelled it
    cancelled = await accept(real_redis, keys, catalog, otp("1"), notification_key("c-1", "u-1"))
    running = await accept(real_redis, keys, catalog, otp("2"), notification_key("c-2", "u-1"))
    own = await accept(real_redis, keys, catalog, otp("3"), "c-1")  # a producer's own key
    [cancelled_id, running_id, own_id] = (
        a["deliveries"][0]["id"] for a in (cancelled, running, own)
    )
    async with running_worker(real_redis, keys, catalog):
        for sent in (running_id, own_id):  # another campaign's, and one of no campaign
            assert (await final_state(real_redis, keys, sent))["status"] == "SENT"
        done = await final_state(real_redis, keys, cancelled_id)

    assert (done["status"], done["version"], done["attempts"]) == ("CANCELLED", "2", "0")
    assert done["reason"] == "campaign c-1 cancelled by orders"
    calls = await sandbox_calls(real_redis, keys)
    assert sorted(c["delivery_id"] for c in calls) == sorted([running_id, own_id])
    events = await stream_events(real_redis, shard.events)
    [event] = [e for e in events if isinstance(e, DeliveryCancelled)]
    assert event == DeliveryCancelled(
        at=event.at, notification_id=cancelled["id"], delivery_id=cancelled_id, version=2,
        channel="SMS", campaign_id="c-1", cancelled_by="orders",
    )  # fmt: skip
    # Every work entry was acknowledged and deleted with its outcome.
    assert await real_redis.xlen(shard.work(Priority.HIGH)) == 0
    pending = await real_redis.xpending(shard.work(Priority.HIGH), DELIVERY_GROUP)
    assert pending["pending"] == 0


async def test_a_stale_entry_of_an_ended_delivery_whose_state_was_released_is_not_sent(
    real_redis: Redis, key_prefix: str
) -> None:
    keys, catalog = KeySpace(key_prefix), fast_catalog()
    shard = keys.shard(0)
    stream = shard.work(Priority.HIGH)
    await ensure_group(real_redis, stream, DELIVERY_GROUP)
    # Two channels and enough data for the notification's data hash: its items share it.
    body = {
        "recipient": {"id": "u-1", "email": "someone@example.com", "push_tokens": ["t" * 64]},
        "type": "security_alert",
        "data": {"message": "New sign-in. " + "x" * 400},
    }
    answer = await accept(real_redis, keys, catalog, body, "k1")
    delivery_ids = [d["id"] for d in answer["deliveries"]]
    assert len(delivery_ids) == 2
    assert await real_redis.exists(shard.data(answer["id"]))
    entries = await real_redis.xrange(stream)
    async with running_worker(real_redis, keys, catalog, consumer="test-0"):
        for delivery_id in delivery_ids:
            assert (await final_state(real_redis, keys, delivery_id))["status"] == "SENT"
    # The projector released the ended states (retention 0), and a stale second entry of
    # one delivery (left pending beside the current one by a stopped worker) comes back.
    await real_redis.delete(*(shard.delivery(d) for d in delivery_ids))
    assert not await real_redis.exists(shard.data(answer["id"]))
    await real_redis.xadd(stream, entries[0][1])
    async with running_worker(real_redis, keys, catalog, consumer="test-1"):

        async def deleted() -> bool:
            return await real_redis.xlen(stream) == 0

        await wait_until(deleted)
    assert (await real_redis.xpending(stream, DELIVERY_GROUP))["pending"] == 0
    assert len(await sandbox_calls(real_redis, keys)) == 2
    for delivery_id in delivery_ids:
        assert not await real_redis.exists(shard.delivery(delivery_id))
    assert not await real_redis.xrange(shard.dlq)
