"""Provider feedback in Redis: a callback's items go into the inbox with its replay guard in
one step (a replay is refused and appends nothing); applying feedback sets the delivery's
state, appends its event and marks its id, so applying it again is a no-op, and a delivery
changed since it was read is left for another read."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from redis.asyncio import Redis

from streams.core import scripts
from streams.core.events import ProviderFeedbackReceived
from streams.core.keys import KeySpace
from streams.feedback.store import Feedback, Inbox, VerifiedCallback, decode, feedback_apply_call
from tests.conftest import stream_events

ITEM = Feedback(provider="sms", feedback_id="SM1:delivered:", message_id="SM1", kind="delivered")


async def test_a_callback_is_taken_once(real_redis: Redis, key_prefix: str) -> None:
    keys = KeySpace(key_prefix)
    inbox = Inbox(real_redis, keys)
    assert await inbox.take(VerifiedCallback("sms", "SM1:delivered:", 60_000, [ITEM, ITEM]))
    assert not await inbox.take(VerifiedCallback("sms", "SM1:delivered:", 60_000, [ITEM]))
    entries = await real_redis.xrange(keys.feedback_inbox)
    assert [decode(fields[b"f"]) for _, fields in entries] == [ITEM, ITEM]
    ttl = await real_redis.pttl(keys.feedback_seen("sms", "SM1:delivered:"))
    assert 0 < ttl <= 60_000
    # Another provider's callback with the same key is another callback.
    assert await inbox.take(VerifiedCallback("mail", "SM1:delivered:", 60_000, []))


async def test_concurrent_callbacks_share_calls_and_each_is_answered(
    real_redis: Redis, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix)
    inbox = Inbox(real_redis, keys)
    callbacks = [VerifiedCallback("sms", f"k{n % 50}", 60_000, [ITEM]) for n in range(100)]
    taken = await asyncio.gather(*(inbox.take(callback) for callback in callbacks))
    assert sum(taken) == 50  # each key once, its repeats refused
    assert await real_redis.xlen(keys.feedback_inbox) == 50


def event(version: int) -> ProviderFeedbackReceived:
    return ProviderFeedbackReceived(
        at=datetime.now(UTC), notification_id="n-1", delivery_id="d-1", version=version,
        feedback="delivered", provider="sms", status="DELIVERED", feedback_id="f-1",
    )  # fmt: skip


async def test_feedback_is_applied_once_and_only_to_the_version_read(
    real_redis: Redis, key_prefix: str
) -> None:
    shard = KeySpace(key_prefix).shard(0)
    await real_redis.hset(shard.delivery("d-1"), mapping={"status": "SENT", "version": 3})
    fields = {"status": "DELIVERED", "version": 4}
    moved = feedback_apply_call(shard, [("f-1", 2, fields, event(3))], 60_000)
    assert await scripts.FEEDBACK_APPLY(real_redis, *moved) == [b"MOVED"]
    call = feedback_apply_call(shard, [("f-1", 3, fields, event(4))], 60_000)
    assert await scripts.FEEDBACK_APPLY(real_redis, *call) == [b"OK"]
    assert await scripts.FEEDBACK_APPLY(real_redis, *call) == [b"DUP"]
    stored = await real_redis.hgetall(shard.delivery("d-1"))
    assert (stored[b"status"], stored[b"version"], stored[b"fb:f-1"]) == (b"DELIVERED", b"4", b"1")
    assert 0 < await real_redis.pttl(shard.delivery("d-1")) <= 60_000
    assert [type(e) for e in await stream_events(real_redis, shard.events)] == [
        ProviderFeedbackReceived
    ]


async def test_feedback_for_a_state_long_gone_writes_it_anew(
    real_redis: Redis, key_prefix: str
) -> None:
    shard = KeySpace(key_prefix).shard(0)
    call = feedback_apply_call(
        shard, [("f-1", 5, {"status": "DELIVERED", "version": 6}, event(6))], 1000
    )
    assert await scripts.FEEDBACK_APPLY(real_redis, *call) == [b"OK"]
    assert await real_redis.hget(shard.delivery("d-1"), "status") == b"DELIVERED"
