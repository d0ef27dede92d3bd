"""Provider quota for a batch of deliveries, against the real rate-limit script."""

from __future__ import annotations

from redis.asyncio import Redis

from app.delivery.provider_quota import ProviderQuota
from streams.core.keys import KeySpace
from streams.core.vocabulary import Priority
from streams.delivery.rate_limiter import RateLimiter
from tests.integration.delivery_support import fast_catalog


async def test_a_batch_waits_only_for_the_quota_of_its_limited_provider(
    real_redis: Redis, key_prefix: str
) -> None:
    catalog = fast_catalog(rate_limit="rate_limit = { per_second = 1, burst = 2 }")
    assert catalog.providers["sandbox"].rate_limit is not None
    assert catalog.providers["inbox"].rate_limit is None
    quota = ProviderQuota(RateLimiter(real_redis, KeySpace(key_prefix)), catalog)
    asked = [("sandbox", Priority.HIGH), ("inbox", Priority.LOW)] * 3
    waits = await quota.waits(asked)
    # The burst of two goes at once, the third sandbox send waits; the inbox never does.
    assert waits[0] == waits[2] == 0
    assert 0 < waits[4] <= 1
    assert waits[1] == waits[3] == waits[5] == 0
