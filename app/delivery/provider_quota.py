"""Provider quota for a batch of routed deliveries: one ``rate_limit.lua`` call for all.

Each rate-limited provider has GCRA buckets in Redis (``streams.delivery.rate_limiter``): a
total and one per NORMAL and LOW share, so the top of the burst is left to HIGH. A delivery whose
provider has no limit goes at once.
"""

from __future__ import annotations

from collections.abc import Sequence

from app.catalog import Catalog
from streams.core.vocabulary import Priority
from streams.delivery.rate_limiter import Rate, RateLimiter


class ProviderQuota:
    """Asks the buckets of the catalog's rate-limited providers."""

    def __init__(self, limiter: RateLimiter, catalog: Catalog) -> None:
        self.limiter = limiter
        self._rates = {
            name: Rate(limit.per_second, limit.burst, limit.normal_share, limit.low_share)
            for name, config in catalog.providers.items()
            if (limit := config.rate_limit) is not None
        }

    async def waits(self, requests: Sequence[tuple[str, Priority]]) -> list[float]:
        """Per (provider, priority) request: the seconds until its provider's quota grants it
        (0: go now; a request that gets 0 has taken its share)."""
        waits = [0.0] * len(requests)
        asked: list[tuple[str, Rate, Priority]] = []
        limited: list[int] = []
        for index, (provider, priority) in enumerate(requests):
            rate = self._rates.get(provider)
            if rate is not None:
                asked.append((provider, rate, priority))
                limited.append(index)
        if asked:
            granted = await self.limiter.acquire_many(asked)
            for index, wait in zip(limited, granted, strict=True):
                waits[index] = wait
        return waits
