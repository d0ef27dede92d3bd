"""Producers' changes to campaigns against real Redis: racing changes are decided again,
and each one is an event."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import msgspec
import pytest
from redis.asyncio import Redis

from app.campaigns.lifecycle import Campaigns
from app.campaigns.specs import CampaignSpec
from app.catalog import Catalog, parse_catalog
from app.ingest.fanout import Planner
from streams.core.errors import Conflict, Forbidden, Invalid
from streams.core.events import CampaignAudienceAdded, CampaignCreated, CampaignStateChanged
from streams.core.keys import KeySpace
from tests.conftest import DIGEST, REPO, stream_events
from tests.integration.campaign_support import MARKETING, now


def campaigns_of(redis: Redis, keys: KeySpace, catalog: Catalog) -> Campaigns:
    return Campaigns(redis, keys, Planner(catalog, DIGEST), now)


async def test_concurrent_uploads_all_land(
    real_redis: Redis, key_prefix: str, catalog: Catalog
) -> None:
    keys = KeySpace(key_prefix)
    campaigns = campaigns_of(real_redis, keys, catalog)
    campaign = await campaigns.create("orders", MARKETING)
    parts = [[f"u-{part}-{i}" for i in range(1000)] for part in range(10)]
    await asyncio.gather(
        *(
            campaigns.add_recipients("orders", campaign.id, ids, f"part-{n}")
            for n, ids in enumerate(parts)
        )
    )
    filled = await campaigns.get("orders", campaign.id)
    assert (filled.audience, filled.chunks) == (10_000, 10)
    events = await stream_events(real_redis, keys.shard(0).events)
    assert isinstance(events[0], CampaignCreated)
    added = [e for e in events if isinstance(e, CampaignAudienceAdded)]
    assert sorted(e.audience for e in added) == list(range(1000, 10_001, 1000))


async def test_racing_pause_and_cancel_are_each_decided_on_the_state_they_find(
    real_redis: Redis, key_prefix: str, catalog: Catalog
) -> None:
    keys = KeySpace(key_prefix)
    campaigns = campaigns_of(real_redis, keys, catalog)
    campaign = await campaigns.create("orders", MARKETING)
    await campaigns.add_recipients("orders", campaign.id, ["a"], "")
    await campaigns.start("orders", campaign.id)
    results = await asyncio.gather(
        campaigns.pause("orders", campaign.id),
        campaigns.cancel("orders", campaign.id),
        return_exceptions=True,
    )
    final = await campaigns.get("orders", campaign.id)
    assert final.state == "cancelled"
    changes = [
        (e.previous, e.state)
        for e in await stream_events(real_redis, keys.shard(0).events)
        if isinstance(e, CampaignStateChanged)
    ]
    # Either the pause came first and the cancel found it paused, or the cancel came first
    # and the pause was refused: never a pause recorded on a cancelled campaign.
    assert changes in (
        [("draft", "running"), ("running", "paused"), ("paused", "cancelled")],
        [("draft", "running"), ("running", "cancelled")],
    )
    if len(changes) == 2:
        assert isinstance(results[0], Conflict)
    # Every shard's workers are told, and by whom.
    assert await real_redis.get(keys.shard(0).campaign_cancelled(campaign.id)) == b"orders"


async def test_a_campaign_with_a_start_time_waits_for_it(
    real_redis: Redis, key_prefix: str, catalog: Catalog
) -> None:
    keys = KeySpace(key_prefix)
    campaigns = campaigns_of(real_redis, keys, catalog)
    later = now() + timedelta(minutes=5)
    spec = msgspec.structs.replace(MARKETING, start_at=later)
    campaign = await campaigns.create("orders", spec)
    await campaigns.add_recipients("orders", campaign.id, ["a"], "")
    assert (await campaigns.start("orders", campaign.id)).state == "scheduled"
    due = await real_redis.zscore(keys.shard(0).campaigns_due, campaign.id)
    assert due == int(later.timestamp() * 1000)
    assert (await campaigns.pause("orders", campaign.id)).state == "paused"
    assert await real_redis.zscore(keys.shard(0).campaigns_due, campaign.id) is None
    assert (await campaigns.resume("orders", campaign.id)).state == "scheduled"


async def test_a_type_the_producer_may_not_send_is_refused(
    real_redis: Redis, key_prefix: str
) -> None:
    text = (
        (REPO / "clarion.toml")
        .read_text()
        .replace('# producers = ["auth"]', 'producers = ["auth"]')
    )
    campaigns = campaigns_of(real_redis, KeySpace(key_prefix), parse_catalog(text, "c.toml"))
    with pytest.raises(Forbidden):
        await campaigns.create("orders", CampaignSpec(type="otp"))
    with pytest.raises(Invalid):
        await campaigns.create("orders", CampaignSpec(type="nope"))
