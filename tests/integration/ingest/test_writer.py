"""The ingest script against real Redis and fakeredis: in-flight markers, one events entry per
call with each item's events cut out in place, keys of the wrong type, NOSCRIPT recovery."""

from __future__ import annotations

from redis.asyncio import Redis

from app.catalog import Catalog
from app.ingest.answers import IngestAnswer
from app.ingest.fanout import Planner
from app.ingest.ingestor import IN_FLIGHT_TTL_MS, Ingestor
from app.ingest.requests import NotificationRequest
from streams.core import codec, scripts
from streams.core.errors import kind_of
from streams.core.events import NotificationAccepted, PreferenceEntry
from streams.core.keys import KeySpace
from streams.core.vocabulary import Priority
from streams.ingest.writer import IngestWriter
from streams.recipients.read import RecipientSettings
from streams.recipients.settings import RecipientSettingsStore
from tests.conftest import DIGEST, REQUEST, Clock


def said(answer: IngestAnswer) -> str:
    """What ``answer`` says: accepted, or the kind of error it was refused with."""
    if answer.error is None:
        return "accepted"
    kind = kind_of(answer.error)
    return "no kind" if kind is None else kind.__name__


def planned(planner: Planner, keys: KeySpace, clock: Clock, key: str) -> object:
    shard = keys.for_ingest("orders", key)
    return planner.plan(
        shard=shard,
        producer="orders",
        idempotency_key=key,
        request=REQUEST,
        identity=planner.identity(shard, REQUEST),
        settings=RecipientSettings(),
        now=clock(),
    )


async def test_a_twin_of_a_request_in_its_second_round_gets_409(
    redis: Redis, key_prefix: str, catalog: Catalog, clock: Clock
) -> None:
    keys = KeySpace(key_prefix)
    store = RecipientSettingsStore(redis, keys)
    off = [PreferenceEntry(type="marketing", channel="EMAIL", enabled=False)]
    await store.set_preferences("user-5", off)
    planner = Planner(catalog, DIGEST)
    first = planned(planner, keys, clock, "k")
    # The first round finds settings it did not assume: STALE, and the key is now in flight.
    [reply] = await IngestWriter(redis, 60_000, IN_FLIGHT_TTL_MS, 2000).write([first])  # type: ignore[list-item]
    assert reply.kind == "STALE"
    assert reply.settings is not None
    assert reply.settings.disabled == {("marketing", "EMAIL")}
    # A twin arriving now is told to come back later, and a different body is refused.
    ingestor = Ingestor(redis, keys, planner, 3600, clock)
    assert said(await ingestor.ingest("orders", "k", REQUEST)) == "Conflict"
    other = NotificationRequest(recipient=REQUEST.recipient, type="marketing", data={
        "subject": "other", "body": "b"})  # fmt: skip
    assert said(await ingestor.ingest("orders", "k", other)) == "Invalid"


async def test_one_call_appends_one_events_entry_for_all_accepted_items(
    redis: Redis, key_prefix: str, catalog: Catalog, clock: Clock
) -> None:
    keys = KeySpace(key_prefix)
    ingestor = Ingestor(redis, keys, Planner(catalog, DIGEST), 3600, clock)
    entries = [(f"k{n}", REQUEST) for n in range(5)]
    outcomes = await ingestor.ingest_many("orders", entries)
    assert [said(o) for o in outcomes] == ["accepted"] * 5
    [(_, fields)] = await redis.xrange(keys.shard(0).events)
    accepted = [e for e in codec.decode_events(fields[b"e"]) if isinstance(e, NotificationAccepted)]
    assert [e.idempotency_key for e in accepted] == ["k0", "k1", "k2", "k3", "k4"]
    # A repeat writes nothing: no second entry.
    await ingestor.ingest_many("orders", entries)
    assert await redis.xlen(keys.shard(0).events) == 1


async def test_items_accepted_around_a_repeat_get_their_own_events_entries(
    redis: Redis, key_prefix: str, catalog: Catalog, clock: Clock
) -> None:
    keys = KeySpace(key_prefix)
    ingestor = Ingestor(redis, keys, Planner(catalog, DIGEST), 3600, clock)
    await ingestor.ingest("orders", "k2", REQUEST)
    entries = [(f"k{n}", REQUEST) for n in range(5)]
    outcomes = await ingestor.ingest_many("orders", entries)
    assert [o.replayed for o in outcomes] == [False, False, True, False, False]
    # The repeat in the middle writes nothing; each accepted item's events are cut out of
    # the joined array at its own place, whole and in order.
    entries_read = await redis.xrange(keys.shard(0).events)
    cut = [codec.decode_events(fields[b"e"]) for _, fields in entries_read[1:]]
    assert [type(events[0]) for events in cut] == [NotificationAccepted] * 4
    assert [events[0].idempotency_key for events in cut] == ["k0", "k1", "k3", "k4"]  # type: ignore[union-attr]
    planned_events = [len(codec.decode_events(fields[b"e"])) for _, fields in entries_read[:1]]
    assert [len(events) for events in cut] == planned_events * 4


async def test_an_item_whose_key_has_the_wrong_type_fails_alone(
    redis: Redis, key_prefix: str, catalog: Catalog, clock: Clock
) -> None:
    keys = KeySpace(key_prefix)
    await redis.hset(keys.shard(0).idempotency("orders", "k1"), "not", "a string")
    ingestor = Ingestor(redis, keys, Planner(catalog, DIGEST), 3600, clock)
    outcomes = await ingestor.ingest_many("orders", [("k0", REQUEST), ("k1", REQUEST)])
    assert [said(o) for o in outcomes] == ["accepted", "Unavailable"]
    [(_, fields)] = await redis.xrange(keys.shard(0).events)
    accepted = [e for e in codec.decode_events(fields[b"e"]) if isinstance(e, NotificationAccepted)]
    assert [e.idempotency_key for e in accepted] == ["k0"]


async def test_a_shared_key_of_the_wrong_type_fails_the_call_before_any_write(
    real_redis: Redis, key_prefix: str, catalog: Catalog, clock: Clock
) -> None:
    keys = KeySpace(key_prefix)
    await real_redis.set(keys.shard(0).work(Priority.LOW), "not a stream")
    ingestor = Ingestor(real_redis, keys, Planner(catalog, DIGEST), 3600, clock)
    outcomes = await ingestor.ingest_many("orders", [("k0", REQUEST), ("k1", REQUEST)])
    assert [said(o) for o in outcomes] == ["Unavailable", "Unavailable"]
    assert await real_redis.exists(keys.shard(0).events) == 0
    assert await real_redis.exists(keys.shard(0).idempotency("orders", "k0")) == 0


async def test_scripts_are_reloaded_after_a_flush(
    real_redis: Redis, key_prefix: str, catalog: Catalog, clock: Clock
) -> None:
    ingestor = Ingestor(real_redis, KeySpace(key_prefix), Planner(catalog, DIGEST), 3600, clock)
    assert said(await ingestor.ingest("orders", "a", REQUEST)) == "accepted"
    await real_redis.script_flush()  # what a Redis restart does to loaded scripts
    assert not (await real_redis.script_exists(scripts.INGEST.sha))[0]
    assert said(await ingestor.ingest("orders", "b", REQUEST)) == "accepted"
    await real_redis.script_flush()
    outcomes = await ingestor.ingest_many("orders", [("c", REQUEST), ("d", REQUEST)])
    assert [said(o) for o in outcomes] == ["accepted", "accepted"]
