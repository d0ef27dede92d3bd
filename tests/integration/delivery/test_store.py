"""The delivery store: recording outcomes makes one ``events`` entry and one XACK per script
call, a delivery whose state key is corrupt fails alone, a stale work entry of a delivery
scheduled again since is not leased, and the lease of a cancelled campaign's delivery says
so."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
import pytest
from redis.asyncio import Redis
from redis.exceptions import ResponseError

from streams.core import codec
from streams.core.consumer_groups import DELIVERY_GROUP, ensure_group
from streams.core.events import DeliverySent
from streams.core.keys import KeySpace
from streams.core.vocabulary import Channel, ErrorClass, Priority
from streams.delivery import outcomes as delivery_outcomes
from streams.delivery.leases import LeasedDelivery
from streams.delivery.store import DeliveryStore
from streams.delivery.work_items import WorkItem
from streams.dlq.entries import Worker
from tests.integration.delivery_support import accept, fast_catalog

ITEM = WorkItem(
    delivery_id="d-0", notification_id="n-0", notification_type="marketing",
    channel=Channel.EMAIL, priority=Priority.LOW, recipient_id="u-0",
    address="anna@example.com", locale="en", created_ms=0, expires_ms=2**50,
)  # fmt: skip


def otp(n: int) -> dict[str, Any]:
    return {
        "recipient": {"id": f"u-{n}", "phone": "+4915112345678"},
        "type": "otp",
        "data": {"code": str(n)},
    }


async def leased_steps(redis: Redis, keys: KeySpace, count: int) -> list[LeasedDelivery]:
    """Accept ``count`` OTPs, read their work entries as consumer "w" and lease them."""
    shard, catalog = keys.shard(0), fast_catalog()
    stream = shard.work(Priority.HIGH)
    await ensure_group(redis, stream, DELIVERY_GROUP)
    for n in range(count):
        await accept(redis, keys, catalog, otp(n), f"k{n}")
    [(_, entries)] = await redis.xreadgroup(DELIVERY_GROUP, "w", {stream: ">"}, count=count)
    items = [(entry.decode(), codec.decode_work_item(fields[b"w"])) for entry, fields in entries]
    store = DeliveryStore(redis)
    leases = await store.begin(shard, Priority.HIGH, items, "w", lease_ms=60_000, max_leases=5)
    assert [lease.verdict for lease in leases] == ["GO"] * count
    return [
        LeasedDelivery.taken(shard, item, entry_id, lease, Worker("w", "test"))
        for (entry_id, item), lease in zip(items, leases, strict=True)
    ]


async def test_outcomes_finished_together_make_one_events_entry_and_one_ack(
    real_redis: Redis, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix)
    steps = await leased_steps(real_redis, keys, 3)
    events_before = await real_redis.xlen(keys.shard(0).events)  # one entry per acceptance
    outcomes = [
        delivery_outcomes.sent(step, "sandbox", f"m{n}", 1_000) for n, step in enumerate(steps)
    ]

    assert await DeliveryStore(real_redis).finish(outcomes) == ["OK", "OK", "OK"]

    [(_, fields)] = await real_redis.xrevrange(keys.shard(0).events, count=1)
    sent = codec.decode_events(fields[b"e"])
    assert [type(event) for event in sent] == [DeliverySent] * 3
    assert [event.delivery_id for event in sent] == [s.item.delivery_id for s in steps]
    assert await real_redis.xlen(keys.shard(0).events) == events_before + 1
    pending = await real_redis.xpending(keys.shard(0).work(Priority.HIGH), DELIVERY_GROUP)
    assert pending["pending"] == 0


async def test_a_stale_entry_of_a_delivery_scheduled_again_since_is_not_leased(
    real_redis: Redis, key_prefix: str
) -> None:
    # A worker read the entry and stopped; another took the delivery over, tried it and put
    # it into ``delayed`` for a retry in an hour. The first worker, back, leases its entry.
    keys = KeySpace(key_prefix)
    shard, store = keys.shard(0), DeliveryStore(real_redis)
    [step] = await leased_steps(real_redis, keys, 1)
    await asyncio.sleep(0.005)  # the retry is recorded in a later millisecond than the entry
    due_ms = 2**45
    retry = delivery_outcomes.retry_later(step, ErrorClass.TRANSIENT, "timeout", due_ms, 1_000)
    assert await store.finish([retry]) == ["OK"]

    [stale] = await store.begin(
        shard, Priority.HIGH, [(step.entry_id, step.item)], "w2", lease_ms=60_000, max_leases=5
    )

    assert stale.verdict == "TERMINAL"
    stale_step = LeasedDelivery.taken(shard, step.item, step.entry_id, stale, Worker("w2", "t"))
    assert await store.finish([delivery_outcomes.acknowledge_only(stale_step)]) == ["MOVED"]
    state = await real_redis.hgetall(shard.delivery(step.item.delivery_id))
    assert (state[b"status"], state[b"attempts"], state[b"lease_owner"]) == (
        b"SCHEDULED",
        b"1",
        b"",
    )
    assert [
        score for _, score in await real_redis.zrange(shard.delayed, 0, -1, withscores=True)
    ] == [due_ms]


async def test_a_corrupt_state_key_fails_alone(real_redis: Redis, key_prefix: str) -> None:
    keys = KeySpace(key_prefix)
    first, broken, last = await leased_steps(real_redis, keys, 3)
    events_before = await real_redis.xlen(keys.shard(0).events)
    await real_redis.delete(keys.shard(0).delivery(broken.item.delivery_id))
    await real_redis.set(keys.shard(0).delivery(broken.item.delivery_id), "not a hash")
    outcomes = [
        delivery_outcomes.sent(step, "sandbox", "m", 1_000) for step in (first, broken, last)
    ]

    assert await DeliveryStore(real_redis).finish(outcomes) == ["OK", "BROKEN", "OK"]

    # Not every item was recorded: the recorded ones' events are appended one entry each.
    entries = (await real_redis.xrange(keys.shard(0).events))[events_before:]
    recorded = [e.delivery_id for _, f in entries for e in codec.decode_events(f[b"e"])]
    assert recorded == [first.item.delivery_id, last.item.delivery_id]
    for step in (first, last):
        state = await real_redis.hget(keys.shard(0).delivery(step.item.delivery_id), "status")
        assert state == b"SENT"
    # Only the broken delivery's work entry is still pending, to be retried or dead-lettered.
    pending = await real_redis.xpending_range(
        keys.shard(0).work(Priority.HIGH), DELIVERY_GROUP, min="-", max="+", count=10
    )
    assert [p["message_id"].decode() for p in pending] == [broken.entry_id]


async def test_a_shared_key_of_the_wrong_type_fails_the_call_before_any_write(
    real_redis: Redis, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix)
    steps = await leased_steps(real_redis, keys, 2)
    events_before = await real_redis.xlen(keys.shard(0).events)
    await real_redis.set(keys.shard(0).dlq, "not a stream")
    outcomes = [delivery_outcomes.sent(step, "sandbox", "m", 1_000) for step in steps]

    with pytest.raises(ResponseError, match="WRONGTYPE"):
        await DeliveryStore(real_redis).finish(outcomes)

    assert await real_redis.xlen(keys.shard(0).events) == events_before
    for step in steps:
        state = await real_redis.hget(keys.shard(0).delivery(step.item.delivery_id), "status")
        assert state == b"SENDING"
    pending = await real_redis.xpending(keys.shard(0).work(Priority.HIGH), DELIVERY_GROUP)
    assert pending["pending"] == 2


async def test_a_cancelled_campaigns_delivery_is_leased_to_be_cancelled_unless_held_or_ended(
    real_redis: Redis, key_prefix: str
) -> None:
    shard, store = KeySpace(key_prefix).shard(0), DeliveryStore(real_redis)
    stream = shard.work(Priority.LOW)
    await real_redis.set(shard.campaign_cancelled("c-1"), "1")
    items = [
        msgspec.structs.replace(ITEM, delivery_id=f"d-{n}", campaign=campaign)
        for n, campaign in enumerate(["c-1", "c-1", "c-1", "c-1", "c-1", "c-2", ""])
    ]
    entries = [(await _entry(real_redis, stream, item), item) for item in items]
    ended, held, poisoned = (shard.delivery(item.delivery_id) for item in items[2:5])
    leased_once = {"status": "SENDING", "version": 1, "attempts": 0}
    await real_redis.hset(ended, mapping={**leased_once, "status": "SENT", "version": 2})
    await real_redis.hset(held, mapping={**leased_once, "lease_until": 2**50})
    await real_redis.hset(poisoned, mapping={**leased_once, "leases": 5})  # the sixth lease

    leases = await store.begin(shard, Priority.LOW, entries, "w", lease_ms=60_000, max_leases=5)

    assert [lease.verdict for lease in leases] == [
        "CANCELLED", "CANCELLED", "TERMINAL", "LEASED", "CANCELLED", "GO", "GO",
    ]  # fmt: skip
    fresh = await store.state(shard, items[0].delivery_id)
    assert fresh is not None  # leased like any other, so no second worker takes it meanwhile
    assert (fresh.status, fresh.lease_owner, fresh.channel) == ("SENDING", "w", "EMAIL")
    leased = LeasedDelivery.taken(shard, items[0], "", leases[0], Worker("w", "test"))
    [recorded] = await store.finish([delivery_outcomes.cancelled(leased, leases[0].now_ms)])
    assert recorded == "OK"
    [again] = await store.begin(
        shard, Priority.LOW, entries[:1], "w", lease_ms=60_000, max_leases=5
    )
    assert again.verdict == "TERMINAL"
    state = await store.state(shard, items[0].delivery_id)
    assert state is not None
    assert (state.status, state.version) == ("CANCELLED", 2)


async def _entry(redis: Redis, stream: str, item: WorkItem) -> str:
    """Add a work entry of ``item`` to ``stream``; its id."""
    return (await redis.xadd(stream, {"w": codec.encode(item)})).decode()
