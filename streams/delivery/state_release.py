"""Ended deliveries' state leaves Redis once the read model has it.

A delivery's ``dlv:<id>`` hash is the write model's view of it: workers decide by it, and the
status API, the feedback processor and the inbox read it until PostgreSQL has caught up.
Once the projector has committed an event that ends a delivery for good (SENT, DELIVERED,
READ, EXPIRED, SUPPRESSED or CANCELLED: ``RELEASED_ONCE_PROJECTED``), the hash has nothing
left to say that the read model does not, and keeping it for the whole state retention
(``CLARION_DELIVERY_STATE_RETENTION``, 24 h) made it the largest part of Redis's memory. So
the projector shortens its lifetime to ``CLARION_PROJECTED_STATE_RETENTION`` (5 minutes by
default) in the same breath as it acknowledges the events.

What still reads a delivery after that falls back to the read model: the status API, the
feedback processor (which also finds a repeated receipt there) and the inbox (whose messages
carry the delivery's version). The 24-hour retention stays as the safety net for a state
the projector never released, for example while PostgreSQL is away. A FAILED delivery's
state is never released this way: it lives as long as its dead letter, which a replay
re-checks.
"""

from __future__ import annotations

from collections.abc import Mapping

from redis.asyncio import Redis

from streams.core import scripts
from streams.core.keys import ShardKeys
from streams.core.scripts import Call, KeyOrArg
from streams.delivery.state import ENDED_UNSENT, PROVIDER_ACCEPTED, DeliveryStatus

RELEASED_ONCE_PROJECTED: frozenset[DeliveryStatus] = PROVIDER_ACCEPTED | ENDED_UNSENT


def release_states_call(shard: ShardKeys, projected: Mapping[str, int], keep_ms: int) -> Call:
    """The keys and arguments of one ``release_states.lua`` call, for the deliveries
    ``projected`` names with the version the read model has of each.

    KEYS: each delivery's state hash. ARGV: how long (ms) a released state stays, then each
    delivery's projected version.
    """
    keys: list[KeyOrArg] = [shard.delivery(delivery_id) for delivery_id in projected]
    return keys, [keep_ms, *projected.values()]


async def release_states(
    redis: Redis, shard: ShardKeys, projected: Mapping[str, int], keep_ms: int
) -> int:
    """Let the states of ``projected`` deliveries of one shard leave Redis within
    ``keep_ms`` where they ended for good at the projected version; how many did."""
    if not projected:
        return 0
    released: int = await scripts.RELEASE_STATES(
        redis, *release_states_call(shard, projected, keep_ms)
    )
    return released
