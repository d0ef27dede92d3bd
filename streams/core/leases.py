"""Leases: one holder at a time for a role that must not run twice at once.

The status-webhooks process takes ``KeySpace.status_webhook_lease`` before it reads or sends
anything, so two such processes (a standby, or an old and a new one during a restart) never
POST one producer's statuses side by side, out of order. The holder renews the lease well
before it runs out; a holder that dies leaves it to run out, and a standby takes it then.
Every step is one call of ``lease.lua``, on the Redis clock.
"""

from __future__ import annotations

from redis.asyncio import Redis

from streams.core import scripts
from streams.core.scripts import Call


def lease_call(lease: str, action: str, holder: str, ttl_ms: int) -> Call:
    """The keys and arguments of one ``lease.lua`` call.

    KEYS: the lease. ARGV: "take" or "release", the holder, the time to live (ms).
    """
    return [lease], [action, holder, ttl_ms]


class Lease:
    """One named lease, as one holder sees it."""

    def __init__(self, redis: Redis, key: str, holder: str, ttl_ms: int) -> None:
        self.redis = redis
        self.key = key
        self.holder = holder
        self.ttl_ms = ttl_ms

    async def take(self) -> bool:
        """Take the lease, or renew it when this holder has it; whether it has it now."""
        return bool(
            await scripts.LEASE(self.redis, *lease_call(self.key, "take", self.holder, self.ttl_ms))
        )

    async def release(self) -> bool:
        """Give the lease back if this holder has it, so a standby need not wait it out."""
        call = lease_call(self.key, "release", self.holder, self.ttl_ms)
        return bool(await scripts.LEASE(self.redis, *call))
