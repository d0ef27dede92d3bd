"""Inbox changes live, against real Redis: cursors, the published payload, one shared
subscription handing each change to its recipient's listeners (and telling every listener
to catch up after the subscription was lost), and a follower that resumes from a cursor,
skips what it has seen and knows when its feed no longer holds what it missed."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from streams.core.keys import KeySpace
from streams.inbox.live import (
    FeedOverrun,
    InboxFollower,
    InboxHub,
)
from tests.conftest import on_every_node
from tests.integration.delivery_support import wait_until
from tests.integration.inbox.test_provider import catalog, send


async def test_one_subscription_hands_each_change_to_its_recipients_listeners(
    real_redis: Redis, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix)
    hub = InboxHub(real_redis, keys)
    async with hub.running():
        await asyncio.wait_for(hub.subscribed.wait(), 5)
        with hub.listening("u-1") as mine, hub.listening("u-2") as theirs:
            assert hub.clients == 2
            [delivery_id] = await send(real_redis, keys, catalog(), ["L-1"])
            await asyncio.wait_for(mine.wake.wait(), 5)
            change = mine.queue.get_nowait()
            assert (change.kind, change.message_id, change.unread) == ("new", delivery_id, 1)
            assert theirs.queue.empty()
            # The subscription is lost: every listener is told to catch up from the feeds.
            await on_every_node(real_redis, "CLIENT", "KILL", "TYPE", "pubsub")
            await wait_until(_behind(mine))
            await asyncio.wait_for(hub.subscribed.wait(), 5)
    assert hub.clients == 0


def _behind(listener: object) -> object:
    async def check() -> bool:
        return bool(getattr(listener, "behind", False))

    return check


async def test_a_follower_resumes_after_its_cursor_and_skips_what_it_saw(
    real_redis: Redis, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix, shards=2)
    first = await send(real_redis, keys, catalog(), ["F-1", "F-2"])
    follower = InboxFollower(real_redis, keys, "u-1", dict.fromkeys(range(2), "0-0"))
    assert await follower.start(resume=False)  # from the newest entries on
    assert follower.totals() == (2, 2)
    seen = dict(follower.cursor)
    later = await send(real_redis, keys, catalog(), ["F-3", "F-4", "F-5"])
    resumed = InboxFollower(real_redis, keys, "u-1", dict(seen))
    assert await resumed.start(resume=True)
    changes = await resumed.catch_up()
    assert sorted(c.message_id for c in changes if resumed.fresh(c)) == sorted(later)
    assert not any(resumed.fresh(c) for c in changes)  # each is new once
    assert resumed.totals() == (5, 5)
    assert not set(first) & {c.message_id for c in changes}


async def test_a_catch_up_reads_at_most_its_replay_entries_from_a_feed(
    real_redis: Redis, key_prefix: str
) -> None:
    """A reconnect from the feed's start re-read the whole feed, however long: now one
    re-read takes at most ``replay_entries`` entries (the feed's length), else ``reset``."""
    keys = KeySpace(key_prefix)
    await send(real_redis, keys, catalog(), [f"R-{n}" for n in range(6)])
    start = {0: "0-1"}  # a Last-Event-ID from before the feed's first entry
    within = InboxFollower(real_redis, keys, "u-1", dict(start), replay_entries=6)
    assert len(await within.catch_up()) == 6
    past = InboxFollower(real_redis, keys, "u-1", dict(start), replay_entries=5)
    with pytest.raises(FeedOverrun):
        await past.catch_up()


@pytest.mark.parametrize("seen_before", [True, False])
async def test_a_follower_whose_feed_was_trimmed_past_its_cursor_reads_again(
    real_redis: Redis, key_prefix: str, seen_before: bool
) -> None:
    keys = KeySpace(key_prefix)
    await send(real_redis, keys, catalog(), ["T-1"])
    follower = InboxFollower(real_redis, keys, "u-1", {0: "0-0"})
    await follower.start(resume=False)
    cursor = dict(follower.cursor)
    await send(real_redis, keys, catalog(), ["T-2", "T-3"])
    feed = keys.shard(0).inbox("u-1").feed
    if not seen_before:
        await real_redis.xtrim(
            feed, maxlen=1, approximate=False
        )  # T-2's entry is gone: T-3's is left
    resumed = InboxFollower(real_redis, keys, "u-1", cursor)
    assert await resumed.start(resume=True) is seen_before


async def test_a_follower_that_saw_an_empty_feed_reads_again_only_after_a_trim(
    real_redis: Redis, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix)
    follower = InboxFollower(real_redis, keys, "u-1", {0: "0-0"})
    await follower.start(resume=False)
    assert follower.cursor == {0: "0-0"}
    await send(real_redis, keys, catalog(), ["E-1", "E-2"])
    assert await InboxFollower(real_redis, keys, "u-1", {0: "0-0"}).start(resume=True)
    feed = keys.shard(0).inbox("u-1").feed
    await real_redis.xtrim(feed, maxlen=1, approximate=False)
    assert not await InboxFollower(real_redis, keys, "u-1", {0: "0-0"}).start(resume=True)


async def test_a_follower_away_longer_than_its_feed_lived_reads_again_only_if_it_missed_a_change(
    real_redis: Redis, key_prefix: str
) -> None:
    """A feed lives an hour after its newest change (``feed_minutes``), the inbox 30 days:
    a client back after its feed expired knows from the inbox hash whether it missed one."""
    keys = KeySpace(key_prefix)
    feed = keys.shard(0).inbox("u-1").feed
    await send(real_redis, keys, catalog(), ["X-1"])
    follower = InboxFollower(real_redis, keys, "u-1", {0: "0-0"})
    await follower.start(resume=False)
    saw_all, saw_none = dict(follower.cursor), {0: "0-0"}
    assert 0 < await real_redis.pttl(feed) <= 3_600_000
    await real_redis.delete(feed)  # the hour passed
    # Nothing came after what it saw: it goes on; one that saw nothing missed X-1.
    assert await InboxFollower(real_redis, keys, "u-1", dict(saw_all)).start(resume=True)
    assert not await InboxFollower(real_redis, keys, "u-1", dict(saw_none)).start(resume=True)
    # A later change makes a new feed: what the old one took is still known to be gone.
    await send(real_redis, keys, catalog(), ["X-2"])
    assert not await InboxFollower(real_redis, keys, "u-1", dict(saw_none)).start(resume=True)
    back = InboxFollower(real_redis, keys, "u-1", dict(saw_all))
    assert await back.start(resume=True)
    assert [c.message_id for c in await back.catch_up() if back.fresh(c)] != []
    # The new feed expires too, with X-2 unseen by the client that saw X-1.
    await real_redis.delete(feed)
    assert not await InboxFollower(real_redis, keys, "u-1", dict(saw_all)).start(resume=True)


async def test_the_hub_stops_even_when_the_client_turns_its_cancellation_into_an_error(
    real_redis: Redis, key_prefix: str
) -> None:
    """redis-py may raise a connection error of its own when a read is cancelled: the hub
    must still end, or a stopping API waits for it for ever."""
    hub = InboxHub(real_redis, KeySpace(key_prefix))

    async def subscribed() -> None:
        hub.subscribed.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            raise RedisConnectionError("Connection closed by server.") from None

    hub._subscribed = subscribed  # type: ignore[method-assign]
    running = hub.running()
    await running.__aenter__()
    await asyncio.wait_for(hub.subscribed.wait(), 5)
    await asyncio.wait_for(running.__aexit__(None, None, None), 5)


async def test_the_hub_stops_even_when_the_client_swallows_its_cancellation(
    real_redis: Redis, key_prefix: str
) -> None:
    """A subscription that ends quietly although it was cancelled must not be made again:
    the next wait would not be interrupted, and a stopping API would wait for ever."""
    hub = InboxHub(real_redis, KeySpace(key_prefix))

    async def subscribed() -> None:
        hub.subscribed.set()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.Event().wait()

    hub._subscribed = subscribed  # type: ignore[method-assign]
    running = hub.running()
    await running.__aenter__()
    await asyncio.wait_for(hub.subscribed.wait(), 5)
    await asyncio.wait_for(running.__aexit__(None, None, None), 5)
