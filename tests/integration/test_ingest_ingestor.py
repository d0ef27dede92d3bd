"""The ingestor against real Redis and fakeredis: settings that appear while it ingests, and
concurrent accepts of one key."""

from __future__ import annotations

import asyncio

from redis.asyncio import Redis

from app.catalog import Catalog
from app.ingest.fanout import Planner
from app.ingest.ingestor import Ingestor
from streams.events import PreferenceEntry
from streams.keys import KeySpace
from streams.recipient_settings import RecipientSettingsStore
from streams.vocabulary import Priority
from tests.conftest import REQUEST, Clock


async def test_ingest_applies_settings_that_appear_during_ingest(
    redis: Redis, key_prefix: str, catalog: Catalog, clock: Clock
) -> None:
    keys = KeySpace(key_prefix)
    store = RecipientSettingsStore(redis, keys)
    await store.set_preferences(
        "user-5", [PreferenceEntry(type="marketing", channel="PUSH", enabled=False)]
    )
    ingestor = Ingestor(redis, keys, Planner(catalog), 3600, clock)
    outcome = await ingestor.ingest("orders", "k", REQUEST)
    assert outcome.status_code == 202
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
    ingestor = Ingestor(redis, keys, Planner(catalog), 3600, clock)
    outcomes = await asyncio.gather(*(ingestor.ingest("orders", "k", REQUEST) for _ in range(30)))
    assert {o.status_code for o in outcomes} <= {202, 409}
    assert len({o.response for o in outcomes if o.status_code == 202}) == 1
    assert await redis.xlen(keys.shard(0).work(Priority.LOW)) == 1
