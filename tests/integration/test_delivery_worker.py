"""Delivery workers against real Redis: retries, failures, TTL, poison, dead letters."""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import Any

from redis.asyncio import Redis

from app import __version__
from app.catalog import parse_catalog
from streams import codec
from streams.consumer_groups import DELIVERY_GROUP, ensure_group
from streams.keys import KeySpace
from streams.vocabulary import Priority
from tests.conftest import stream_events
from tests.integration.delivery_support import (
    accept,
    catalog_text,
    dead_letters,
    fast_catalog,
    running_worker,
    sandbox_calls,
    state,
    wait_until,
)
from tests.servers import free_port


def otp(code: str = "1", directives: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    data: dict[str, Any] = {"code": code}
    if directives:
        data["sandbox"] = {"SMS": directives}
    return {
        "recipient": {"id": "u-1", "phone": "+4915112345678"},
        "type": "otp",
        "data": data,
        **extra,
    }


async def final_state(
    redis: Redis, keys: KeySpace, delivery_id: str, within: float = 10
) -> dict[str, str]:
    async def ended() -> bool:
        return (await state(redis, keys, delivery_id)).get("status") in {
            "SENT",
            "FAILED",
            "EXPIRED",
        }

    await wait_until(ended, within)
    return await state(redis, keys, delivery_id)


async def test_a_plain_delivery_is_sent_once(real_redis: Redis, key_prefix: str) -> None:
    keys, catalog = KeySpace(key_prefix), fast_catalog()
    answer = await accept(real_redis, keys, catalog, otp(), "k1")
    delivery_id = answer["deliveries"][0]["id"]
    async with running_worker(real_redis, keys, catalog):
        done = await final_state(real_redis, keys, delivery_id)
    assert done["status"] == "SENT"
    assert done["attempts"] == "1"
    calls = await sandbox_calls(real_redis, keys)
    assert [(c["delivery_id"], c["idempotency_key"], c["outcome"]) for c in calls] == [
        (delivery_id, delivery_id, "sent")
    ]
    assert done["provider_message_id"] == calls[0]["message_id"]
    events = await stream_events(real_redis, keys.shard(0).events)
    sent = [e for e in events if type(e).__name__ == "DeliverySent"]
    assert len(sent) == 1
    assert sent[0].version == 2  # type: ignore[union-attr]
    # Nothing is left pending in the group.
    pending = await real_redis.xpending(keys.shard(0).work(Priority.HIGH), DELIVERY_GROUP)
    assert pending["pending"] == 0


async def test_transient_twice_then_sent_with_jittered_delays(
    real_redis: Redis, key_prefix: str
) -> None:
    keys, catalog = KeySpace(key_prefix), fast_catalog(base=0.2, max_delay=2.0, attempts=6)
    answer = await accept(real_redis, keys, catalog, otp(directives={"fail_transient": 2}), "k")
    delivery_id = answer["deliveries"][0]["id"]
    async with running_worker(real_redis, keys, catalog):
        done = await final_state(real_redis, keys, delivery_id)
    assert done["status"] == "SENT"
    assert done["attempts"] == "3"
    calls = await sandbox_calls(real_redis, keys)
    assert [c["outcome"] for c in calls] == ["transient", "transient", "sent"]
    assert [c["attempt"] for c in calls] == ["1", "2", "3"]
    # Full jitter: the n-th wait lies in [0, base * 2^(n-1)] (+ scheduling slack).
    gaps = [(b["at_ms"] - a["at_ms"]) / 1000 for a, b in itertools.pairwise(calls)]
    assert gaps[0] <= 0.2 + 0.25
    assert gaps[1] <= 0.4 + 0.25
    events = await stream_events(real_redis, keys.shard(0).events)
    failures = [e for e in events if type(e).__name__ == "DeliveryAttemptFailed"]
    assert [f.attempt for f in failures] == [1, 2]  # type: ignore[attr-defined]
    assert {f.error_class for f in failures} == {"TRANSIENT"}  # type: ignore[attr-defined]


async def test_a_permanent_failure_fails_at_once_into_the_dlq(
    real_redis: Redis, key_prefix: str
) -> None:
    keys, catalog = KeySpace(key_prefix), fast_catalog()
    # Provider texts may quote the address: it is masked before it is stored anywhere.
    body = otp(directives={"fail_permanent": "number +4915112345678 does not exist"})
    delivery_id = (await accept(real_redis, keys, catalog, body, "k"))["deliveries"][0]["id"]
    async with running_worker(real_redis, keys, catalog):
        done = await final_state(real_redis, keys, delivery_id)
        await asyncio.sleep(0.3)  # no retry may follow
    assert done["status"] == "FAILED"
    assert done["error_class"] == "PERMANENT"
    assert len(await sandbox_calls(real_redis, keys)) == 1
    [letter] = await dead_letters(real_redis, keys)
    assert letter["delivery_id"] == delivery_id
    assert letter["error_class"] == "PERMANENT"
    assert letter["last_error"] == done["last_error"] == "number <phone> does not exist"
    assert letter["attempts"] == "1"
    assert letter["type"] == "otp"
    assert letter["channel"] == "SMS"
    assert letter["worker"] == "test-0"
    assert letter["worker_version"] == __version__
    assert int(letter["first_attempt_ms"]) <= int(letter["last_attempt_ms"])
    assert codec.decode_work_item(letter["work"]).delivery_id == delivery_id
    names = [type(e).__name__ for e in await stream_events(real_redis, keys.shard(0).events)]
    assert names[-2:] == ["DeliveryFailed", "DeliveryDeadLettered"]


async def test_a_provider_that_does_not_answer_in_time_is_a_transient_failure(
    real_redis: Redis, key_prefix: str
) -> None:
    text = catalog_text(base=0.02, max_delay=0.05, attempts=2)
    assert "timeout_seconds = 10" in text, "clarion.toml changed: update this test"
    catalog = parse_catalog(text.replace("timeout_seconds = 10", "timeout_seconds = 0.2"), "t")
    keys = KeySpace(key_prefix)
    body = otp(directives={"latency_ms": 3000})
    delivery_id = (await accept(real_redis, keys, catalog, body, "k"))["deliveries"][0]["id"]
    started = time.monotonic()
    async with running_worker(real_redis, keys, catalog):
        done = await final_state(real_redis, keys, delivery_id)
    # Two attempts of 0.2 s each (give or take the watchdog's tick), not two of 3 s.
    assert time.monotonic() - started < 2.5
    assert done["status"] == "FAILED"
    assert done["attempts"] == "2"
    assert done["error_class"] == "TRANSIENT"
    assert done["last_error"] == "sandbox: no answer within 0.2 s"


async def test_exhausted_retries_fail(real_redis: Redis, key_prefix: str) -> None:
    keys, catalog = KeySpace(key_prefix), fast_catalog(base=0.02, max_delay=0.05, attempts=3)
    body = otp(directives={"fail_transient": 99})
    delivery_id = (await accept(real_redis, keys, catalog, body, "k"))["deliveries"][0]["id"]
    async with running_worker(real_redis, keys, catalog):
        done = await final_state(real_redis, keys, delivery_id)
    assert done["status"] == "FAILED"
    assert done["attempts"] == "3"
    assert len(await sandbox_calls(real_redis, keys)) == 3
    assert (await dead_letters(real_redis, keys))[0]["error_class"] == "TRANSIENT"


async def test_a_ttl_shorter_than_the_backoff_expires_without_another_call(
    real_redis: Redis, key_prefix: str
) -> None:
    keys, catalog = KeySpace(key_prefix), fast_catalog(base=4, max_delay=60, attempts=6)
    # TTL 2 s; retries wait up to 4, 8, 16 s (full jitter): one of them lands past the TTL.
    body = otp(directives={"fail_transient": 5}, ttl_seconds=2)
    answer = await accept(real_redis, keys, catalog, body, "k")
    delivery_id = answer["deliveries"][0]["id"]
    async with running_worker(real_redis, keys, catalog):
        done = await final_state(real_redis, keys, delivery_id, within=15)
        await asyncio.sleep(0.3)
    assert done["status"] == "EXPIRED"
    calls = await sandbox_calls(real_redis, keys)
    expires_ms = int(answer["id"][:8] + answer["id"][9:13], 16) + 2000
    assert calls  # it was tried
    assert all(call["at_ms"] < expires_ms for call in calls)  # and never after its TTL


async def test_an_expired_item_is_never_sent(real_redis: Redis, key_prefix: str) -> None:
    keys, catalog = KeySpace(key_prefix), fast_catalog()
    delivery_id = (await accept(real_redis, keys, catalog, otp(ttl_seconds=1), "k"))["deliveries"][
        0
    ]["id"]
    await asyncio.sleep(1.1)  # the OTP goes stale before any worker runs
    async with running_worker(real_redis, keys, catalog):
        done = await final_state(real_redis, keys, delivery_id)
    assert done["status"] == "EXPIRED"
    assert await sandbox_calls(real_redis, keys) == []


async def test_a_bug_in_the_adapter_is_survived_and_dead_lettered(
    real_redis: Redis, key_prefix: str
) -> None:
    keys, catalog = KeySpace(key_prefix), fast_catalog()
    buggy = await accept(real_redis, keys, catalog, otp(directives={"raise_bug": True}), "bug")
    fine = await accept(real_redis, keys, catalog, otp("2"), "fine")
    async with running_worker(real_redis, keys, catalog):
        bug_state = await final_state(real_redis, keys, buggy["deliveries"][0]["id"])
        fine_state = await final_state(real_redis, keys, fine["deliveries"][0]["id"])
    assert bug_state["status"] == "FAILED"
    assert bug_state["error_class"] == "BUG"
    assert fine_state["status"] == "SENT"
    assert (await dead_letters(real_redis, keys))[0]["error_class"] == "BUG"


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


async def test_an_entry_delivered_too_often_is_dead_lettered(
    real_redis: Redis, key_prefix: str
) -> None:
    keys, catalog = KeySpace(key_prefix), fast_catalog()
    delivery_id = (await accept(real_redis, keys, catalog, otp(), "k"))["deliveries"][0]["id"]
    stream = keys.shard(0).work(Priority.HIGH)
    await ensure_group(real_redis, stream, DELIVERY_GROUP)
    # Six consumers read it and vanish, as crashing workers would.
    for n in range(6):
        await real_redis.xreadgroup(
            DELIVERY_GROUP, f"ghost-{n}", {stream: ">" if n == 0 else "0"}, count=1
        )
        await real_redis.xclaim(stream, DELIVERY_GROUP, f"ghost-{n + 1}", 0, [
            (await real_redis.xpending_range(stream, DELIVERY_GROUP, "-", "+", 1))[0]["message_id"]
        ])  # fmt: skip
    async with running_worker(real_redis, keys, catalog):
        await wait_until(lambda: _dlq_size(real_redis, keys, 1), within=10)
    [letter] = await dead_letters(real_redis, keys)
    assert letter["error_class"] == "POISON"
    assert "delivered" in letter["last_error"]
    assert letter["delivery_id"] == delivery_id
    assert (await real_redis.xpending(stream, DELIVERY_GROUP))["pending"] == 0
    assert await sandbox_calls(real_redis, keys) == []
    # The delivery ended: left QUEUED, it would be "in progress" for ever.
    ended = await state(real_redis, keys, delivery_id)
    assert (ended["status"], ended["error_class"]) == ("FAILED", "POISON")


async def test_an_invalid_push_token_is_remembered(real_redis: Redis, key_prefix: str) -> None:
    keys, catalog = KeySpace(key_prefix), fast_catalog()
    body = {
        "recipient": {"id": "u-9", "push_tokens": ["dead-token", "live-token"]},
        "type": "security_alert",
        "data": {"message": "new login", "sandbox": {"PUSH": {"invalid_token": True}}},
        "channels": ["PUSH"],
    }
    first = await accept(real_redis, keys, catalog, body, "a")
    async with running_worker(real_redis, keys, catalog):
        for delivery in first["deliveries"]:
            await final_state(real_redis, keys, delivery["id"])
    # Both tokens were reported dead by this sandbox; the next notification skips them.
    again = {**body, "data": {"message": "again"}}
    second = await accept(real_redis, keys, catalog, again, "b")
    assert {(d["status"], d.get("reason")) for d in second["deliveries"]} == {
        ("SUPPRESSED", "invalid_address")
    }


async def test_a_retry_is_picked_up_soon_after_it_is_due(
    real_redis: Redis, key_prefix: str
) -> None:
    keys, catalog = KeySpace(key_prefix), fast_catalog(base=0.6, max_delay=0.6, attempts=3)
    body = otp(directives={"fail_transient": 1})
    delivery_id = (await accept(real_redis, keys, catalog, body, "k"))["deliveries"][0]["id"]
    async with running_worker(real_redis, keys, catalog):
        await final_state(real_redis, keys, delivery_id)
    first, second = await sandbox_calls(real_redis, keys)
    events = await stream_events(real_redis, keys.shard(0).events)
    [failure] = [e for e in events if type(e).__name__ == "DeliveryAttemptFailed"]
    due_ms = failure.retry_at.timestamp() * 1000  # type: ignore[attr-defined]
    assert second["at_ms"] >= due_ms - 5
    assert second["at_ms"] - due_ms <= 100, f"picked up {second['at_ms'] - due_ms} ms late"
    assert first["outcome"] == "transient"


async def test_a_restarted_consumer_drains_its_own_pending_entries(
    real_redis: Redis, key_prefix: str
) -> None:
    keys, catalog = KeySpace(key_prefix), fast_catalog()
    stream = keys.shard(0).work(Priority.HIGH)
    await ensure_group(real_redis, stream, DELIVERY_GROUP)
    ids = [
        (await accept(real_redis, keys, catalog, otp(str(n)), f"k{n}"))["deliveries"][0]["id"]
        for n in range(5)
    ]
    # "test-0" read them and died before doing anything.
    await real_redis.xreadgroup(DELIVERY_GROUP, "test-0", {stream: ">"}, count=10)
    started = time.monotonic()
    async with running_worker(real_redis, keys, catalog, consumer="test-0"):
        for delivery_id in ids:
            assert (await final_state(real_redis, keys, delivery_id))["status"] == "SENT"
    # Drained at start, not after the lease ran out and the reclaimer found them.
    assert time.monotonic() - started < 1.0


async def test_a_restarted_consumer_sends_each_of_its_pending_entries_once(
    real_redis: Redis, key_prefix: str
) -> None:
    keys, catalog = KeySpace(key_prefix), fast_catalog(idempotent=False)
    stream = keys.shard(0).work(Priority.HIGH)
    await ensure_group(real_redis, stream, DELIVERY_GROUP)
    ids = [
        (await accept(real_redis, keys, catalog, otp(str(n), {"latency_ms": 300}), f"k{n}"))[
            "deliveries"
        ][0]["id"]
        for n in range(5)
    ]
    await real_redis.xreadgroup(DELIVERY_GROUP, "test-0", {stream: ">"}, count=10)
    async with running_worker(real_redis, keys, catalog, consumer="test-0"):
        for delivery_id in ids:
            assert (await final_state(real_redis, keys, delivery_id))["status"] == "SENT"
    # The entries stay pending while their sends are in flight: reading the pending list
    # again from its start would send them again.
    calls = await sandbox_calls(real_redis, keys)
    assert sorted(c["delivery_id"] for c in calls) == sorted(ids)


async def test_two_work_entries_of_one_delivery_in_one_read_send_once(
    real_redis: Redis, key_prefix: str
) -> None:
    keys, catalog = KeySpace(key_prefix), fast_catalog(idempotent=False)
    stream = keys.shard(0).work(Priority.HIGH)
    await ensure_group(real_redis, stream, DELIVERY_GROUP)
    answer = await accept(real_redis, keys, catalog, otp("1", {"latency_ms": 300}), "k1")
    delivery_id = answer["deliveries"][0]["id"]
    # A second entry for the same delivery, as a stale entry left pending by a worker that
    # was stopped and then taken over leaves one beside the current one.
    [(_, fields)] = await real_redis.xrange(stream)
    await real_redis.xadd(stream, fields)
    async with running_worker(real_redis, keys, catalog, consumer="test-0"):
        assert (await final_state(real_redis, keys, delivery_id))["status"] == "SENT"

        async def acknowledged() -> bool:
            return (await real_redis.xpending(stream, DELIVERY_GROUP))["pending"] == 0

        await wait_until(acknowledged)
    calls = await sandbox_calls(real_redis, keys)
    assert [c["delivery_id"] for c in calls] == [delivery_id]


async def test_rate_limited_deliveries_wait_without_counting_an_attempt(
    real_redis: Redis, key_prefix: str
) -> None:
    limit = "rate_limit = { per_second = 5, burst = 1 }"
    keys, catalog = KeySpace(key_prefix), fast_catalog(rate_limit=limit)
    ids = [
        (await accept(real_redis, keys, catalog, otp(str(n)), f"k{n}"))["deliveries"][0]["id"]
        for n in range(4)
    ]
    async with running_worker(real_redis, keys, catalog):
        states = [await final_state(real_redis, keys, d) for d in ids]
    assert {s["status"] for s in states} == {"SENT"}
    assert {s["attempts"] for s in states} == {"1"}
    calls = await sandbox_calls(real_redis, keys)
    assert len(calls) == 4
    span = (calls[-1]["at_ms"] - calls[0]["at_ms"]) / 1000
    assert span >= 0.5  # 4 sends at 5/s with a burst of 1 take at least 0.6 s
    names = [type(e).__name__ for e in await stream_events(real_redis, keys.shard(0).events)]
    assert "DeliveryDeferred" in names


async def test_a_worker_started_while_redis_is_away_waits_for_it(key_prefix: str) -> None:
    # Nothing listens on this port: the worker must keep trying, not exit, and still stop.
    unreachable = Redis.from_url(f"redis://127.0.0.1:{free_port()}/0")
    keys, catalog = KeySpace(key_prefix), fast_catalog()
    try:
        async with running_worker(unreachable, keys, catalog):
            await asyncio.sleep(0.5)
        # Leaving the block stops the worker and awaits run(): a worker that had given up
        # would raise its connection error here.
    finally:
        await unreachable.aclose()
