"""Forgetting a recipient in Redis: its work items are found in the work streams and in
``delayed``; a waiting delivery ends SUPPRESSED ("erased") with its event and its work item
gone (its share of shared template data released), one that ended only loses its item, one
being sent and one that moved are left for a second look; its dead letters and the
sandbox's records of it are deleted, nobody else's."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import msgspec
from redis.asyncio import Redis

from app.catalog import Catalog
from app.ingest.fanout import Planner
from app.ingest.requests import NotificationRequest
from streams.core import codec, scripts
from streams.core.events import DeliverySuppressed
from streams.core.keys import KeySpace
from streams.core.vocabulary import ErrorClass, Priority
from streams.delivery.delayed import delayed_member
from streams.delivery.store import DeliveryStore
from streams.dlq.entries import Worker, failed_delivery_entry
from streams.ingest.writer import ingest_call
from streams.recipients.erase import (
    erase_call,
    find_waiting,
    remove_dead_letters,
    remove_sandbox_records,
)
from streams.recipients.read import RecipientSettings
from tests.conftest import DIGEST, stream_events


def order(recipient: str, note: str = "") -> dict[str, Any]:
    data = {"order_id": "A-1", "note": note} if note else {"order_id": "A-1"}
    return {
        "recipient": {"id": recipient, "email": f"{recipient}@example.com"},
        "type": "order_confirmed", "data": data,
    }  # fmt: skip


async def ingest(
    redis: Redis, keys: KeySpace, catalog: Catalog, body: dict[str, Any], fair_buffer: int = 2000
) -> None:
    planner, shard = Planner(catalog, DIGEST), keys.shard(0)
    request = msgspec.convert(body, NotificationRequest)
    item = planner.plan(
        shard=shard, producer="orders", idempotency_key=body["recipient"]["id"],
        request=request, identity=planner.identity(shard, request),
        settings=RecipientSettings(), now=datetime.now(UTC),
    )  # fmt: skip
    await scripts.INGEST(redis, *ingest_call(shard, [item], 60_000, 10_000, fair_buffer))


async def test_waiting_deliveries_end_erased_and_their_items_go(
    real_redis: Redis, key_prefix: str, catalog: Catalog
) -> None:
    keys = KeySpace(key_prefix)
    shard = keys.shard(0)
    await ingest(real_redis, keys, catalog, order("anna", note="n" * 400))  # shared data
    await ingest(real_redis, keys, catalog, order("bert"))
    waiting = await find_waiting(real_redis, shard, "anna")
    assert sorted(found.item.channel for found in waiting) == ["EMAIL", "IN_APP"]
    assert all(found.item.shared_data for found in waiting)
    # One more, waiting in ``delayed`` (a retry, say).
    member = delayed_member(Priority.NORMAL, codec.encode(waiting[0].item))
    await real_redis.zadd(shard.delayed, {member: 1})
    waiting = await find_waiting(real_redis, shard, "anna")
    assert sorted(found.kind for found in waiting) == ["stream", "stream", "zset"]

    call = erase_call(shard, waiting, [1, 1, 1], 1_700_000_000_000, 60_000)
    replies = await scripts.ERASE(real_redis, *call)
    # The delayed copy's delivery had just ended through the stream's copy of it.
    assert sorted(replies) == [b"ENDED", b"ERASED", b"ERASED"]
    assert await find_waiting(real_redis, shard, "anna") == []
    assert len(await find_waiting(real_redis, shard, "bert")) == 2  # nobody else's
    suppressed = [e for e in await stream_events(real_redis, shard.events)
                  if isinstance(e, DeliverySuppressed) and e.reason == "erased"]  # fmt: skip
    assert sorted((e.channel, e.version) for e in suppressed) == [("EMAIL", 2), ("IN_APP", 2)]
    notification = waiting[0].item.notification_id
    assert not await real_redis.exists(shard.data(notification))  # its last two deliveries
    state = await DeliveryStore(real_redis).state(shard, waiting[0].item.delivery_id)
    assert state is not None
    assert (state.status, state.reason, state.notification_id) == (
        "SUPPRESSED", "erased", notification,
    )  # fmt: skip


async def test_items_queued_for_their_producers_turn_are_erased_too(
    real_redis: Redis, key_prefix: str, catalog: Catalog
) -> None:
    keys = KeySpace(key_prefix)
    shard = keys.shard(0)
    await ingest(real_redis, keys, catalog, order("carl"), fair_buffer=0)  # the stream is "full"
    queue = shard.queued(Priority.NORMAL, "orders")
    assert await real_redis.llen(queue) == 2
    waiting = await find_waiting(real_redis, shard, "carl")
    assert [found.kind for found in waiting] == ["list", "list"]
    call = erase_call(shard, waiting, [1, 1], 1_700_000_000_000, 60_000)
    assert await scripts.ERASE(real_redis, *call) == [b"ERASED", b"ERASED"]
    assert await real_redis.llen(queue) == 0


async def test_one_being_sent_or_changed_since_is_left_for_a_second_look(
    real_redis: Redis, key_prefix: str, catalog: Catalog
) -> None:
    keys = KeySpace(key_prefix)
    shard = keys.shard(0)
    await ingest(real_redis, keys, catalog, order("anna"))
    email, in_app = sorted(
        await find_waiting(real_redis, shard, "anna"), key=lambda f: f.item.channel
    )
    entries = [(email.entry.decode(), email.item)]
    store = DeliveryStore(real_redis)
    await store.begin(
        shard, email.item.priority, entries, "worker-1", lease_ms=60_000, max_leases=5
    )
    call = erase_call(shard, [email, in_app], [1, 7], 1_700_000_000_000, 60_000)
    assert await scripts.ERASE(real_redis, *call) == [b"IN_FLIGHT", b"MOVED"]
    assert len(await find_waiting(real_redis, shard, "anna")) == 2


async def test_dead_letters_and_sandbox_records_of_the_recipient_go(
    real_redis: Redis, key_prefix: str, catalog: Catalog
) -> None:
    keys = KeySpace(key_prefix)
    shard = keys.shard(0)
    await ingest(real_redis, keys, catalog, order("anna"))
    await ingest(real_redis, keys, catalog, order("bert"))
    items = [
        found.item for r in ("anna", "bert") for found in await find_waiting(real_redis, shard, r)
    ]
    worker = Worker("w", "1")
    for item in items:
        entry = failed_delivery_entry(
            item, error_class=ErrorClass.PERMANENT, error="e", attempts=1, first_attempt_ms=1,
            last_attempt_ms=1, worker=worker, version=3, work_entry_id="1-1",
        )  # fmt: skip
        entry_id = await real_redis.xadd(shard.dlq, entry)  # type: ignore[arg-type]
        await real_redis.hset(shard.dlq_resolved, entry_id, "{}")
        await real_redis.xadd(keys.sandbox_sent, {"delivery_id": item.delivery_id,
                                                  "address": item.address})  # fmt: skip
    await real_redis.xadd(
        keys.sandbox_sent, {"delivery_id": "other", "address": "anna@example.com"}
    )
    removed = await remove_dead_letters(real_redis, shard, "anna")
    assert sorted(item.channel for item in removed) == ["EMAIL", "IN_APP"]
    assert await real_redis.xlen(shard.dlq) == 2
    assert await real_redis.hlen(shard.dlq_resolved) == 2
    anna = [item for item in items if item.recipient_id == "anna"]
    count = await remove_sandbox_records(
        real_redis, keys, {"anna@example.com"}, {item.delivery_id for item in anna}
    )
    assert count == 3  # both deliveries' records, and the other call to the address
    left = await real_redis.xrange(keys.sandbox_sent)
    assert {fields[b"address"] for _, fields in left} == {b"bert@example.com", b"bert"}
