"""Per-producer ingest quotas from the catalog's ``[quotas]``: requests and notifications
per second, with a burst. Over a quota a request is refused whole (``RateLimited``, with the
seconds to wait) before anything of it is written; a request larger than a quota's burst
could never fit and is refused as ``TooLarge``. A producer without a quota costs nothing: no
Redis call.
"""

from __future__ import annotations

import dataclasses
import math

from redis.asyncio import Redis

from app.catalog.quotas import IngestQuota, Quotas
from streams.core.errors import RateLimited, TooLarge
from streams.core.keys import KeySpace
from streams.ingest.quota import QuotaRates, take_quota

# Why a request was not admitted: over the quota now (with the whole seconds to wait), or
# larger than it could ever be.
Refusal = RateLimited | TooLarge


class IngestQuotas:
    """Admits producers' requests against their quotas, shared by every API process."""

    def __init__(self, redis: Redis, keys: KeySpace, quotas: Quotas) -> None:
        self.redis = redis
        self.keys = keys
        self.quotas = quotas
        self._rates: dict[str, QuotaRates | None] = {}

    async def admit(self, producer: str, notifications: int) -> Refusal | None:
        """Take one request of ``notifications`` from ``producer``'s quota; None when it
        may go on, else why not."""
        rates = self._rates_of(producer)
        if rates is None:
            return None
        if rates.notifications_per_second and notifications > rates.notifications_burst:
            return TooLarge(
                f"notifications: {notifications} in one request, but producer {producer!r} "
                f"may send at most {rates.notifications_burst} at once; send smaller batches",
            )
        wait = await take_quota(self.redis, self.keys, producer, rates, notifications)
        return None if wait <= 0 else self._over(producer, wait)

    async def admit_request(self, producer: str) -> RateLimited | None:
        """Take one request that carries no notification (a campaign call) from
        ``producer``'s quota; None when it may go on, else why not."""
        rates = self._rates_of(producer)
        if rates is None or not rates.requests_per_second:
            return None
        requests_only = dataclasses.replace(rates, notifications_per_second=0.0)
        wait = await take_quota(self.redis, self.keys, producer, requests_only, 0)
        return None if wait <= 0 else self._over(producer, wait)

    def _over(self, producer: str, wait: float) -> RateLimited:
        return RateLimited(
            f"producer {producer!r} is over its ingest quota; retry in {wait:.1f} s",
            retry_after_s=max(1, math.ceil(wait)),
        )

    def _rates_of(self, producer: str) -> QuotaRates | None:
        if producer not in self._rates:
            self._rates[producer] = _rates(self.quotas.of(producer))
        return self._rates[producer]


def _rates(quota: IngestQuota | None) -> QuotaRates | None:
    if quota is None or (quota.requests is None and quota.notifications is None):
        return None
    requests, notifications = quota.requests, quota.notifications
    return QuotaRates(
        requests_per_second=requests.per_second if requests else 0.0,
        requests_burst=requests.burst if requests else 1,
        notifications_per_second=notifications.per_second if notifications else 0.0,
        notifications_burst=notifications.burst if notifications else 1,
    )


class NotificationQuota:
    """A producer's notifications quota as a campaign's generator takes it: each
    notification it generates counts as one ingested through the API (its requests quota
    is the API's alone), so a campaign goes no faster than its producer's quota allows, and
    what it may not generate yet waits rather than being dropped."""

    def __init__(self, redis: Redis, keys: KeySpace, quotas: Quotas) -> None:
        self.redis = redis
        self.keys = keys
        self.quotas = quotas

    def burst(self, producer: str) -> int | None:
        """The most notifications ``producer`` may take at once; None: not limited."""
        rates = self._rates_of(producer)
        return None if rates is None else rates.notifications_burst

    async def take(self, producer: str, count: int) -> float:
        """Take ``count`` (at most ``burst``) notifications: 0.0 when taken, else the
        seconds until they would fit (nothing was taken)."""
        rates = self._rates_of(producer)
        if rates is None:
            return 0.0
        return await take_quota(self.redis, self.keys, producer, rates, count)

    def _rates_of(self, producer: str) -> QuotaRates | None:
        rates = _rates(self.quotas.of(producer))
        if rates is None or not rates.notifications_per_second:
            return None
        return dataclasses.replace(rates, requests_per_second=0.0)
