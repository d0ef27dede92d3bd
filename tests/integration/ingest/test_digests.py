"""Notifications of a digest type at ingest, on real Redis: accepted DIGESTED and joined
before their 202, which names the digest; a repeated request joins nothing twice; a key the
data cannot make is a 422; a join Redis cannot make is a 503, and the retry joins."""

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
from streams.core.errors import Invalid, Unavailable
from streams.core.keys import KeySpace
from tests.conftest import DIGEST
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
    assert await real_redis.hget(home.digest(body["digest"]["id"]), "count") == b"2"


async def test_data_that_cannot_make_the_key_is_refused(real_redis: Redis, key_prefix: str) -> None:
    answer = await ingestor(real_redis, KeySpace(key_prefix)).ingest("shop", "k", comment(text="x"))
    assert isinstance(answer.error, Invalid)
    assert "data: the digest key cannot be made" in str(answer.error)


async def test_a_join_redis_cannot_make_is_a_503_and_the_retry_joins(
    real_redis: Redis, key_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = KeySpace(key_prefix)
    ingest = ingestor(real_redis, keys)

    async def down(*_: object) -> None:
        raise RedisConnectionError("down")

    with monkeypatch.context() as patched:
        patched.setattr("streams.digests.store.join_many", down)
        failed = await ingest.ingest("shop", "k-1", comment(thread="A", text="x"))
    assert isinstance(failed.error, Unavailable)
    retried = await ingest.ingest("shop", "k-1", comment(thread="A", text="x"))
    assert retried.replayed  # accepted the first time, joined now
    assert msgspec.json.decode(retried.response)["digest"]["count"] == 1
