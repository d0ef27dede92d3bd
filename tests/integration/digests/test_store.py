"""Joining digests in Redis: concurrent joins make one digest and count each notification
once, keys and fullness make new digests, and a join is recorded by its event (a batch's
joins in one go)."""

from __future__ import annotations

import asyncio

from redis.asyncio import Redis

from streams.core.events import NotificationDigested
from streams.core.keys import KeySpace
from streams.digests import store
from tests.conftest import notification_id, stream_events


def ask(nid: str, key: str = "A-17", closes_ms: int = 5_000, max_items: int = 100) -> store.JoinAsk:
    return store.JoinAsk(
        notification_id=notification_id(nid), recipient_id="u-1", notification_type="comment",
        key=key, producer="shop", locale="en", recipient=b'{"id":"u-1"}',
        item=f'{{"text":"{nid}"}}'.encode(), closes_ms=closes_ms, max_items=max_items,
    )  # fmt: skip


async def test_concurrent_joins_make_one_digest_counting_each_once(
    real_redis: Redis, key_prefix: str
) -> None:
    shard = KeySpace(key_prefix).shard(0)
    joined = await asyncio.gather(
        *(store.join(real_redis, shard, ask(f"n-{n}"), 1_000) for n in range(30))
    )
    assert len({j.digest_id for j in joined}) == 1
    assert sorted(j.count for j in joined) == list(range(1, 31))
    again = await store.join(real_redis, shard, ask("n-7"), 1_500)  # a repeated request
    assert again.digest_id == joined[0].digest_id
    assert again.count == 30  # the items list is the count: none stored twice
    assert await real_redis.llen(shard.digest_items(again.digest_id)) == 30
    events = await stream_events(real_redis, shard.events)
    assert all(isinstance(e, NotificationDigested) for e in events)
    assert len({e.notification_id for e in events}) == 30  # type: ignore[union-attr]


async def test_keys_and_fullness_make_new_digests(real_redis: Redis, key_prefix: str) -> None:
    shard = KeySpace(key_prefix).shard(0)
    a = await store.join(real_redis, shard, ask("n-1", key="A"), 1_000)
    b = await store.join(real_redis, shard, ask("n-2", key="B"), 1_000)
    assert a.digest_id != b.digest_id
    full = [await store.join(real_redis, shard, ask(f"f-{n}", "F", max_items=2), 1_000 + n)
            for n in range(3)]  # fmt: skip
    assert full[0].digest_id == full[1].digest_id != full[2].digest_id
    assert full[1].closes_ms == 1_001  # due when it filled up


async def test_a_batch_joins_like_one_at_a_time_and_records_each_join(
    real_redis: Redis, key_prefix: str
) -> None:
    shard = KeySpace(key_prefix).shard(0)
    asks = [(shard, ask(f"n-{n}", key="AB"[n % 2], max_items=3)) for n in range(8)]
    joined = await store.join_many(real_redis, asks, 1_000)
    assert all(isinstance(j, store.Joined) for j in joined)
    by_digest: dict[str, list[int]] = {}
    for j in joined:
        assert isinstance(j, store.Joined)
        by_digest.setdefault(j.digest_id, []).append(j.count)
    # Four per key, three at most per digest: each key's fourth opened a second digest.
    assert sorted(by_digest.values()) == [[1], [1], [1, 2, 3], [1, 2, 3]]
    recorded = [
        e.notification_id for e in await stream_events(real_redis, shard.events)
        if isinstance(e, NotificationDigested)
    ]  # fmt: skip
    assert sorted(recorded) == sorted(notification_id(f"n-{n}") for n in range(8))
    again = await store.join_many(real_redis, asks[:2], 2_000)  # the same requests again
    assert [j.digest_id for j in again if isinstance(j, store.Joined)] == [
        j.digest_id for j in joined[:2] if isinstance(j, store.Joined)
    ]
