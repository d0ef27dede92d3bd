"""IN_APP through the ``inbox`` provider, against real Redis: the worker records the delivery
SENT and puts its message into the recipient's inbox in one step; the inbox keeps only its
newest messages. (Paging and marking: ``test_store``.)"""

from __future__ import annotations

from typing import Any

from redis.asyncio import Redis

from app.catalog import Catalog, parse_catalog
from streams.core import codec
from streams.core.events import InboxMessageCreated
from streams.core.keys import KeySpace
from streams.inbox.store import InboxStore
from tests.integration.delivery_support import accept, running_worker, state, wait_until

CATALOG = """
[providers.inbox]
kind = "inbox"
keep = {keep}

[channels.IN_APP]
provider = "inbox"

[types.order_shipped]
channels = ["IN_APP"]
priority = "NORMAL"
ttl_seconds = 300
opt_out = true

[types.order_shipped.templates.en.IN_APP]
title = "Shipped"
body = "Order {{{{ order }}}} is on its way."
link = "https://shop.example/o/{{{{ order }}}}"
data = {{ order = "{{{{ order }}}}" }}
"""


def catalog(keep: int = 200) -> Catalog:
    return parse_catalog(CATALOG.format(keep=keep))


def shipped(order: str, recipient: str = "u-1") -> dict[str, Any]:
    return {"recipient": {"id": recipient}, "type": "order_shipped", "data": {"order": order}}


async def send(redis: Redis, keys: KeySpace, inbox: Catalog, orders: list[str]) -> list[str]:
    """Accept one notification per order and wait until each is SENT; their delivery ids."""
    ids = []
    for order in orders:
        answer = await accept(redis, keys, inbox, shipped(order), f"k-{order}")
        ids.append(answer["deliveries"][0]["id"])

    async def all_sent() -> bool:
        states = [await state(redis, keys, delivery_id) for delivery_id in ids]
        return all(found.get("status") == "SENT" for found in states)

    async with running_worker(redis, keys, inbox):
        await wait_until(all_sent)
    return ids


async def events_of(redis: Redis, keys: KeySpace, delivery_id: str) -> list[Any]:
    found = []
    for shard in keys.all_shards():
        for _, fields in await redis.xrange(shard.events):
            found += [
                e
                for e in codec.decode_events(fields[b"e"])
                if getattr(e, "delivery_id", "") == delivery_id
            ]
    return found


async def test_an_in_app_delivery_is_sent_into_the_inbox_with_its_message(
    real_redis: Redis, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix)
    [delivery_id] = await send(real_redis, keys, catalog(), ["A-1"])
    store = InboxStore(real_redis, keys)
    page = await store.page("u-1")
    [stored] = page.messages
    assert stored.message.id == delivery_id
    assert (stored.message.title, stored.message.body) == ("Shipped", "Order A-1 is on its way.")
    assert stored.message.action_url == "https://shop.example/o/A-1"
    assert stored.message.data == {"order": "A-1"}
    assert (page.counts.unread, page.counts.unseen, page.more) == (1, 1, False)
    assert (await state(real_redis, keys, delivery_id))["version"] == "3"
    created = [
        e
        for e in await events_of(real_redis, keys, delivery_id)
        if isinstance(e, InboxMessageCreated)
    ]
    assert [(e.version, e.title, e.notification_type) for e in created] == [
        (3, "Shipped", "order_shipped")
    ]
    # Another recipient's inbox is empty.
    assert (await store.page("u-2")).messages == []


async def test_the_inbox_keeps_only_its_newest_messages(real_redis: Redis, key_prefix: str) -> None:
    keys = KeySpace(key_prefix)
    ids = await send(real_redis, keys, catalog(keep=3), [f"D-{n}" for n in range(5)])
    store = InboxStore(real_redis, keys)
    page = await store.page("u-1")
    assert [s.message.id for s in page.messages] == sorted(ids, reverse=True)[:3]
    assert page.counts.unread == 3
    inbox = keys.shard(0).inbox("u-1")
    assert 0 < await real_redis.pttl(inbox.messages) <= 30 * 86400 * 1000
    assert await real_redis.xlen(inbox.feed) == 5


LINKED = """
[providers.inbox]
kind = "inbox"
link_schemes = ["myapp"]

[channels.IN_APP]
provider = "inbox"

[types.linked]
channels = ["IN_APP"]
priority = "NORMAL"
ttl_seconds = 300
opt_out = true

[types.linked.templates.en.IN_APP]
title = "See"
body = "Open it."
link = "{{ url }}"
"""
# Each link a notification's data may make, and whether the inbox takes it.
LINKS = {
    "https://shop.example/o/1": True,
    "HTTPS://shop.example/o/2": True,
    "myapp://orders/3": True,
    "": True,
    "javascript:alert(1)": False,
    "JavaScript:alert(1)": False,
    "java\tscript:alert(1)": False,
    " javascript:alert(1)": False,
    "data:text/html,<script>alert(1)</script>": False,
    "vbscript:msgbox(1)": False,
    "http://shop.example/o/1": False,
    "/orders/1": False,
    "//evil.example/o/1": False,
    "https:///no-host": False,
    "otherapp://x": False,
}


async def test_only_https_and_configured_links_reach_the_inbox(
    real_redis: Redis, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix)
    linked = parse_catalog(LINKED)
    ids = {}
    for number, link in enumerate(LINKS):
        body = {"recipient": {"id": "u-1"}, "type": "linked", "data": {"url": link}}
        answer = await accept(real_redis, keys, linked, body, f"k-{number}")
        ids[link] = answer["deliveries"][0]["id"]

    async def all_ended() -> bool:
        states = [await state(real_redis, keys, delivery_id) for delivery_id in ids.values()]
        return all(found.get("status") in ("SENT", "FAILED") for found in states)

    async with running_worker(real_redis, keys, linked):
        await wait_until(all_ended)
    page = await InboxStore(real_redis, keys).page("u-1", limit=100)
    assert sorted(stored.message.action_url for stored in page.messages) == sorted(
        link for link, taken in LINKS.items() if taken
    )
    for link, taken in LINKS.items():
        found = await state(real_redis, keys, ids[link])
        if taken:
            assert found["status"] == "SENT", link
        else:
            # One attempt, no retry: the delivery failed for good, saying why.
            assert (found["status"], found["attempts"]) == ("FAILED", "1"), link
            assert found["error_class"] == "PERMANENT", link
            assert "inbox: link: " in found["last_error"], link
            assert "alert" not in found["last_error"]
            assert "shop.example" not in found["last_error"]
