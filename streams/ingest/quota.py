"""Producers' ingest quotas, shared by every API process through Redis.

A producer's quota has two GCRA buckets (``quota.lua``): HTTP requests, and the
notifications they carry (a batch is one request and each of its items). A request is taken
whole or not at all, so a refused one leaves no trace. The clock is Redis's ``TIME``.
"""

from __future__ import annotations

from dataclasses import dataclass

from redis.asyncio import Redis

from streams.core import scripts
from streams.core.keys import KeySpace
from streams.core.scripts import Call, KeyOrArg


@dataclass(frozen=True, slots=True)
class QuotaRates:
    """Per second and burst of each bucket; a rate of 0 leaves that bucket unlimited."""

    requests_per_second: float = 0.0
    requests_burst: int = 1
    notifications_per_second: float = 0.0
    notifications_burst: int = 1


async def take_quota(
    redis: Redis, keys: KeySpace, producer: str, rates: QuotaRates, count: int
) -> float:
    """Take one request of ``count`` notifications from ``producer``'s quota: 0.0 when
    taken, else the seconds until it would fit (nothing was taken)."""
    wait_ms = await scripts.INGEST_QUOTA(redis, *ingest_quota_call(keys, producer, rates, count))
    return int(wait_ms) / 1000


def ingest_quota_call(keys: KeySpace, producer: str, rates: QuotaRates, count: int) -> Call:
    """The keys and arguments of one ``quota.lua`` call.

    KEYS: the producer's requests and notifications buckets (one hash tag). ARGV: requests
    per second and burst, notifications per second and burst, the request's notification
    count.
    """
    script_keys: list[KeyOrArg] = [
        keys.quota_bucket(producer, "requests"),
        keys.quota_bucket(producer, "notifications"),
    ]
    args: list[KeyOrArg] = [
        repr(float(rates.requests_per_second)),
        rates.requests_burst,
        repr(float(rates.notifications_per_second)),
        rates.notifications_burst,
        count,
    ]
    return script_keys, args
