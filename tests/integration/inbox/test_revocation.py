"""Revoking a recipient's tokens, against real Redis: the epoch grows with each revocation
and stays ahead of every token made before it, even after its key expired; every read of
the inbox refuses a token of an older epoch in the round trip it makes anyway; and the
revocation ends the recipient's open realtime streams in every API process."""

from __future__ import annotations

import asyncio

import pytest
from redis.asyncio import Redis

from app.inbox.tokens import MAX_TTL_SECONDS
from streams.core.keys import KeySpace
from streams.inbox.live import InboxHub
from streams.inbox.revocation import KEEP_MS, InboxRevocations, TokensRevoked
from streams.inbox.store import InboxStore
from tests.integration.inbox.test_provider import catalog, send


def test_a_revocation_is_remembered_longer_than_any_token_lives() -> None:
    assert KEEP_MS >= (MAX_TTL_SECONDS + 3600) * 1000


async def test_each_revocation_raises_the_epoch_past_every_token_made_before(
    real_redis: Redis, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix, 4)
    revocations = InboxRevocations(real_redis, keys)
    assert await revocations.epoch("u-1") == 0  # never revoked: no key at all
    first = await revocations.revoke("u-1")
    assert await revocations.epoch("u-1") == first
    second = await revocations.revoke("u-1")
    assert second > first  # in the same millisecond too
    await revocations.check("u-1", second)
    with pytest.raises(TokensRevoked):
        await revocations.check("u-1", first)
    with pytest.raises(TokensRevoked):
        await revocations.check("u-1", 0)
    await revocations.check("u-2", 0)  # another recipient's tokens are untouched
    key = revocations.key("u-1")
    assert key.startswith(keys.home_of_recipient("u-1").inbox("u-1").messages)
    assert 0 < await real_redis.pttl(key) <= KEEP_MS
    # The key expired (every token of an older epoch has too): the next epoch is the Redis
    # clock, past the epoch a token made meanwhile still carries.
    # (Here a few milliseconds stand for the 13 hours a key lives.)
    await real_redis.delete(key)
    await asyncio.sleep(0.005)
    assert await revocations.revoke("u-1") > second


async def test_every_inbox_read_refuses_a_revoked_token(real_redis: Redis, key_prefix: str) -> None:
    keys = KeySpace(key_prefix)
    [delivery_id] = await send(real_redis, keys, catalog(), ["R-1"])
    store = InboxStore(real_redis, keys)
    revocations = InboxRevocations(real_redis, keys)
    old = await revocations.epoch("u-1")
    assert (await store.page_json("u-1", old)).counts.unread == 1
    new = await revocations.revoke("u-1")
    for read in (
        store.page_json("u-1", old),
        store.counts("u-1", old),
        store.mark("u-1", delivery_id, "read", 1, old),
        store.mark("u-1", "not-a-message-id", "read", 1, old),
        store.read_all("u-1", 1, old),
    ):
        with pytest.raises(TokensRevoked):
            await read
    assert (await store.counts("u-1")).unread == 1  # nothing was marked
    # A token made after the revocation reads as before.
    assert (await store.page_json("u-1", new)).counts.unread == 1
    assert await store.read_all("u-1", 1, new) == 1


async def test_a_revocation_ends_the_recipients_open_streams(
    real_redis: Redis, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix)
    hub = InboxHub(real_redis, keys)
    async with hub.running():
        await asyncio.wait_for(hub.subscribed.wait(), 5)
        with hub.listening("u-1") as mine, hub.listening("u-2") as theirs:
            await InboxRevocations(real_redis, keys).revoke("u-1")
            await asyncio.wait_for(mine.wake.wait(), 5)
            assert mine.ended
            assert not theirs.ended
            assert theirs.queue.empty()
