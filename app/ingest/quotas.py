"""Per-producer ingest quotas from the catalog's ``[quotas]``: requests and notifications
per second, with a burst. Over a quota a request is refused whole (429 with ``Retry-After``)
before anything of it is written; a request larger than a quota's burst could never fit
and is refused as too large (413). A producer without a quota costs nothing: no Redis call.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from redis.asyncio import Redis

from app.catalog import IngestQuota, Quotas
from streams.ingest_quota import QuotaRates, take_quota
from streams.keys import KeySpace


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a request was not admitted: its status code, what to tell the producer, and the
    whole seconds to wait (429 only)."""

    status_code: int
    detail: str
    retry_after_s: int = 0


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
            return Refusal(
                413,
                f"notifications: {notifications} in one request, but producer {producer!r} "
                f"may send at most {rates.notifications_burst} at once; send smaller batches",
            )
        wait = await take_quota(self.redis, self.keys, producer, rates, notifications)
        if wait <= 0:
            return None
        return Refusal(
            429,
            f"producer {producer!r} is over its ingest quota; retry in {wait:.1f} s",
            max(1, math.ceil(wait)),
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
