"""Fair shares at ingest and in the feeder, against real Redis: a full stream queues each
producer's items apart, and the feeder lets them in by their weights."""

from __future__ import annotations

import msgspec
from redis.asyncio import Redis

from app.catalog import Catalog, parse_catalog
from app.ingest.fanout import Planner
from app.ingest.ingestor import Ingestor
from app.ingest.requests import NotificationRequest
from streams.core import codec
from streams.core.keys import KeySpace
from streams.core.vocabulary import Priority
from streams.delivery.fairness import feed, waiting_producers
from tests.conftest import DIGEST, REPO, REQUEST, Clock

EMAIL_ONLY = msgspec.structs.replace(REQUEST, channels=["EMAIL"])  # LOW, one work item


def small_buffer(weights: str = "") -> Catalog:
    text = (
        REPO / "clarion.toml"
    ).read_text() + f"\n[fairness]\nbuffer = 10\nquantum = 2\n{weights}"
    return parse_catalog(text, "fair.toml")


async def ingest(ingestor: Ingestor, producer: str, count: int, tag: str) -> None:
    entries = [(f"{tag}-{n}", EMAIL_ONLY) for n in range(count)]
    answers = await ingestor.ingest_many(producer, entries)
    assert all(answer.accepted for answer in answers)


async def test_a_full_stream_queues_each_producers_items_apart(
    real_redis: Redis, key_prefix: str, clock: Clock
) -> None:
    keys = KeySpace(key_prefix)
    shard = keys.shard(0)
    ingestor = Ingestor(real_redis, keys, Planner(small_buffer(), DIGEST), 3600, clock)
    await ingest(ingestor, "a", 25, "a")
    assert await real_redis.xlen(shard.work(Priority.LOW)) == 10
    assert await real_redis.llen(shard.queued(Priority.LOW, "a")) == 15
    # While a's items queue, none of a's may pass them, even once the stream has room.
    await real_redis.delete(shard.work(Priority.LOW))
    await ingest(ingestor, "a", 1, "late")
    assert await real_redis.llen(shard.queued(Priority.LOW, "a")) == 16
    # b has nothing queued: its first item goes into the stream while there is room.
    await ingest(ingestor, "b", 1, "b")
    assert await real_redis.xlen(shard.work(Priority.LOW)) == 1
    assert await waiting_producers(real_redis, shard, Priority.LOW) == ["a"]


async def test_the_feeder_lets_producers_in_by_weight(
    real_redis: Redis, key_prefix: str, clock: Clock
) -> None:
    keys = KeySpace(key_prefix)
    shard = keys.shard(0)
    catalog = small_buffer("weights = { b = 2 }")
    ingestor = Ingestor(real_redis, keys, Planner(catalog, DIGEST), 3600, clock)
    await ingest(ingestor, "a", 40, "a")  # 10 in the stream, 30 queued
    await ingest(ingestor, "b", 6, "b")  # all 6 queued: the stream is full
    stream = shard.work(Priority.LOW)
    await real_redis.delete(stream)  # the lanes took those 10
    producers = await waiting_producers(real_redis, shard, Priority.LOW)
    assert await feed(real_redis, shard, Priority.LOW, producers, catalog.fairness) == 10
    moved = [
        codec.decode_work_item(fields[b"w"]).producer
        for _, fields in await real_redis.xrange(stream)
    ]
    assert moved == ["a", "a", "b", "b", "b", "b", "a", "a", "b", "b"]
    assert await waiting_producers(real_redis, shard, Priority.LOW) == ["a"]  # b is through


async def test_high_is_never_queued(real_redis: Redis, key_prefix: str, clock: Clock) -> None:
    keys = KeySpace(key_prefix)
    ingestor = Ingestor(real_redis, keys, Planner(small_buffer(), DIGEST), 3600, clock)
    otp = msgspec.convert(
        {"recipient": {"id": "u", "phone": "+4915112345678"}, "type": "otp", "data": {"code": "1"}},
        NotificationRequest,
    )
    answers = await ingestor.ingest_many("auth", [(f"otp-{n}", otp) for n in range(30)])
    assert all(answer.accepted for answer in answers)
    assert await real_redis.xlen(keys.shard(0).work(Priority.HIGH)) == 30
    assert await waiting_producers(real_redis, keys.shard(0), Priority.HIGH) == []
