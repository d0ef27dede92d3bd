"""Producers' status webhooks in Redis: set, read, replaced, removed with what waited; the
version that tells the process to reread them; the figures operators see."""

from __future__ import annotations

import asyncio

from redis.asyncio import Redis

from streams.core.keys import KeySpace
from streams.status_webhooks.store import StatusWebhook, StatusWebhookStore, read_outboxes

SECRET = "whsec_c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0"


async def test_set_read_replace_remove(redis: Redis, key_prefix: str) -> None:
    keys = KeySpace(key_prefix)
    store = StatusWebhookStore(redis, keys)
    assert await store.get("orders") is None
    assert await store.version() == 0
    hook = await store.put("orders", "https://a.example.com/s", SECRET)
    assert await store.get("orders") == hook
    assert (hook.url, hook.secret, hook.max_batch) == ("https://a.example.com/s", SECRET, 1)
    await store.put("auth", "https://b.example.com/s", SECRET, max_batch=10)
    assert set(await store.all()) == {"orders", "auth"}
    assert await store.version() == 2

    replaced = await store.put("orders", "https://c.example.com/s", SECRET)
    assert (await store.all())["orders"] == replaced

    await redis.xadd(keys.status_webhooks("orders").outbox, {"d": "x", "v": 1, "b": b"{}"})
    assert await store.remove("orders")
    assert not await store.remove("orders")
    assert set(await store.all()) == {"auth"}
    assert await redis.exists(keys.status_webhooks("orders").outbox) == 0
    assert await store.version() == 5


async def test_a_record_never_shows_its_secret() -> None:
    hook = StatusWebhook(url="https://a.example.com/s?token=t", secret=SECRET, updated_ms=1)
    assert SECRET not in repr(hook)
    assert "token" not in repr(hook)


async def test_outbox_figures_age_by_the_redis_clock(redis: Redis, key_prefix: str) -> None:
    keys = KeySpace(key_prefix)
    store = StatusWebhookStore(redis, keys)
    await store.put("orders", "https://a.example.com/s", SECRET)
    await store.put("auth", "https://b.example.com/s", SECRET)
    seconds, micros = await redis.time()
    now_ms = int(seconds) * 1000 + int(micros) // 1000
    orders = keys.status_webhooks("orders")
    await redis.xadd(orders.outbox, {"d": "x", "v": 1, "b": b"{}"}, id=f"{now_ms - 7_000}-0")
    await redis.xadd(orders.outbox, {"d": "y", "v": 1, "b": b"{}"})
    await redis.xadd(orders.dlq, {"webhook_id": "z.1"})

    figures = {f.producer: f for f in await read_outboxes(redis, keys)}

    assert (figures["orders"].waiting, figures["orders"].dead_letters) == (2, 1)
    assert 7_000 <= figures["orders"].oldest_age_ms < 12_000
    assert (figures["auth"].waiting, figures["auth"].oldest_age_ms) == (0, 0)
    assert await store.counts("orders") == (2, 1)


async def test_changes_are_seen_by_their_version(redis: Redis, key_prefix: str) -> None:
    store = StatusWebhookStore(redis, KeySpace(key_prefix))
    before = await store.version()
    await asyncio.gather(*(store.put(f"p{n}", "https://a.example.com", SECRET) for n in range(3)))
    assert await store.version() == before + 3
