"""The cancellation service on real Redis and PostgreSQL: a delivery whose state left Redis
after it ended is reported as the read model has it, never cancelled; without the read model
such a cancellation is refused rather than guessed; a notification whose record is gone is
answered from the read model; a notification that joined an open digest leaves it and ends
CANCELLED even when the read model already has it DIGESTED."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import asyncpg
import pytest
from redis.asyncio import Redis

from app.cancellations.service import Cancellations, ReadModelNeeded
from app.catalog import parse_catalog
from projections.rows import apply as apply_rows
from projections.rows import rows_of
from streams.core import codec
from streams.core.events import DeliverySent
from streams.core.keys import KeySpace
from streams.delivery.cancellations import CancelledNotification
from tests.integration.delivery_support import accept, catalog_text, fast_catalog

ORDER = {
    "recipient": {"id": "u-1", "email": "anna@example.com"},
    "type": "order_confirmed",
    "channels": ["EMAIL"],
    "data": {"order_id": "A-1"},
}


COMMENT = """
[types.comment]
channels = ["EMAIL"]
priority = "NORMAL"
ttl_seconds = 3600
opt_out = true
digest = { window = "10m", key = "{{ data.thread }}" }

[types.comment.templates.en]
EMAIL = { title = "{{ count }} new", body = "{{ count }} new on {{ key }}" }
"""


def service(redis: Redis, keys: KeySpace, pool: asyncpg.Pool | None) -> Cancellations:
    async def read_model() -> asyncpg.Pool | None:
        return pool

    return Cancellations(
        redis, keys, read_model, state_retention_ms=60_000, released_after_ms=0,
        clock=lambda: datetime.now(UTC),
    )  # fmt: skip


async def project_events(redis: Redis, keys: KeySpace, pool: asyncpg.Pool, *extra: Any) -> None:
    """Everything in the shard's events stream, and ``extra``, into the read model."""
    entries = [(e.decode(), f[b"e"]) for e, f in await redis.xrange(keys.shard(0).events)]
    if extra:
        entries.append(("9999999999999-0", codec.encode_events(list(extra))))
    await apply_rows(pool, "s0", rows_of(0, entries))


async def test_a_delivery_released_after_it_was_sent_is_reported_sent(
    real_redis: Redis, key_prefix: str, pool: asyncpg.Pool
) -> None:
    keys = KeySpace(key_prefix)
    answer = await accept(real_redis, keys, fast_catalog(), ORDER, "k-1")
    [delivery] = answer["deliveries"]
    sent = DeliverySent(
        at=datetime.now(UTC), notification_id=answer["id"], delivery_id=delivery["id"],
        version=2, attempt=1, provider="sandbox", provider_message_id="m-1",
    )  # fmt: skip
    await project_events(real_redis, keys, pool, sent)  # its state is not in Redis
    done = await service(real_redis, keys, pool).cancel_notification("orders", answer["id"])
    assert done is not None
    assert [d.status for d in done.deliveries] == ["SENT"]
    assert not await real_redis.exists(keys.shard(0).delivery(delivery["id"]))


async def test_without_the_read_model_an_old_enough_one_is_refused(
    real_redis: Redis, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix)
    answer = await accept(real_redis, keys, fast_catalog(), ORDER, "k-2")
    with pytest.raises(ReadModelNeeded):
        await service(real_redis, keys, None).cancel_notification("orders", answer["id"])


async def test_a_notification_whose_record_is_gone_is_answered_from_the_read_model(
    real_redis: Redis, key_prefix: str, pool: asyncpg.Pool
) -> None:
    keys = KeySpace(key_prefix)
    answer = await accept(real_redis, keys, fast_catalog(), ORDER, "k-3")
    await project_events(real_redis, keys, pool)
    await real_redis.delete(keys.shard(0).notification(answer["id"]))
    cancellations = service(real_redis, keys, pool)
    done = await cancellations.cancel_notification("orders", answer["id"])
    assert done is not None
    # Still queued as far as anyone knows: cancelled like any other.
    assert [(d.id, d.status) for d in done.deliveries] == [
        (answer["deliveries"][0]["id"], "CANCELLED")
    ]
    assert await cancellations.cancel_notification("auth", answer["id"]) is None
    found = await real_redis.hgetall(keys.shard(0).delivery(answer["deliveries"][0]["id"]))
    assert found[b"status"] == b"CANCELLED"


async def test_a_read_model_failing_under_the_call_is_unavailable_not_a_bug(
    real_redis: Redis, key_prefix: str, database_url: str
) -> None:
    keys = KeySpace(key_prefix)
    answer = await accept(real_redis, keys, fast_catalog(), ORDER, "k-4")
    closed = await asyncpg.create_pool(database_url, min_size=1, max_size=1)
    await closed.close()  # as a crashed PostgreSQL leaves a pool: every call fails
    with pytest.raises(ReadModelNeeded):
        await service(real_redis, keys, closed).cancel_notification("orders", answer["id"])
    await real_redis.delete(keys.shard(0).notification(answer["id"]))
    with pytest.raises(ReadModelNeeded):
        await service(real_redis, keys, closed).cancel_notification("orders", answer["id"])


async def two_comments_digested(
    redis: Redis, keys: KeySpace, pool: asyncpg.Pool
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Two comments of one thread accepted into one open digest and projected (the read
    model has both DIGESTED): the one kept, and the one to cancel."""
    catalog = parse_catalog(catalog_text() + COMMENT, "digests.toml")
    comment = {"recipient": {"id": "u-1", "email": "a@example.com"}, "type": "comment"}
    kept = await accept(redis, keys, catalog, comment | {"data": {"thread": "A"}}, "k-1")
    gone = await accept(redis, keys, catalog, comment | {"data": {"thread": "A"}}, "k-2")
    await project_events(redis, keys, pool)
    return kept, gone


async def assert_left_its_digest(
    redis: Redis, keys: KeySpace, done: CancelledNotification | None, kept: dict[str, Any]
) -> None:
    """The cancelled comment ended CANCELLED, and only ``kept`` is left in the digest."""
    assert done is not None
    assert [d.status for d in done.deliveries] == ["CANCELLED"]
    home = keys.home_of_recipient("u-1")
    items = await redis.lrange(home.digest_items(kept["digest"]["id"]), 0, -1)
    assert [item.partition(b" ")[0] for item in items] == [kept["id"].encode()]


async def test_a_digested_one_the_read_model_has_leaves_its_digest_cancelled(
    real_redis: Redis, key_prefix: str, pool: asyncpg.Pool
) -> None:
    """Old enough for the read model to be asked (``released_after_ms`` 0, as any joined
    notification of a long window is after the retention): leaving the digest must still
    cancel it, not leave it DIGESTED and in no digest."""
    keys = KeySpace(key_prefix)
    kept, gone = await two_comments_digested(real_redis, keys, pool)
    done = await service(real_redis, keys, pool).cancel_notification("orders", gone["id"])
    await assert_left_its_digest(real_redis, keys, done, kept)


async def test_a_digested_one_whose_record_left_redis_still_leaves_its_open_digest(
    real_redis: Redis, key_prefix: str, pool: asyncpg.Pool
) -> None:
    """Its record gone with its idempotency key (a TTL shorter than a daily digest's wait):
    the read model names its digest, which it leaves while open, and it ends CANCELLED
    instead of going out inside the digest."""
    keys = KeySpace(key_prefix)
    kept, gone = await two_comments_digested(real_redis, keys, pool)
    await real_redis.delete(keys.notification_shard(gone["id"]).notification(gone["id"]))
    done = await service(real_redis, keys, pool).cancel_notification("orders", gone["id"])
    await assert_left_its_digest(real_redis, keys, done, kept)
