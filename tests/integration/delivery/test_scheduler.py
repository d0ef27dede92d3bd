"""The worker's scheduler with real Redis: a retry is sent soon after it is due."""

from __future__ import annotations

from redis.asyncio import Redis

from streams.core.keys import KeySpace
from tests.conftest import stream_events
from tests.integration.delivery_support import (
    accept,
    fast_catalog,
    final_state,
    otp,
    running_worker,
    sandbox_calls,
)


async def test_a_retry_is_picked_up_soon_after_it_is_due(
    real_redis: Redis, key_prefix: str
) -> None:
    keys, catalog = KeySpace(key_prefix), fast_catalog(base=0.6, max_delay=0.6, attempts=3)
    body = otp(directives={"fail_transient": 1})
    delivery_id = (await accept(real_redis, keys, catalog, body, "k"))["deliveries"][0]["id"]
    async with running_worker(real_redis, keys, catalog):
        await final_state(real_redis, keys, delivery_id)
    first, second = await sandbox_calls(real_redis, keys)
    events = await stream_events(real_redis, keys.shard(0).events)
    [failure] = [e for e in events if type(e).__name__ == "DeliveryAttemptFailed"]
    due_ms = failure.retry_at.timestamp() * 1000  # type: ignore[attr-defined]
    assert second["at_ms"] >= due_ms - 5
    assert second["at_ms"] - due_ms <= 100, f"picked up {second['at_ms'] - due_ms} ms late"
    assert first["outcome"] == "transient"
