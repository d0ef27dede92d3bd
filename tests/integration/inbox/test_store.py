"""Recipients' inboxes through ``InboxStore``, against real Redis, with messages the
``inbox`` provider put there: recipients' messages on several shards page and count as one
inbox; read, unread, seen, archive and read-all are events that move the delivery to READ
and back."""

from __future__ import annotations

from redis.asyncio import Redis

from streams.core.events import InboxMessageRead, InboxMessageUnread
from streams.core.keys import KeySpace
from streams.inbox.store import InboxStore
from tests.integration.delivery_support import state
from tests.integration.inbox.test_provider import catalog, events_of, send


async def test_messages_on_several_shards_page_newest_first_and_count_together(
    real_redis: Redis, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix, shards=4)
    orders = [f"B-{n}" for n in range(9)]
    ids = await send(real_redis, keys, catalog(), orders)
    assert len({keys.notification_shard(i).shard for i in ids}) > 1  # spread over shards
    store = InboxStore(real_redis, keys)
    first = await store.page("u-1", limit=4)
    second = await store.page("u-1", limit=4, before=first.messages[-1].message.id)
    third = await store.page("u-1", limit=4, before=second.messages[-1].message.id)
    paged = [s.message.id for page in (first, second, third) for s in page.messages]
    assert paged == sorted(ids, reverse=True)
    assert (first.more, second.more, third.more) == (True, True, False)
    assert (await store.counts("u-1")).unread == 9


async def test_read_unread_seen_archive_and_read_all(real_redis: Redis, key_prefix: str) -> None:
    keys = KeySpace(key_prefix, shards=2)
    ids = await send(real_redis, keys, catalog(), ["C-1", "C-2", "C-3"])
    store = InboxStore(real_redis, keys)
    read = await store.mark("u-1", ids[0], "read", 1_000)
    assert read is not None
    assert read.state.read_ms == 1_000
    assert (await state(real_redis, keys, ids[0]))["status"] == "READ"
    assert await store.mark("u-1", ids[0], "read", 2_000) == read  # no change, no event
    await store.mark("u-1", ids[0], "unread", 3_000)
    assert (await state(real_redis, keys, ids[0]))["status"] == "SENT"
    changes = [e for e in await events_of(real_redis, keys, ids[0]) if e.version > 3]
    assert [(type(e), e.version, e.status) for e in changes] == [
        (InboxMessageRead, 4, "READ"), (InboxMessageUnread, 5, "SENT"),
    ]  # fmt: skip
    await store.mark("u-1", ids[1], "seen", 4_000)
    assert (await store.counts("u-1")).unseen == 2
    await store.mark("u-1", ids[2], "archive", 5_000)
    assert [s.message.id for s in (await store.page("u-1", listing="archived")).messages] == [
        ids[2]
    ]
    assert (await store.counts("u-1")).unread == 2  # an archived message counts for neither
    assert await store.read_all("u-1", 6_000) == 2
    assert (await store.counts("u-1")).unread == 0
    assert (await store.page("u-1", listing="unread")).messages == []
    # Not the recipient's, not a message id, or no message at all: None.
    assert await store.mark("u-2", ids[1], "read", 7_000) is None
    assert await store.mark("u-1", "not-an-id", "read", 7_000) is None
    assert await store.message("u-1", ids[1].replace(ids[1][:8], "00000000")) is None
