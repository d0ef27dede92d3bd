"""Recovery with a real worker and real Redis: entries nobody can read, and deliveries leased
too often without an outcome, go to the dead-letter queue while the rest flows; refused
leases (an out-of-memory Redis) count for nothing."""

from __future__ import annotations

import asyncio
import dataclasses
from collections import Counter
from pathlib import Path
from typing import Any

import structlog
from redis.asyncio import Redis

from streams.core import codec
from streams.core.consumer_groups import DELIVERY_GROUP, ensure_group
from streams.core.keys import KeySpace
from streams.core.vocabulary import Priority
from streams.delivery.store import DeliveryStore
from tests.integration.delivery_support import (
    FAST,
    accept,
    dead_letters,
    fast_catalog,
    final_state,
    otp,
    running_worker,
    sandbox_calls,
    state,
    wait_until,
)
from tests.servers import redis_server


async def test_a_poison_entry_goes_to_the_dlq_while_the_rest_flows(
    real_redis: Redis, key_prefix: str
) -> None:
    keys, catalog = KeySpace(key_prefix), fast_catalog()
    stream = keys.shard(0).work(Priority.HIGH)
    await ensure_group(real_redis, stream, DELIVERY_GROUP)
    await real_redis.xadd(stream, {"w": b"\x00not a work item"})
    await real_redis.xadd(stream, {"unexpected": b"field"})
    delivery_id = (await accept(real_redis, keys, catalog, otp(), "k"))["deliveries"][0]["id"]
    async with running_worker(real_redis, keys, catalog):
        assert (await final_state(real_redis, keys, delivery_id))["status"] == "SENT"
        await wait_until(lambda: _dlq_size(real_redis, keys, 2))
    letters = await dead_letters(real_redis, keys)
    assert {letter["error_class"] for letter in letters} == {"POISON"}
    assert any(letter.get("raw_w", "").endswith("not a work item") for letter in letters)
    assert (await real_redis.xpending(stream, DELIVERY_GROUP))["pending"] == 0


async def _dlq_size(redis: Redis, keys: KeySpace, size: int) -> bool:
    return int(await redis.xlen(keys.shard(0).dlq)) >= size


async def test_a_delivery_leased_too_often_without_an_outcome_is_dead_lettered(
    real_redis: Redis, key_prefix: str
) -> None:
    keys, catalog = KeySpace(key_prefix), fast_catalog()
    delivery_id = (await accept(real_redis, keys, catalog, otp(), "k"))["deliveries"][0]["id"]
    shard, stream = keys.shard(0), keys.shard(0).work(Priority.HIGH)
    await ensure_group(real_redis, stream, DELIVERY_GROUP)
    [[_, [(entry_id, fields)]]] = await real_redis.xreadgroup(
        DELIVERY_GROUP, "ghost", {stream: ">"}, count=1
    )
    item = codec.decode_work_item(fields[b"w"])
    # Five workers lease it and die before recording anything, as crashing workers would.
    store = DeliveryStore(real_redis)
    for _ in range(FAST.max_deliveries):
        entries = [(entry_id.decode(), item)]
        [lease] = await store.begin(
            shard, Priority.HIGH, entries, "ghost", lease_ms=1, max_leases=5
        )
        assert lease.verdict == "GO"
        await asyncio.sleep(0.005)
    async with running_worker(real_redis, keys, catalog):
        await wait_until(lambda: _dlq_size(real_redis, keys, 1), within=10)
    [letter] = await dead_letters(real_redis, keys)
    assert letter["error_class"] == "POISON"
    assert "leased 6 times without an outcome" in letter["last_error"]
    assert letter["delivery_id"] == delivery_id
    assert (await real_redis.xpending(stream, DELIVERY_GROUP))["pending"] == 0
    assert await sandbox_calls(real_redis, keys) == []
    # The delivery ended: left QUEUED, it would be "in progress" for ever.
    ended = await state(real_redis, keys, delivery_id)
    assert (ended["status"], ended["error_class"]) == ("FAILED", "POISON")


async def test_hand_outs_without_a_lease_never_make_a_delivery_poison(
    real_redis: Redis, key_prefix: str
) -> None:
    """The stream counts every hand-out, also those whose lease Redis refused: that count
    must not decide, only leases really taken do."""
    keys, catalog = KeySpace(key_prefix), fast_catalog()
    delivery_id = (await accept(real_redis, keys, catalog, otp(), "k"))["deliveries"][0]["id"]
    stream = keys.shard(0).work(Priority.HIGH)
    await ensure_group(real_redis, stream, DELIVERY_GROUP)
    await real_redis.xreadgroup(DELIVERY_GROUP, "ghost-0", {stream: ">"}, count=1)
    [pending] = await real_redis.xpending_range(stream, DELIVERY_GROUP, "-", "+", 1)
    for n in range(1, 20):  # handed out 20 times, never leased
        await real_redis.xclaim(stream, DELIVERY_GROUP, f"ghost-{n}", 0, [pending["message_id"]])
    async with running_worker(real_redis, keys, catalog):
        assert (await final_state(real_redis, keys, delivery_id))["status"] == "SENT"
    assert await dead_letters(real_redis, keys) == []


async def test_an_out_of_memory_redis_delays_deliveries_but_fails_none(tmp_path: Path) -> None:
    """While Redis refuses writes, leases fail and nothing is sent; once it takes writes
    again, every accepted notification is delivered, none POISON."""
    with redis_server(tmp_path) as url:
        redis = Redis.from_url(url)
        try:
            keys, catalog = KeySpace("oom"), fast_catalog()
            ids = [
                (await accept(redis, keys, catalog, otp(), f"k-{n}"))["deliveries"][0]["id"]
                for n in range(5)
            ]
            used = int((await redis.info("memory"))["used_memory"])
            await redis.config_set("maxmemory", str(used // 2))  # every write refused
            async with running_worker(redis, keys, catalog):
                # Many lease lengths of refused leases and reclaims (FAST: 1.5 s).
                await asyncio.sleep(5)
                assert [await state(redis, keys, i) for i in ids] == [{}] * 5  # never leased
                await redis.config_set("maxmemory", "0")
                for delivery_id in ids:
                    assert (await final_state(redis, keys, delivery_id))["status"] == "SENT"
            assert await dead_letters(redis, keys) == []
        finally:
            await redis.aclose()


async def test_work_taken_over_in_bulk_is_leased_only_as_the_lane_has_room(
    real_redis: Redis, key_prefix: str
) -> None:
    """A worker that takes over more entries than its lane can send at once must not lease
    them all at once: the last would wait behind the others until their leases ran out, and
    another worker would lease and send them again meanwhile."""
    keys, catalog = KeySpace(key_prefix), fast_catalog(idempotent=False)
    slow = otp(directives={"latency_ms": 400})
    ids = [
        (await accept(real_redis, keys, catalog, slow, f"k-{n}"))["deliveries"][0]["id"]
        for n in range(12)
    ]
    stream = keys.shard(0).work(Priority.HIGH)
    await ensure_group(real_redis, stream, DELIVERY_GROUP)
    # A worker that read them all and died: the others take them over once their lease ends.
    await real_redis.xreadgroup(DELIVERY_GROUP, "ghost", {stream: ">"}, count=100)
    narrow = dataclasses.replace(FAST, lanes={**FAST.lanes, Priority.HIGH: 2})
    async with (
        running_worker(real_redis, keys, catalog, consumer="a", options=narrow),
        running_worker(real_redis, keys, catalog, consumer="b", options=narrow),
    ):
        for delivery_id in ids:
            assert (await final_state(real_redis, keys, delivery_id))["status"] == "SENT"
    calls = Counter(call["delivery_id"] for call in await sandbox_calls(real_redis, keys))
    assert calls == dict.fromkeys(ids, 1)


async def test_a_send_whose_lease_ran_short_before_it_could_start_is_left_to_recovery(
    real_redis: Redis, key_prefix: str
) -> None:
    """A worker held up between leasing and sending (a stalled event loop, say) must not
    start a call that could outlast its lease: it leaves the delivery to be handed out
    again, and it is sent once."""
    keys, catalog = KeySpace(key_prefix), fast_catalog(idempotent=False)
    delivery_id = (await accept(real_redis, keys, catalog, otp(), "k"))["deliveries"][0]["id"]
    with structlog.testing.capture_logs() as logs:
        async with running_worker(real_redis, keys, catalog) as worker:
            begin = worker.store.begin
            held_up = [True]

            async def begin_then_stall(*args: Any, **kwargs: Any) -> Any:
                leases = await begin(*args, **kwargs)
                if held_up.pop() if held_up else False:
                    # FAST: a 1.5 s lease with a limit no shorter, so sends start within 0.75 s.
                    await asyncio.sleep(0.8)
                return leases

            worker.store.begin = begin_then_stall  # type: ignore[method-assign]
            assert (await final_state(real_redis, keys, delivery_id))["status"] == "SENT"
    short = [log for log in logs if log["event"] == "delivery.lease_too_short"]
    assert [log["delivery_id"] for log in short] == [delivery_id]
    [call] = await sandbox_calls(real_redis, keys)
    assert call["delivery_id"] == delivery_id
