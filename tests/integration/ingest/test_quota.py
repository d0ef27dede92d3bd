"""The ingest quota script against real Redis and fakeredis: a request is taken whole from
both buckets or not at all, the burst holds, the rate refills."""

from __future__ import annotations

import asyncio

from redis.asyncio import Redis

from streams.core.keys import KeySpace
from streams.ingest.quota import QuotaRates, take_quota

RATES = QuotaRates(
    requests_per_second=10, requests_burst=3, notifications_per_second=100, notifications_burst=50
)


async def test_the_burst_of_requests_is_granted_then_refused(redis: Redis, key_prefix: str) -> None:
    keys = KeySpace(key_prefix)
    waits = [await take_quota(redis, keys, "orders", RATES, 1) for _ in range(4)]
    assert waits[:3] == [0, 0, 0]
    assert 0 < waits[3] <= 0.1  # one request interval at 10/s
    assert await take_quota(redis, keys, "billing", RATES, 1) == 0  # quotas are per producer


async def test_a_request_of_many_notifications_takes_them_all_or_nothing(
    redis: Redis, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix)
    assert await take_quota(redis, keys, "orders", RATES, 40) == 0
    refused = await take_quota(redis, keys, "orders", RATES, 20)
    assert 0.09 < refused <= 0.11  # 10 notifications too many at 100/s
    # The refused request took nothing: neither notifications nor a request.
    assert await take_quota(redis, keys, "orders", RATES, 10) == 0
    assert await take_quota(redis, keys, "orders", RATES, 0) == 0  # the third request
    assert await take_quota(redis, keys, "orders", RATES, 0) > 0  # 3 requests were the burst


async def test_the_quota_refills_at_its_rate(real_redis: Redis, key_prefix: str) -> None:
    keys = KeySpace(key_prefix)
    rates = QuotaRates(notifications_per_second=10, notifications_burst=5)
    assert await take_quota(real_redis, keys, "orders", rates, 5) == 0
    assert await take_quota(real_redis, keys, "orders", rates, 1) > 0
    await asyncio.sleep(0.25)  # 2.5 notifications' worth
    assert await take_quota(real_redis, keys, "orders", rates, 2) == 0
    # Three more would need another 0.25 s: even a slow machine is not that slow here.
    assert await take_quota(real_redis, keys, "orders", rates, 3) > 0


async def test_an_unlimited_bucket_is_left_alone(redis: Redis, key_prefix: str) -> None:
    keys = KeySpace(key_prefix)
    rates = QuotaRates(requests_per_second=1, requests_burst=1000)  # notifications unlimited
    assert await take_quota(redis, keys, "orders", rates, 1_000_000) == 0
    assert await redis.exists(keys.quota_bucket("orders", "notifications")) == 0
