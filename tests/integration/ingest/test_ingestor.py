"""The ingestor against real Redis and fakeredis: settings that appear while it ingests,
concurrent accepts of one key, and a Redis that refuses the write."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import msgspec
import structlog
from redis.asyncio import Redis

from app.catalog import Catalog
from app.ingest.answers import IngestAnswer
from app.ingest.fanout import Planner
from app.ingest.high_first import HighFirst
from app.ingest.ingestor import WRITE_CHUNK, Ingestor
from app.ingest.requests import NotificationRequest, Recipient
from streams.core.errors import Unavailable, kind_of
from streams.core.events import PreferenceEntry
from streams.core.keys import KeySpace
from streams.core.vocabulary import Priority
from streams.recipients.settings import RecipientSettingsStore
from tests.conftest import DIGEST, REQUEST, Clock
from tests.servers import redis_server


async def test_ingest_applies_settings_that_appear_during_ingest(
    redis: Redis, key_prefix: str, catalog: Catalog, clock: Clock
) -> None:
    keys = KeySpace(key_prefix)
    store = RecipientSettingsStore(redis, keys)
    await store.set_preferences(
        "user-5", [PreferenceEntry(type="marketing", channel="PUSH", enabled=False)]
    )
    ingestor = Ingestor(redis, keys, Planner(catalog, DIGEST), 3600, clock)
    outcome = await ingestor.ingest("orders", "k", REQUEST)
    assert outcome.accepted
    assert b'"PUSH","status":"SUPPRESSED"' in outcome.response
    # The key is done now: the same request is answered again, no 409.
    again = await ingestor.ingest("orders", "k", REQUEST)
    assert again.replayed
    assert again.response == outcome.response


async def test_concurrent_accepts_with_settings_create_one_notification(
    redis: Redis, key_prefix: str, catalog: Catalog, clock: Clock
) -> None:
    keys = KeySpace(key_prefix)
    await RecipientSettingsStore(redis, keys).set_preferences(
        "user-5", [PreferenceEntry(type="marketing", channel="PUSH", enabled=False)]
    )
    ingestor = Ingestor(redis, keys, Planner(catalog, DIGEST), 3600, clock)
    outcomes = await asyncio.gather(*(ingestor.ingest("orders", "k", REQUEST) for _ in range(30)))
    assert {said(o) for o in outcomes} <= {"accepted", "Conflict"}
    assert len({o.response for o in outcomes if o.accepted}) == 1
    assert await redis.xlen(keys.shard(0).work(Priority.LOW)) == 1


async def test_a_redis_out_of_memory_is_503_without_a_log_line_per_notification(
    tmp_path: Path, catalog: Catalog, clock: Clock
) -> None:
    """Each refused notification was logged as a broken key: 3,800 error lines in 30 s."""
    with redis_server(tmp_path) as url:
        redis = Redis.from_url(url)
        try:
            await redis.set("ballast", "x" * 100_000)
            await redis.config_set("maxmemory", "1")
            ingestor = Ingestor(redis, KeySpace("oom"), Planner(catalog, DIGEST), 3600, clock)
            with structlog.testing.capture_logs() as logs:
                outcome = await ingestor.ingest("orders", "k", REQUEST)
            await redis.config_set("maxmemory", "0")
            assert await redis.xlen(KeySpace("oom").shard(0).events) == 0  # nothing written
        finally:
            await redis.aclose()
    assert isinstance(outcome.error, Unavailable)
    assert "refused" in outcome.error.detail
    assert [line for line in logs if line["event"] == "ingest.key_broken"] == []


async def test_a_key_of_the_wrong_type_is_503_and_logged_for_an_operator(
    real_redis: Redis, key_prefix: str, catalog: Catalog, clock: Clock
) -> None:
    keys = KeySpace(key_prefix)
    await real_redis.hset(keys.shard(0).idempotency("orders", "k"), "not", "a string")
    ingestor = Ingestor(real_redis, keys, Planner(catalog, DIGEST), 3600, clock)
    with structlog.testing.capture_logs() as logs:
        outcome = await ingestor.ingest("orders", "k", REQUEST)
    assert isinstance(outcome.error, Unavailable)
    [broken] = [line for line in logs if line["event"] == "ingest.key_broken"]
    assert broken["error"].startswith("WRONGTYPE")


async def test_settings_read_beforehand_plan_each_notification_once(
    real_redis: Redis, key_prefix: str, catalog: Catalog, clock: Clock
) -> None:
    keys = KeySpace(key_prefix, shards=2)
    store = RecipientSettingsStore(real_redis, keys)
    await store.set_preferences(
        "user-5", [PreferenceEntry(type="marketing", channel="PUSH", enabled=False)]
    )
    ingestor = Ingestor(real_redis, keys, Planner(catalog, DIGEST), 3600, clock)
    writes = 0
    write = ingestor.writer.write

    async def counted(items: Any, **options: Any) -> Any:
        nonlocal writes
        writes += 1
        return await write(items, **options)

    ingestor.writer.write = counted  # type: ignore[method-assign]
    other = msgspec.structs.replace(
        REQUEST, recipient=Recipient(id="user-6", email="b@example.com")
    )
    entries = [("k1", REQUEST), ("k2", other)]
    known = await ingestor.read_settings("orders", entries)
    assert set(known) == {"user-5"}  # a recipient without settings is not listed
    outcomes = await ingestor.ingest_many("orders", entries, known)
    assert writes == 1  # no second round for the recipient with settings
    assert b'"PUSH","status":"SUPPRESSED"' in outcomes[0].response
    assert [said(o) for o in outcomes] == ["accepted", "accepted"]


def said(answer: IngestAnswer) -> str:
    """What ``answer`` says: accepted, or the kind of error it was refused with."""
    if answer.error is None:
        return "accepted"
    kind = kind_of(answer.error)
    return "no kind" if kind is None else kind.__name__


def _batch(count: int) -> list[tuple[str, NotificationRequest | IngestAnswer]]:
    return [
        (f"k{i}", msgspec.structs.replace(REQUEST, recipient=Recipient(id=f"user-{i}")))
        for i in range(count)
    ]


async def test_a_batch_waits_between_its_slices_while_a_high_request_is_served(
    redis: Redis, key_prefix: str, catalog: Catalog, clock: Clock
) -> None:
    keys = KeySpace(key_prefix)
    ingestor = Ingestor(redis, keys, Planner(catalog, DIGEST), 3600, clock)
    ingestor.high_first = HighFirst(max_wait_s=30)
    with ingestor.high_first.serving():
        batch = asyncio.create_task(ingestor.ingest_many("orders", _batch(300)))
        await asyncio.sleep(0.3)
        assert not batch.done()
        assert await redis.xlen(keys.shard(0).events) == 0  # it stopped while planning
    async with asyncio.timeout(10):
        outcomes = await batch
    assert [said(o) for o in outcomes] == ["accepted"] * 300


async def test_a_batch_is_written_in_parts(
    redis: Redis, key_prefix: str, catalog: Catalog, clock: Clock
) -> None:
    keys = KeySpace(key_prefix)
    ingestor = Ingestor(redis, keys, Planner(catalog, DIGEST), 3600, clock)
    sizes: list[int] = []
    write = ingestor.writer.write

    async def recorded(items: Any, *, alone: bool = False) -> Any:
        sizes.append(len(items))
        return await write(items, alone=alone)

    ingestor.writer.write = recorded  # type: ignore[method-assign]
    outcomes = await ingestor.ingest_many("orders", _batch(WRITE_CHUNK * 2 + 7))
    assert sizes == [WRITE_CHUNK, WRITE_CHUNK, 7]
    assert [said(o) for o in outcomes] == ["accepted"] * (WRITE_CHUNK * 2 + 7)
    again = await ingestor.ingest_many("orders", _batch(WRITE_CHUNK * 2 + 7))
    assert all(o.replayed for o in again)  # every part was written
    assert [o.response for o in again] == [o.response for o in outcomes]
