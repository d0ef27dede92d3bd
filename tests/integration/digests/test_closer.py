"""Closing due digests on real Redis: a due digest becomes one notification of its type with
its items, count and key, made once however many closers close it at once; a digest whose
every item left closes without one; one the ingest refuses for good is closed and logged."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
from redis.asyncio import Redis
from structlog.testing import capture_logs

from app.catalog import parse_catalog
from app.digests.closer import DigestCloser
from app.ingest.fanout import Planner
from app.ingest.ingestor import Ingestor
from app.ingest.requests import MAX_DATA_DEPTH, NotificationRequest
from streams.core.errors import Invalid
from streams.core.events import NotificationAccepted
from streams.core.keys import KeySpace
from streams.core.records import decode_record
from streams.digests import closing, store
from streams.digests.ids import digest_key
from tests.conftest import DIGEST, stream_events
from tests.integration.delivery_support import catalog_text

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
CATALOG = parse_catalog(catalog_text() + COMMENT, "digests.toml")


def comment(
    text: str, *, to: str = "u-1", data: dict[str, Any] | None = None
) -> NotificationRequest:
    body = {
        "recipient": {"id": to, "email": f"{to}@example.com"},
        "type": "comment",
        "data": data if data is not None else {"thread": "A", "text": text},
    }
    return msgspec.convert(body, NotificationRequest)


async def joined_digest(redis: Redis, keys: KeySpace, ingestor: Ingestor, count: int) -> str:
    answers = [await ingestor.ingest("shop", f"k-{n}", comment(f"t{n}")) for n in range(count)]
    ids = {msgspec.json.decode(a.response)["digest"]["id"] for a in answers}
    assert len(ids) == 1
    return ids.pop()


def closer(redis: Redis, keys: KeySpace, now_ms: int) -> DigestCloser:
    ingestor = Ingestor(redis, keys, Planner(CATALOG, DIGEST), 3600)
    return DigestCloser(redis, keys, ingestor, now_ms=lambda: now_ms)


async def made(redis: Redis, keys: KeySpace, digest: str) -> dict[str, Any]:
    """The notification a digest was closed into, as its record says, with its data."""
    home = keys.home_of_recipient("u-1")
    notification_id = (await redis.hget(home.digest(digest), "notification_id") or b"").decode()
    record = decode_record(
        await redis.get(keys.notification_shard(notification_id).notification(notification_id))
    )
    return {"id": notification_id, "record": record}


async def test_a_due_digest_becomes_one_notification_however_many_close_it(
    real_redis: Redis, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix)
    ingestor = Ingestor(real_redis, keys, Planner(CATALOG, DIGEST), 3600)
    digest = await joined_digest(real_redis, keys, ingestor, 3)
    home = keys.home_of_recipient("u-1")
    assert await closer(real_redis, keys, 0).close_due(home) == 0  # not due yet
    later = 10**13
    closed = await asyncio.gather(
        *(closer(real_redis, keys, later).close(home, digest) for _ in range(3))
    )
    assert any(closed)
    result = await made(real_redis, keys, digest)
    record = result["record"]
    assert (record.type, record.producer) == ("comment", "shop")
    assert [d.status for d in record.deliveries] == ["QUEUED"]  # sent like any other
    # Made under the digest's key: one notification, whichever closer made it.
    accepted = [
        e for e in await stream_events(real_redis, keys.shard(0).events)
        if isinstance(e, NotificationAccepted) and e.idempotency_key == digest_key(digest)
    ]  # fmt: skip
    assert [e.notification_id for e in accepted] == [result["id"]]
    assert await closing.due(real_redis, home, later) == []


async def test_a_digest_whose_items_all_left_closes_without_a_notification(
    real_redis: Redis, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix)
    ingestor = Ingestor(real_redis, keys, Planner(CATALOG, DIGEST), 3600)
    digest = await joined_digest(real_redis, keys, ingestor, 1)
    home = keys.home_of_recipient("u-1")
    [entry] = await real_redis.lrange(home.digest_items(digest), 0, -1)
    nid = entry.decode().partition(" ")[0]
    assert await store.leave(real_redis, home, digest, nid) == "LEFT"
    assert await closer(real_redis, keys, 10**13).close(home, digest)
    fields = await real_redis.hgetall(home.digest(digest))
    assert (fields[b"state"], fields[b"notification_id"]) == (b"closed", b"")


async def test_a_digest_the_ingest_refuses_for_good_is_closed_not_retried(
    real_redis: Redis, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix)
    ingestor = Ingestor(real_redis, keys, Planner(CATALOG, DIGEST), 3600)
    digest = await joined_digest(real_redis, keys, ingestor, 1)
    home = keys.home_of_recipient("u-1")
    # The type left the catalog since (a deployment without it).
    without = parse_catalog(catalog_text(), "without.toml")
    refusing = DigestCloser(
        real_redis, keys, Ingestor(real_redis, keys, Planner(without, DIGEST), 3600),
        now_ms=lambda: 10**13,
    )  # fmt: skip
    assert await refusing.close(home, digest)
    assert await real_redis.hget(home.digest(digest), "state") == b"closed"
    assert await closing.due(real_redis, home, 10**13) == []


def nested(levels: int) -> dict[str, Any]:
    """Data whose objects nest ``levels`` levels deep (the data itself the first)."""
    data: dict[str, Any] = {"thread": "A"}
    inner = data
    for _ in range(levels - 1):
        inner["in"] = {}
        inner = inner["in"]
    return data


async def test_data_as_deep_as_a_digest_allows_closes_and_deeper_is_refused_at_the_door(
    real_redis: Redis, key_prefix: str
) -> None:
    """A digest's notification holds each item two levels deeper than it came: a deeper
    item would make a notification the ingest refuses, a digest that came back forever."""
    keys = KeySpace(key_prefix)
    ingestor = Ingestor(real_redis, keys, Planner(CATALOG, DIGEST), 3600)
    deepest = comment("", data=nested(MAX_DATA_DEPTH - 2))
    too_deep = comment("", data=nested(MAX_DATA_DEPTH - 1))
    refused = await ingestor.ingest("shop", "k-deep", too_deep)
    assert isinstance(refused.error, Invalid)  # a 422 naming the limit
    assert f"at most {MAX_DATA_DEPTH - 2} levels deep" in str(refused.error)
    accepted = await ingestor.ingest("shop", "k-ok", deepest)
    digest = msgspec.json.decode(accepted.response)["digest"]["id"]
    home = keys.home_of_recipient("u-1")
    assert await closer(real_redis, keys, 10**13).close(home, digest)
    result = await made(real_redis, keys, digest)
    assert result["record"].type == "comment"


async def test_a_digest_that_cannot_be_made_is_closed_not_retried_and_spares_its_batch(
    real_redis: Redis, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix)
    ingestor = Ingestor(real_redis, keys, Planner(CATALOG, DIGEST), 3600)
    broken = await joined_digest(real_redis, keys, ingestor, 1)
    home = keys.home_of_recipient("u-1")
    await real_redis.rpush(home.digest_items(broken), "0190a1b2-c3d4-7000-8000-000000000000 {no")
    other = await ingestor.ingest("shop", "k-u2", comment("", to="u-2", data={"thread": "B"}))
    fine = msgspec.json.decode(other.response)["digest"]["id"]
    with capture_logs() as logs:
        assert await closer(real_redis, keys, 10**13).close_due(home) == 2
    assert await real_redis.hget(home.digest(broken), "notification_id") == b""
    assert [e["digest_id"] for e in logs if e["event"] == "digests.unmakeable"] == [broken]
    assert (await made(real_redis, keys, fine))["record"].type == "comment"
    assert await closing.due(real_redis, keys.home_of_recipient("u-2"), 10**13) == []
