"""Closing digests in Redis: a due digest is taken by one closer at a time, sealed and read
in join order, and a close records its notification with its event once."""

from __future__ import annotations

import asyncio

from redis.asyncio import Redis

from streams.core.events import DigestClosed
from streams.core.keys import KeySpace
from streams.digests import closing, store
from tests.conftest import stream_events
from tests.integration.digests.test_store import ask


async def test_a_due_digest_is_sealed_read_in_order_and_closed(
    real_redis: Redis, key_prefix: str
) -> None:
    shard = KeySpace(key_prefix).shard(0)
    for n in range(3):
        await store.join(real_redis, shard, ask(f"n-{n}"), 1_000 + n)
    assert await closing.due(real_redis, shard, 4_999) == []
    [digest] = await closing.due(real_redis, shard, 5_000)
    sealed = await closing.seal(real_redis, shard, digest)
    assert sealed is not None
    assert sealed.items == [b'{"text":"n-0"}', b'{"text":"n-1"}', b'{"text":"n-2"}']
    assert (sealed.key, sealed.producer, sealed.recipient) == ("A-17", "shop", b'{"id":"u-1"}')
    later = await store.join(real_redis, shard, ask("n-late"), 5_001)  # opens a new digest
    assert later.digest_id != digest
    assert await closing.close(real_redis, shard, sealed, "made-1", 5_100)
    assert not await closing.close(real_redis, shard, sealed, "made-1", 5_200)  # closed once
    assert await closing.due(real_redis, shard, 5_100) == [later.digest_id]
    assert await real_redis.hget(shard.digest(digest), "notification_id") == b"made-1"
    assert 0 < await real_redis.pttl(shard.digest_items(digest)) <= store.KEEP_MS
    closed = [
        e for e in await stream_events(real_redis, shard.events) if isinstance(e, DigestClosed)
    ]
    assert [(e.digest_id, e.count, e.notification_id) for e in closed] == [(digest, 3, "made-1")]
    assert await closing.seal(real_redis, shard, "gone") is None


async def test_a_due_digest_is_taken_by_one_closer_until_its_claim_runs_out(
    real_redis: Redis, key_prefix: str
) -> None:
    shard = KeySpace(key_prefix).shard(0)
    digest = (await store.join(real_redis, shard, ask("n-1"), 1_000)).digest_id
    taken = await asyncio.gather(*(closing.take(real_redis, shard, 5_000) for _ in range(3)))
    member = await closing.member_of(real_redis, shard, digest)
    assert member.startswith(f"{digest} ")  # the due set names a digest with its open key
    assert sorted(taken) == [[], [], [member]]
    assert await closing.take(real_redis, shard, 5_000 + closing.CLAIM_MS) == [member]
    await closing.release(real_redis, shard, [member], 6_000)
    assert await closing.due(real_redis, shard, 6_000) == [digest]
