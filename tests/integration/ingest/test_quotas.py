"""Producers' ingest quotas from the catalog: who gets which, what a refusal says."""

from __future__ import annotations

from redis.asyncio import Redis

from app.catalog import parse_catalog
from app.ingest.quotas import IngestQuotas
from streams.core.errors import RateLimited, TooLarge
from streams.core.keys import KeySpace
from tests.conftest import REPO

QUOTAS = """
[quotas.default]
requests = { per_second = 100, burst = 2 }

[quotas.producers.marketing]
notifications = { per_second = 1000, burst = 500 }
"""


def quotas(redis: Redis, key_prefix: str) -> IngestQuotas:
    catalog = parse_catalog((REPO / "clarion.toml").read_text() + QUOTAS)
    return IngestQuotas(redis, KeySpace(key_prefix), catalog.quotas)


async def test_the_default_applies_to_producers_without_their_own(
    redis: Redis, key_prefix: str
) -> None:
    admit = quotas(redis, key_prefix).admit
    assert await admit("orders", 1000) is None  # only requests are limited by default
    assert await admit("orders", 1) is None
    refusal = await admit("orders", 1)
    assert refusal is not None
    assert (type(refusal), refusal.retry_after_s) == (RateLimited, 1)
    assert "'orders' is over its ingest quota" in refusal.detail


async def test_a_producers_own_quota_replaces_the_default(redis: Redis, key_prefix: str) -> None:
    admit = quotas(redis, key_prefix).admit
    for _ in range(5):  # no request limit for marketing
        assert await admit("marketing", 100) is None
    assert (await admit("marketing", 100)) is not None  # its burst of 500 is used up


async def test_a_request_larger_than_the_burst_is_refused_as_too_large(
    redis: Redis, key_prefix: str
) -> None:
    refusal = await quotas(redis, key_prefix).admit("marketing", 501)
    assert refusal is not None
    assert isinstance(refusal, TooLarge)
    assert "at most 500 at once" in refusal.detail


async def test_without_quotas_nothing_is_asked_of_redis(redis: Redis, key_prefix: str) -> None:
    catalog = parse_catalog((REPO / "clarion.toml").read_text())
    unlimited = IngestQuotas(redis, KeySpace(key_prefix), catalog.quotas)
    assert await unlimited.admit("orders", 10_000) is None
    assert await redis.keys(f"{key_prefix}:*") == []


async def test_a_campaign_call_takes_a_request_and_no_notification(
    redis: Redis, key_prefix: str
) -> None:
    limits = quotas(redis, key_prefix)
    assert await limits.admit_request("orders") is None
    assert await limits.admit_request("orders") is None
    refusal = await limits.admit_request("orders")  # the burst of 2 requests is used up
    assert refusal is not None
    assert (type(refusal), refusal.retry_after_s) == (RateLimited, 1)
    # Marketing has no request limit: a campaign call costs it nothing, not even a call.
    assert await limits.admit_request("marketing") is None
    assert await limits.admit("marketing", 500) is None  # its notifications are all there
    assert not await redis.exists(KeySpace(key_prefix).quota_bucket("marketing", "requests"))
