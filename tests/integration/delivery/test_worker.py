"""Delivery workers against real Redis: reading the lanes, pending entries after a restart,
duplicates, expiry before a send, rate limits, a Redis that is away at start, bulkhead
places a failed read gives back, and deliveries of a cancelled campaign."""

from __future__ import annotations

import asyncio
import time

from redis.asyncio import Redis
from redis.exceptions import RedisError

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
    state,
    wait_until,
)
from tests.servers import free_port


async def test_a_plain_delivery_is_sent_once(real_redis: Redis, key_prefix: str) -> None:
    keys, catalog = KeySpace(key_prefix), fast_catalog()
    answer = await accept(real_redis, keys, catalog, otp(), "k1")
    delivery_id = answer["deliveries"][0]["id"]
    async with running_worker(real_redis, keys, catalog):
        done = await final_state(real_redis, keys, delivery_id)
    assert done["status"] == "SENT"
    assert done["attempts"] == "1"
    calls = await sandbox_calls(real_redis, keys)
    assert [(c["delivery_id"], c["idempotency_key"], c["outcome"]) for c in calls] == [
        (delivery_id, delivery_id, "sent")
    ]
    assert done["provider_message_id"] == calls[0]["message_id"]
    events = await stream_events(real_redis, keys.shard(0).events)
    sent = [e for e in events if type(e).__name__ == "DeliverySent"]
    assert len(sent) == 1
    assert sent[0].version == 2  # type: ignore[union-attr]
    # Nothing is left pending in the group.
    pending = await real_redis.xpending(keys.shard(0).work(Priority.HIGH), DELIVERY_GROUP)
    assert pending["pending"] == 0


async def test_an_expired_item_is_never_sent(real_redis: Redis, key_prefix: str) -> None:
    keys, catalog = KeySpace(key_prefix), fast_catalog()
    delivery_id = (await accept(real_redis, keys, catalog, otp(ttl_seconds=1), "k"))["deliveries"][
        0
    ]["id"]
    await asyncio.sleep(1.1)  # the OTP goes stale before any worker runs
    async with running_worker(real_redis, keys, catalog):
        done = await final_state(real_redis, keys, delivery_id)
    assert done["status"] == "EXPIRED"
    assert await sandbox_calls(real_redis, keys) == []


async def test_a_restarted_consumer_drains_its_own_pending_entries(
    real_redis: Redis, key_prefix: str
) -> None:
    keys, catalog = KeySpace(key_prefix), fast_catalog()
    stream = keys.shard(0).work(Priority.HIGH)
    await ensure_group(real_redis, stream, DELIVERY_GROUP)
    ids = [
        (await accept(real_redis, keys, catalog, otp(str(n)), f"k{n}"))["deliveries"][0]["id"]
        for n in range(5)
    ]
    # "test-0" read them and died before doing anything.
    await real_redis.xreadgroup(DELIVERY_GROUP, "test-0", {stream: ">"}, count=10)
    started = time.monotonic()
    async with running_worker(real_redis, keys, catalog, consumer="test-0"):
        for delivery_id in ids:
            assert (await final_state(real_redis, keys, delivery_id))["status"] == "SENT"
    # Drained at start, not after the lease ran out and the reclaimer found them.
    assert time.monotonic() - started < 1.0


async def test_a_restarted_consumer_sends_each_of_its_pending_entries_once(
    real_redis: Redis, key_prefix: str
) -> None:
    keys, catalog = KeySpace(key_prefix), fast_catalog(idempotent=False)
    stream = keys.shard(0).work(Priority.HIGH)
    await ensure_group(real_redis, stream, DELIVERY_GROUP)
    ids = [
        (await accept(real_redis, keys, catalog, otp(str(n), {"latency_ms": 300}), f"k{n}"))[
            "deliveries"
        ][0]["id"]
        for n in range(5)
    ]
    await real_redis.xreadgroup(DELIVERY_GROUP, "test-0", {stream: ">"}, count=10)
    async with running_worker(real_redis, keys, catalog, consumer="test-0"):
        for delivery_id in ids:
            assert (await final_state(real_redis, keys, delivery_id))["status"] == "SENT"
    # The entries stay pending while their sends are in flight: reading the pending list
    # again from its start would send them again.
    calls = await sandbox_calls(real_redis, keys)
    assert sorted(c["delivery_id"] for c in calls) == sorted(ids)


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


async def test_rate_limited_deliveries_wait_without_counting_an_attempt(
    real_redis: Redis, key_prefix: str
) -> None:
    limit = "rate_limit = { per_second = 5, burst = 1 }"
    keys, catalog = KeySpace(key_prefix), fast_catalog(rate_limit=limit)
    ids = [
        (await accept(real_redis, keys, catalog, otp(str(n)), f"k{n}"))["deliveries"][0]["id"]
        for n in range(4)
    ]
    async with running_worker(real_redis, keys, catalog):
        states = [await final_state(real_redis, keys, d) for d in ids]
    assert {s["status"] for s in states} == {"SENT"}
    assert {s["attempts"] for s in states} == {"1"}
    calls = await sandbox_calls(real_redis, keys)
    assert len(calls) == 4
    span = (calls[-1]["at_ms"] - calls[0]["at_ms"]) / 1000
    assert span >= 0.5  # 4 sends at 5/s with a burst of 1 take at least 0.6 s
    names = [type(e).__name__ for e in await stream_events(real_redis, keys.shard(0).events)]
    assert "DeliveryDeferred" in names


async def test_a_worker_started_while_redis_is_away_waits_for_it(key_prefix: str) -> None:
    # Nothing listens on this port: the worker must keep trying, not exit, and still stop.
    unreachable = Redis.from_url(f"redis://127.0.0.1:{free_port()}/0")
    keys, catalog = KeySpace(key_prefix), fast_catalog()
    try:
        async with running_worker(unreachable, keys, catalog):
            await asyncio.sleep(0.5)
        # Leaving the block stops the worker and awaits run(): a worker that had given up
        # would raise its connection error here.
    finally:
        await unreachable.aclose()


async def test_a_worker_makes_its_groups_again_when_redis_lost_them(
    real_redis: Redis, key_prefix: str
) -> None:
    """After Redis restarted empty, workers logged NOGROUP for ever and a new OTP accepted
    with 202 was never delivered."""
    keys, catalog = KeySpace(key_prefix), fast_catalog()
    first = (await accept(real_redis, keys, catalog, otp(), "k1"))["deliveries"][0]["id"]
    async with running_worker(real_redis, keys, catalog):
        assert (await final_state(real_redis, keys, first))["status"] == "SENT"
        for key in [k async for k in real_redis.scan_iter(match=f"{key_prefix}:*")]:
            await real_redis.delete(key)  # an empty Redis, as after a restart without AOF
        second = (await accept(real_redis, keys, catalog, otp(), "k2"))["deliveries"][0]["id"]
        assert (await final_state(real_redis, keys, second))["status"] == "SENT"


async def test_bulkhead_places_come_back_when_the_quota_call_fails(
    real_redis: Redis, key_prefix: str
) -> None:
    # The sandbox with a rate limit (a quota call per read) and a bulkhead of two places.
    keys = KeySpace(key_prefix)
    catalog = fast_catalog(rate_limit="rate_limit = { per_second = 1000, burst = 100 }\n"
                           "max_in_flight = 2")  # fmt: skip
    for n in range(3):
        await accept(real_redis, keys, catalog, otp(str(n)), f"q{n}")
    async with running_worker(real_redis, keys, catalog) as worker:
        refused = 0

        async def no_quota(requests: object) -> list[float]:
            nonlocal refused
            refused += 1
            raise RedisError("OOM command not allowed")

        real_quota = worker.rate_limiter.acquire_many
        worker.rate_limiter.acquire_many = no_quota  # type: ignore[method-assign]

        async def tried() -> bool:
            return refused >= 2

        await wait_until(tried)
        worker.rate_limiter.acquire_many = real_quota  # type: ignore[method-assign]

        async def all_sent() -> bool:
            calls = await sandbox_calls(real_redis, keys)
            return len({c["delivery_id"] for c in calls if c["outcome"] == "sent"}) == 3

        # Had the refused reads kept their places, the bulkhead would be full for good.
        await wait_until(all_sent, within=15)


async def test_a_cancelled_campaigns_delivery_ends_cancelled_without_a_provider_call(
    real_redis: Redis, key_prefix: str
) -> None:
    keys, catalog = KeySpace(key_prefix), fast_catalog()
    shard = keys.shard(0)
    await real_redis.set(shard.campaign_cancelled("c-1"), "1")
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
    calls = await sandbox_calls(real_redis, keys)
    assert sorted(c["delivery_id"] for c in calls) == sorted([running_id, own_id])
    events = await stream_events(real_redis, shard.events)
    [event] = [e for e in events if isinstance(e, DeliveryCancelled)]
    assert event == DeliveryCancelled(
        at=event.at, notification_id=cancelled["id"], delivery_id=cancelled_id, version=2,
        channel="SMS", campaign_id="c-1",
    )  # fmt: skip
    # Every work entry was acknowledged and deleted with its outcome.
    assert await real_redis.xlen(shard.work(Priority.HIGH)) == 0
    pending = await real_redis.xpending(shard.work(Priority.HIGH), DELIVERY_GROUP)
    assert pending["pending"] == 0


async def test_a_campaigns_delivery_waiting_in_delayed_is_cancelled_when_it_comes_due(
    real_redis: Redis, key_prefix: str
) -> None:
    keys, catalog = KeySpace(key_prefix), fast_catalog()
    shard = keys.shard(0)
    body = otp(directives={"rate_limited": 1})  # a retry after at least a second
    answer = await accept(real_redis, keys, catalog, body, notification_key("c-1", "u-1"))
    delivery_id = answer["deliveries"][0]["id"]

    async def waiting() -> bool:
        return (await state(real_redis, keys, delivery_id)).get("status") == "SCHEDULED"

    async with running_worker(real_redis, keys, catalog):
        await wait_until(waiting)
        await real_redis.set(shard.campaign_cancelled("c-1"), "1")
        done = await final_state(real_redis, keys, delivery_id)

    assert (done["status"], done["attempts"]) == ("CANCELLED", "1")
    assert [c["outcome"] for c in await sandbox_calls(real_redis, keys)] == ["rate_limited"]
    assert await real_redis.zcard(shard.delayed) == 0
    assert await real_redis.xlen(shard.work(Priority.HIGH)) == 0
