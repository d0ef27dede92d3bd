"""Sending later and cancelling, on real Redis with a running worker and the sandbox: a
delivery sent later waits in ``delayed`` and is sent when due, its due time recorded
(``DeliveryDue``); a cancellation ends every delivery not yet handed to a provider CANCELLED,
removes its ``delayed`` member, answers the same when repeated, and races safely with a
worker's lease (the lease wins or the cancel wins, never both)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from redis.asyncio import Redis

from streams.core.codec import decode_work_item
from streams.core.events import (
    DeliveryCancelled,
    DeliveryDue,
    DeliveryScheduled,
    DeliverySent,
)
from streams.core.keys import KeySpace
from streams.core.records import decode_record
from streams.core.vocabulary import Priority
from streams.delivery import cancellations
from streams.delivery.store import DeliveryStore
from tests.conftest import stream_events
from tests.integration.delivery_support import (
    accept,
    fast_catalog,
    running_worker,
    sandbox_calls,
    state,
    wait_until,
)

NORMAL = Priority.NORMAL


def later(key: str, **when: Any) -> dict[str, Any]:
    """An order confirmation by EMAIL, sent later (``send_at`` or ``delay``)."""
    return {
        "recipient": {"id": "u-later", "email": "anna@example.com", "push_tokens": ["tok-1"]},
        "type": "order_confirmed",
        "channels": ["EMAIL", "PUSH"],
        "data": {"order_id": key},
        **when,
    }


async def events_of(redis: Redis, keys: KeySpace, delivery_id: str) -> list[Any]:
    events = await stream_events(redis, keys.shard(0).events)
    return [e for e in events if getattr(e, "delivery_id", None) == delivery_id]


async def cancel(redis: Redis, keys: KeySpace, notification_id: str, **options: Any) -> list[Any]:
    shard = keys.notification_shard(notification_id)
    records = [r for r in await cancellations.records_of(redis, shard, [notification_id]) if r]
    [done] = await cancellations.cancel(
        redis, shard, records, by="orders", retention_ms=60_000, now=datetime.now(UTC), **options
    )
    return [(d.id, d.status) for d in done.deliveries]


async def test_a_delivery_sent_later_waits_then_goes_with_its_due_time_recorded(
    real_redis: Redis, key_prefix: str
) -> None:
    keys, catalog = KeySpace(key_prefix), fast_catalog()
    send_at = datetime.now(UTC) + timedelta(seconds=1.5)
    answer = await accept(real_redis, keys, catalog, later("o-1", send_at=send_at), "k-1")
    email = answer["deliveries"][0]
    assert (email["status"], email["reason"]) == ("SCHEDULED", "scheduled")
    assert email["due_ms"] == int(send_at.timestamp() * 1000)
    async with running_worker(real_redis, keys, catalog):
        await wait_until(lambda: _status_is(real_redis, keys, email["id"], "SENT"), within=5)
    [call] = [c for c in await sandbox_calls(real_redis, keys) if c["delivery_id"] == email["id"]]
    late_ms = call["at_ms"] - email["due_ms"]
    assert 0 <= late_ms < 1000
    scheduled, due, sent = await events_of(real_redis, keys, email["id"])
    assert isinstance(scheduled, DeliveryScheduled)
    assert isinstance(due, DeliveryDue)
    assert isinstance(sent, DeliverySent)
    assert (scheduled.version, due.version, sent.version) == (1, 2, 3)
    assert scheduled.until == send_at.replace(microsecond=send_at.microsecond // 1000 * 1000)
    assert due.scheduled_for == scheduled.until
    # The TTL counts from the send time.
    record = decode_record(await real_redis.get(keys.shard(0).notification(answer["id"])))
    assert record.expires_ms == email["due_ms"] + 172_800_000


async def _status_is(redis: Redis, keys: KeySpace, delivery_id: str, status: str) -> bool:
    return (await state(redis, keys, delivery_id)).get("status") == status


async def test_cancelling_ends_what_waits_and_removes_it_from_delayed(
    real_redis: Redis, key_prefix: str
) -> None:
    keys, catalog = KeySpace(key_prefix), fast_catalog()
    answer = await accept(real_redis, keys, catalog, later("o-2", delay="PT1H"), "k-2")
    ids = [d["id"] for d in answer["deliveries"]]
    assert await real_redis.zcard(keys.shard(0).delayed) == 2
    assert await cancel(real_redis, keys, answer["id"]) == [(i, "CANCELLED") for i in ids]
    assert await real_redis.zcard(keys.shard(0).delayed) == 0
    for delivery_id in ids:
        found = await state(real_redis, keys, delivery_id)
        assert (found["status"], found["version"]) == ("CANCELLED", "2")
        assert found["reason"] == "notification cancelled by orders"
        assert "held" not in found  # nothing of it is left to find it
        _, cancelled = await events_of(real_redis, keys, delivery_id)
        assert isinstance(cancelled, DeliveryCancelled)
        assert (cancelled.version, cancelled.cancelled_by) == (2, "orders")
    # Again: the same answer, nothing new recorded.
    before = await real_redis.xlen(keys.shard(0).events)
    assert await cancel(real_redis, keys, answer["id"]) == [(i, "CANCELLED") for i in ids]
    assert await real_redis.xlen(keys.shard(0).events) == before


async def test_a_queued_delivery_cancelled_is_dropped_by_the_worker_and_its_state_held(
    real_redis: Redis, key_prefix: str
) -> None:
    keys, catalog = KeySpace(key_prefix), fast_catalog()
    answer = await accept(real_redis, keys, catalog, later("o-3"), "k-3")  # not later: QUEUED
    ids = [d["id"] for d in answer["deliveries"]]
    assert await cancel(real_redis, keys, answer["id"]) == [(i, "CANCELLED") for i in ids]
    for delivery_id in ids:
        found = await state(real_redis, keys, delivery_id)
        assert found["held"] == "1"  # its work item is still in the stream
        assert await real_redis.pttl(keys.shard(0).delivery(delivery_id)) > 86_000_000
    async with running_worker(real_redis, keys, catalog):
        await wait_until(lambda: _work_empty(real_redis, keys), within=5)
    assert await sandbox_calls(real_redis, keys) == []


async def _work_empty(redis: Redis, keys: KeySpace) -> bool:
    return all([await redis.xlen(stream) == 0 for stream in keys.shard(0).work_streams])


@pytest.mark.parametrize("leased_first", [True, False])
async def test_the_lease_or_the_cancel_wins_never_both(
    real_redis: Redis, key_prefix: str, leased_first: bool
) -> None:
    keys, catalog = KeySpace(key_prefix), fast_catalog()
    body = later("o-4")
    body["channels"] = ["EMAIL"]
    answer = await accept(real_redis, keys, catalog, body, "k-4")
    [delivery] = answer["deliveries"]
    shard = keys.shard(0)
    [(entry_id, fields)] = (await real_redis.xrange(shard.work(NORMAL)))[:1]
    store = DeliveryStore(real_redis)
    item = decode_work_item(fields[b"w"])
    entries = [(entry_id.decode(), item)]
    if leased_first:
        [lease] = await store.begin(shard, NORMAL, entries, "w-1", lease_ms=30_000, max_leases=5)
        assert lease.verdict == "GO"
        assert await cancel(real_redis, keys, answer["id"]) == [(delivery["id"], "SENDING")]
        # The worker that holds it may send it; a retry of it would not be sent.
        found = await state(real_redis, keys, delivery["id"])
        assert (found["status"], found["cancelled_by"]) == ("SENDING", "orders")
    else:
        assert await cancel(real_redis, keys, answer["id"]) == [(delivery["id"], "CANCELLED")]
        [lease] = await store.begin(shard, NORMAL, entries, "w-1", lease_ms=30_000, max_leases=5)
        assert lease.verdict == "TERMINAL"


async def test_a_cancellation_key_indexes_the_notification_until_it_expires(
    real_redis: Redis, key_prefix: str
) -> None:
    keys, catalog = KeySpace(key_prefix), fast_catalog()
    first = await accept(
        real_redis, keys, catalog, later("o-5", delay=3600, cancellation_key="order-5"), "k-5"
    )
    second = await accept(
        real_redis, keys, catalog, later("o-6", cancellation_key="order-5"), "k-6"
    )
    shard = keys.shard(0)
    assert sorted(await cancellations.indexed(real_redis, shard, "orders", "order-5")) == sorted(
        [first["id"], second["id"]]
    )
    index = shard.cancellation_index("orders", "order-5")
    # The index finds it until it expires (the record lives as long as its key: 1 h here).
    assert await real_redis.pttl(index) > (3600 + 172_800) * 1000 - 10_000
    assert await real_redis.pttl(shard.notification(first["id"])) <= 3_600_000
    await cancellations.forget(real_redis, shard, "orders", "order-5", [first["id"]])
    assert await cancellations.indexed(real_redis, shard, "orders", "order-5") == [second["id"]]
