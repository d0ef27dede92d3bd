"""Notifications of a digest type at ingest, on real Redis: accepted DIGESTED and joined
before their 202, which names the digest; a repeated request joins nothing twice; a key the
data cannot make is a 422; a join (or its event) Redis cannot make is a 503, and the retry
joins; joined as accepted on the recipient's home shard, after elsewhere; a process that
guesses the open digest wrong is sent to the right one; a digest that keeps changing under
a join is a conflict to retry."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from app.catalog import Catalog, parse_catalog
from app.ingest.fanout import Planner
from app.ingest.ingestor import Ingestor
from app.ingest.requests import NotificationRequest
from streams.core.errors import Conflict, Invalid, Unavailable
from streams.core.events import NotificationDigested
from streams.core.keys import KeySpace
from streams.core.records import decode_record
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


def repeated_id(response: bytes) -> str:
    return msgspec.json.decode(response)["id"]  # type: ignore[no-any-return]


def catalog() -> Catalog:
    return parse_catalog(catalog_text() + COMMENT, "digests.toml")


def comment(**data: Any) -> NotificationRequest:
    return msgspec.convert(
        {"recipient": {"id": "u-1", "email": "a@example.com"}, "type": "comment", "data": data},
        NotificationRequest,
    )


def ingestor(redis: Redis, keys: KeySpace) -> Ingestor:
    return Ingestor(redis, keys, Planner(catalog(), DIGEST), 3600)


async def test_accepted_digested_and_joined_before_the_answer(
    real_redis: Redis, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix)
    ingest = ingestor(real_redis, keys)
    first = await ingest.ingest("shop", "k-1", comment(thread="A", text="x"))
    body = msgspec.json.decode(first.response)
    assert [d["status"] for d in body["deliveries"]] == ["DIGESTED"]
    assert body["digest"]["count"] == 1
    second = msgspec.json.decode(
        (await ingest.ingest("shop", "k-2", comment(thread="A", text="y"))).response
    )
    assert second["digest"]["id"] == body["digest"]["id"]
    assert second["digest"]["count"] == 2
    # The same request again: answered as before, joined once.
    repeated = await ingest.ingest("shop", "k-1", comment(thread="A", text="x"))
    assert repeated.replayed
    assert msgspec.json.decode(repeated.response)["digest"]["id"] == body["digest"]["id"]
    home = keys.home_of_recipient("u-1")
    assert await real_redis.llen(home.digest_items(body["digest"]["id"])) == 2


async def test_data_that_cannot_make_the_key_is_refused(real_redis: Redis, key_prefix: str) -> None:
    answer = await ingestor(real_redis, KeySpace(key_prefix)).ingest("shop", "k", comment(text="x"))
    assert isinstance(answer.error, Invalid)
    assert "data: the digest key cannot be made" in str(answer.error)


async def test_a_join_whose_event_redis_cannot_write_is_a_503_and_the_retry_records_it(
    real_redis: Redis, key_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = KeySpace(key_prefix)
    ingest = ingestor(real_redis, keys)

    async def down(*_: object) -> None:
        raise RedisConnectionError("down")

    with monkeypatch.context() as patched:
        patched.setattr("streams.digests.store.record_joins", down)
        failed = await ingest.ingest("shop", "k-1", comment(thread="A", text="x"))
    assert isinstance(failed.error, Unavailable)
    retried = await ingest.ingest("shop", "k-1", comment(thread="A", text="x"))
    assert retried.replayed  # accepted and joined the first time, its event written now
    joined = msgspec.json.decode(retried.response)
    assert joined["digest"]["count"] == 1
    recorded = [
        event for event in await stream_events(real_redis, keys.shard(0).events)
        if isinstance(event, NotificationDigested)
    ]  # fmt: skip
    assert [(e.notification_id, e.digest_id) for e in recorded] == [
        (joined["id"], joined["digest"]["id"])
    ]


def key_elsewhere(keys: KeySpace, recipient_id: str) -> str:
    """An idempotency key whose notification is ingested on another shard than the
    recipient's home."""
    home = keys.home_of_recipient(recipient_id).shard
    return next(
        key for key in (f"k-{n}" for n in range(100)) if keys.for_ingest("shop", key).shard != home
    )


async def test_on_another_shard_than_its_recipients_home_it_joins_after_and_a_failure_is_a_503(
    real_redis: Redis, key_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = KeySpace(key_prefix, shards=4)
    ingest = ingestor(real_redis, keys)
    key = key_elsewhere(keys, "u-1")

    async def down(*_: object) -> None:
        raise RedisConnectionError("down")

    with monkeypatch.context() as patched:
        patched.setattr("streams.digests.store.join_many", down)
        failed = await ingest.ingest("shop", key, comment(thread="A", text="x"))
    assert isinstance(failed.error, Unavailable)
    retried = await ingest.ingest("shop", key, comment(thread="A", text="x"))
    assert retried.replayed  # accepted the first time, joined now
    joined = msgspec.json.decode(retried.response)["digest"]
    assert joined["count"] == 1
    home = keys.home_of_recipient("u-1")
    assert await real_redis.llen(home.digest_items(joined["id"])) == 1
    # One on the home shard joins the same digest as it is accepted.
    home_key = next(f"h-{n}" for n in range(100) if keys.for_ingest("shop", f"h-{n}") == home)
    here = await ingest.ingest("shop", home_key, comment(thread="A", text="y"))
    assert here.joined is not None
    assert msgspec.json.decode(here.response)["digest"] == {**joined, "count": 2}


async def test_a_process_that_guesses_wrong_is_sent_to_the_digest_open_now(
    real_redis: Redis, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix)
    two_items = COMMENT.replace('thread }}" }', 'thread }}", max_items = 2 }')
    two = parse_catalog(catalog_text() + two_items, "two.toml")
    first, second = (Ingestor(real_redis, keys, Planner(two, DIGEST), 3600) for _ in range(2))

    async def digest_of(ingest: Ingestor, key: str) -> dict[str, Any]:
        answer = await ingest.ingest("shop", key, comment(thread="A", text=key))
        assert answer.joined is not None  # joined by the ingest script itself
        return msgspec.json.decode(answer.response)["digest"]  # type: ignore[no-any-return]

    opened = await digest_of(first, "k-1")
    # The second process has seen no digest open: it looks the open one up, and fills it (two
    # items).
    filled = await digest_of(second, "k-2")
    assert (filled["id"], filled["count"]) == (opened["id"], 2)
    # The first still takes the full one for open: sent back, it opens a new one.
    reopened = await digest_of(first, "k-3")
    assert reopened["id"] != opened["id"]
    assert reopened["count"] == 1
    items = await real_redis.lrange(keys.shard(0).digest_items(opened["id"]), 0, -1)
    assert len(items) == 2
    # A request answered again after its digest filled: its record names the digest it
    # joined, which the answer gives; it joins neither that one nor the one open now again.
    repeated = await second.ingest("shop", "k-2", comment(thread="A", text="k-2"))
    assert repeated.replayed
    assert msgspec.json.decode(repeated.response)["digest"] == {**filled, "count": 2}
    assert await real_redis.llen(keys.shard(0).digest_items(opened["id"])) == 2
    assert await real_redis.llen(keys.shard(0).digest_items(reopened["id"])) == 1
    record = await real_redis.get(keys.shard(0).notification(repeated_id(repeated.response)))
    assert decode_record(record).digest_id == opened["id"]


async def test_a_digest_that_keeps_changing_under_a_join_is_a_conflict_and_nothing_is_written(
    real_redis: Redis, key_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = KeySpace(key_prefix)
    shard = keys.shard(0)
    # Every new digest it asks for exists already (sealed, say), round after round.
    monkeypatch.setattr("streams.digests.store.digest_id", lambda *_: "d-taken")
    await real_redis.hset(shard.digest("d-taken"), "state", "sealed")
    answer = await ingestor(real_redis, keys).ingest("shop", "k-1", comment(thread="A", text="x"))
    assert isinstance(answer.error, Conflict)
    assert str(answer.error).startswith("digest: it kept changing while joining")
    assert await real_redis.exists(shard.digest_items("d-taken")) == 0
    assert await stream_events(real_redis, shard.events) == []  # nothing accepted
