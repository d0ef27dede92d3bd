"""Throttles in a running worker against real Redis: a recipient capped at 3 gets 3 and the
rest are SUPPRESSED ``throttled`` (with ``DeliveryThrottled``), a deferred one is sent once
the window allows it, the default cap spares HIGH, and a type without a throttle is never
counted."""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any

from redis.asyncio import Redis

from app.catalog import Catalog, parse_catalog
from app.delivery.throttling import Throttling
from streams.core.keys import KeySpace
from tests.conftest import stream_events
from tests.integration.delivery_support import (
    FAST,
    accept,
    catalog_text,
    fast_catalog,
    otp,
    running_worker,
    sandbox_calls,
    state,
    wait_until,
)

ENDED = {"SENT", "FAILED", "EXPIRED", "SUPPRESSED", "CANCELLED"}


def throttled_otp(throttle: str) -> Catalog:
    """The test catalog with ``throttle`` on the OTP type (HIGH: its own throttle applies)."""
    text = catalog_text()
    marker = 'priority = "HIGH"\nttl_seconds = 300'
    assert marker in text
    return parse_catalog(text.replace(marker, f"{marker}\nthrottle = {throttle}", 1), "t.toml")


async def accept_many(
    redis: Redis, keys: KeySpace, catalog: Catalog, bodies: list[dict[str, Any]]
) -> list[str]:
    ids = []
    for n, body in enumerate(bodies):
        answer = await accept(redis, keys, catalog, body, f"k{n}")
        ids += [delivery["id"] for delivery in answer["deliveries"]]
    return ids


async def all_ended(redis: Redis, keys: KeySpace, ids: list[str]) -> dict[str, dict[str, str]]:
    async def ended() -> bool:
        return all([(await state(redis, keys, i)).get("status") in ENDED for i in ids])

    await wait_until(ended, 15)
    return {i: await state(redis, keys, i) for i in ids}


async def test_a_recipient_capped_at_three_gets_three(real_redis: Redis, key_prefix: str) -> None:
    keys = KeySpace(key_prefix)
    catalog = throttled_otp('{ limit = 3, per = "1h" }')
    ids = await accept_many(real_redis, keys, catalog, [otp(str(n)) for n in range(10)])
    async with running_worker(real_redis, keys, catalog):
        states = await all_ended(real_redis, keys, ids)
    assert Counter(s["status"] for s in states.values()) == {"SENT": 3, "SUPPRESSED": 7}
    assert len(await sandbox_calls(real_redis, keys)) == 3
    suppressed = [s for s in states.values() if s["status"] == "SUPPRESSED"]
    assert all(s["reason"] == "throttled" and s["version"] == "3" for s in suppressed)
    events = await stream_events(real_redis, keys.shard(0).events)
    throttled = [e for e in events if type(e).__name__ == "DeliveryThrottled"]
    assert len(throttled) == 7
    first: Any = throttled[0]
    assert (first.action, first.limit, first.per_seconds, first.scope) == (
        "suppress", 3, 3600, "t:otp"
    )  # fmt: skip
    assert (first.notification_type, first.channel, first.version, first.until) == (
        "otp", "SMS", 3, None
    )  # fmt: skip
    changes = [e for e in events if getattr(e, "delivery_id", None) == first.delivery_id]
    assert [(type(e).__name__, getattr(e, "version", None)) for e in changes][-2:] == [
        ("DeliverySuppressed", 2), ("DeliveryThrottled", 3)
    ]  # fmt: skip
    assert getattr(changes[-2], "reason", None) == "throttled"
    log = keys.throttle("u-1", "t:otp")
    assert await real_redis.zcard(log) == 3
    assert 0 < await real_redis.pttl(log) <= 3_600_000


async def test_a_deferred_delivery_is_sent_once_the_window_allows(
    real_redis: Redis, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix)
    catalog = throttled_otp('{ limit = 1, per = "2s", action = "defer" }')
    ids = await accept_many(real_redis, keys, catalog, [otp("1"), otp("2")])
    async with running_worker(real_redis, keys, catalog):
        states = await all_ended(real_redis, keys, ids)
    assert [s["status"] for s in states.values()] == ["SENT", "SENT"]
    calls = await sandbox_calls(real_redis, keys)
    assert len(calls) == 2
    # The window counts from the first one's throttle decision, which its send follows by as
    # much as the machine is loaded: not sent at once (a few ms), and about 2 s later.
    assert calls[1]["at_ms"] - calls[0]["at_ms"] >= 1000
    events = await stream_events(real_redis, keys.shard(0).events)
    deferred = [e for e in events if getattr(e, "reason", None) == "throttled"]
    assert [type(e).__name__ for e in deferred] == ["DeliveryDeferred"]
    throttled: Any = next(e for e in events if type(e).__name__ == "DeliveryThrottled")
    assert throttled.action == "defer"
    assert throttled.until == getattr(deferred[0], "until", None)


async def test_the_default_cap_spares_high_and_counts_per_channel(
    real_redis: Redis, key_prefix: str
) -> None:
    keys, catalog = KeySpace(key_prefix), fast_catalog()
    options = dataclasses.replace(FAST, recipient_cap=(1, 3600))
    order = {
        "recipient": {"id": "u-1", "email": "u1@example.com"},
        "type": "order_confirmed",
        "channels": ["EMAIL", "IN_APP"],
    }
    bodies = [otp("1"), otp("2"), *({**order, "data": {"order_id": f"A-{n}"}} for n in range(2))]
    ids = await accept_many(real_redis, keys, catalog, bodies)
    async with running_worker(real_redis, keys, catalog, options=options):
        states = await all_ended(real_redis, keys, ids)
    statuses = [states[i]["status"] for i in ids]
    # Both OTPs (HIGH); one order's EMAIL and IN_APP each, the other's suppressed.
    assert statuses[:2] == ["SENT", "SENT"]
    assert Counter(statuses[2:]) == {"SENT": 2, "SUPPRESSED": 2}
    assert await real_redis.zcard(keys.throttle("u-1", "default:EMAIL")) == 1
    assert await real_redis.zcard(keys.throttle("u-1", "default:IN_APP")) == 1


async def test_without_throttles_nothing_is_counted(real_redis: Redis, key_prefix: str) -> None:
    keys, catalog = KeySpace(key_prefix), fast_catalog()
    assert Throttling.of(real_redis, keys, catalog, None) is None
    ids = await accept_many(real_redis, keys, catalog, [otp(str(n)) for n in range(5)])
    async with running_worker(real_redis, keys, catalog):
        states = await all_ended(real_redis, keys, ids)
    assert {s["status"] for s in states.values()} == {"SENT"}
    assert await real_redis.keys(f"{key_prefix}:{{thr:*") == []
