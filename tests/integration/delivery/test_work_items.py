"""Template data stored once per notification: large data shared by several work items lives
in the notification's data hash, which the last delivery to end deletes; work entries leave
the stream with their delivery's outcome; a dead letter keeps the data it needs for a
replay."""

from __future__ import annotations

from typing import Any

import msgspec
from redis.asyncio import Redis

from streams.core import codec
from streams.core.keys import KeySpace
from streams.core.vocabulary import Priority
from streams.delivery.work_items import WorkItem
from streams.inbox.store import InboxStore
from tests.integration.delivery_support import (
    accept,
    dead_letters,
    fast_catalog,
    final_state,
    running_worker,
    sandbox_calls,
)

NOTE = "n" * 400  # template data larger than a key of its own costs


def order(data: dict[str, Any], tokens: int = 3) -> dict[str, Any]:
    return {
        "recipient": {
            "id": "user-7",
            "email": "anna@example.com",
            "push_tokens": [f"token-{n}" for n in range(tokens)],
        },
        "type": "order_confirmed",
        "data": {"order_id": "A-7", **data},
    }


async def work_items(redis: Redis, keys: KeySpace) -> list[WorkItem]:
    stream = keys.shard(0).work(Priority.NORMAL)
    return [codec.decode_work_item(f[b"w"]) for _, f in await redis.xrange(stream)]


async def test_large_data_is_stored_once_and_leaves_with_the_last_delivery(
    real_redis: Redis, key_prefix: str
) -> None:
    keys, catalog = KeySpace(key_prefix), fast_catalog()
    answer = await accept(real_redis, keys, catalog, order({"note": NOTE}), "k")
    data_key = keys.shard(0).data(answer["id"])
    items = await work_items(real_redis, keys)
    assert len(items) == 5  # EMAIL, three push tokens, IN_APP
    assert all(item.shared_data and item.data == {} for item in items)
    assert all(item.producer == "orders" for item in items)
    stored = await real_redis.hgetall(data_key)
    assert msgspec.json.decode(stored[b"d"]) == {"order_id": "A-7", "note": NOTE}
    assert stored[b"n"] == b"5"
    assert await real_redis.pttl(data_key) > 0  # it ends with the notification in any case

    async with running_worker(real_redis, keys, catalog):
        for delivery in answer["deliveries"]:
            assert (await final_state(real_redis, keys, delivery["id"]))["status"] == "SENT"
    assert await real_redis.exists(data_key) == 0
    # Every provider call got the whole data (IN_APP went to the inbox, rendered from it too),
    # and no work entry (with its address) is left.
    assert len(await sandbox_calls(real_redis, keys)) == 4
    [in_app] = (await InboxStore(real_redis, keys).page("user-7")).messages
    assert "A-7" in in_app.message.body
    assert await real_redis.xlen(keys.shard(0).work(Priority.NORMAL)) == 0


async def test_small_data_travels_in_each_work_item(real_redis: Redis, key_prefix: str) -> None:
    keys, catalog = KeySpace(key_prefix), fast_catalog()
    answer = await accept(real_redis, keys, catalog, order({}), "k")
    items = await work_items(real_redis, keys)
    assert [item.data for item in items] == [{"order_id": "A-7"}] * 5
    assert not any(item.shared_data for item in items)
    assert await real_redis.exists(keys.shard(0).data(answer["id"])) == 0


async def test_a_retried_delivery_keeps_sharing_and_a_dead_letter_holds_the_data(
    real_redis: Redis, key_prefix: str
) -> None:
    keys, catalog = KeySpace(key_prefix), fast_catalog()
    directives = {
        "EMAIL": {"fail_permanent": "mailbox does not exist"},
        "PUSH": {"fail_transient": 1},
    }
    answer = await accept(
        real_redis, keys, catalog, order({"note": NOTE, "sandbox": directives}, tokens=1), "k"
    )
    data_key = keys.shard(0).data(answer["id"])
    async with running_worker(real_redis, keys, catalog):
        ended = {
            d["channel"]: (await final_state(real_redis, keys, d["id"]))["status"]
            for d in answer["deliveries"]
        }
    assert ended == {"EMAIL": "FAILED", "PUSH": "SENT", "IN_APP": "SENT"}
    assert await real_redis.exists(data_key) == 0
    [letter] = await dead_letters(real_redis, keys)
    kept = codec.decode_work_item(letter["work"])
    assert not kept.shared_data
    assert kept.data["note"] == NOTE  # a replay does not depend on the data hash
    assert letter["producer"] == "orders"
