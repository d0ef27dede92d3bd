"""Delivery workers against real Redis: a plain send, expiry before a send, rate limits,
bulkhead places a failed read gives back, and a campaign's delivery cancelled while it waits
in ``delayed``."""

from __future__ import annotations

import asyncio

from redis.asyncio import Redis
from redis.exceptions import RedisError

from streams.campaigns.ids import notification_key
from streams.core.consumer_groups import DELIVERY_GROUP
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
