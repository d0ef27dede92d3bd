"""What a read does to its notification's steps, on real Redis: only the steps of a type
whose steps wait on a read are brought forward, found by the notification's record; a
notification whose record is gone, or a Redis that fails, leaves them to be decided when they
come due, and the read stands."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from app.catalog import parse_catalog
from app.inbox.read_steps import StepsOnRead
from streams.core.keys import KeySpace
from streams.core.records import DeliveryAtAcceptance, NotificationRecord, encode_record
from streams.core.vocabulary import Priority
from streams.delivery.delayed import delayed_member
from streams.inbox.messages import InboxMessage
from tests.integration.delivery_support import catalog_text

NOW = 1_000_000
STEPS = """
[types.comment]
channels = ["IN_APP", "PUSH", "EMAIL"]
priority = "NORMAL"
ttl_seconds = 3600
opt_out = true
steps = [
  { channel = "IN_APP" },
  { channel = "PUSH", after = "15m", unless = "read" },
  { channel = "EMAIL", after = "30m" },
]

[types.comment.templates.en]
IN_APP = { title = "New comment", body = "x" }
PUSH = { title = "New comment", body = "x" }
EMAIL = { title = "New comment", body = "x" }
"""
CATALOG = parse_catalog(catalog_text() + STEPS, "steps.toml")


def message(notification_type: str = "comment", notification_id: str = "n-1") -> InboxMessage:
    return InboxMessage(
        id="in-app", notification_id=notification_id, type=notification_type, title="t",
        body="b", created_at=datetime.now(UTC),
    )  # fmt: skip


async def waiting(redis: Redis, keys: KeySpace) -> None:
    """Notification n-1's record and its two later steps' ``delayed`` members."""
    shard = keys.shard(0)
    deliveries = [
        DeliveryAtAcceptance(id="in-app", channel="IN_APP", status="QUEUED"),
        DeliveryAtAcceptance(id="push", channel="PUSH", status="SCHEDULED", reason="step",
                             due_ms=NOW + 900_000),
        DeliveryAtAcceptance(id="email", channel="EMAIL", status="SCHEDULED", reason="step",
                             due_ms=NOW + 1_800_000),
    ]  # fmt: skip
    record = NotificationRecord(
        id="n-1", type="comment", priority=Priority.NORMAL, recipient_id="r", producer="p",
        created_ms=NOW, expires_ms=NOW + 3_600_000, deliveries=deliveries,
    )  # fmt: skip
    await redis.set(shard.notification("n-1"), encode_record(record))
    for delivery in deliveries[1:]:
        item = f'["{delivery.id}","n-1","comment","{delivery.channel}"]'.encode()
        await redis.zadd(shard.delayed, {delayed_member(Priority.NORMAL, item): delivery.due_ms})


async def test_a_read_brings_forward_only_the_steps_that_wait_on_one(
    real_redis: Redis, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix)
    await waiting(real_redis, keys)
    on_read = StepsOnRead(real_redis, CATALOG, lambda: NOW)
    assert await on_read(keys.shard(0), [message()]) == 1
    scores = sorted(
        s for _, s in await real_redis.zrange(keys.shard(0).delayed, 0, -1, withscores=True)
    )
    assert scores == [NOW, NOW + 1_800_000]  # the EMAIL step has no unless: it keeps its time


async def test_other_types_and_gone_records_bring_nothing_forward(
    real_redis: Redis, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix)
    await waiting(real_redis, keys)
    on_read = StepsOnRead(real_redis, CATALOG, lambda: NOW)
    assert await on_read(keys.shard(0), [message("order_confirmed")]) == 0
    assert await on_read(keys.shard(0), [message(notification_id="n-gone")]) == 0
    assert await real_redis.zcount(keys.shard(0).delayed, NOW, NOW) == 0


async def test_a_redis_failure_leaves_the_steps_to_their_time(
    real_redis: Redis, key_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = KeySpace(key_prefix)

    async def broken(*_: object) -> None:
        raise RedisConnectionError("down")

    monkeypatch.setattr("app.inbox.read_steps.records_of", broken)
    on_read = StepsOnRead(real_redis, CATALOG, lambda: NOW)
    assert await on_read(keys.shard(0), [message()]) == 0
