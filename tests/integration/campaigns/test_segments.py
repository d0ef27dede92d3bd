"""A segment's recipients: those whose profile attributes match, from one shard's copies."""

from __future__ import annotations

from redis.asyncio import Redis

from app.campaigns.segments import select
from app.campaigns.specs import Segment
from streams.campaigns.store import CampaignChange, CampaignStore
from streams.core.events import PreferenceEntry
from streams.core.ids import new_id
from streams.core.keys import KeySpace
from streams.recipients.settings import RecipientSettingsStore
from tests.integration.campaign_support import give_profiles


async def test_the_recipients_whose_attributes_match_are_selected(
    real_redis: Redis, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix, shards=2)
    pro_de = [f"de-{i}" for i in range(1500)]
    await give_profiles(real_redis, keys, pro_de, {"plan": "pro", "country": "DE"})
    await give_profiles(real_redis, keys, ["at-1"], {"plan": "pro", "country": "AT"})
    await give_profiles(real_redis, keys, ["free-1"], {"plan": "free", "country": "DE"})
    await give_profiles(real_redis, keys, ["fr-1"], {"plan": "pro", "country": "FR"})
    # Settings without a profile are no recipient of any segment.
    await RecipientSettingsStore(real_redis, keys).set_preferences(
        "no-profile", [PreferenceEntry(type="marketing", channel="EMAIL", enabled=False)]
    )
    store = CampaignStore(real_redis, keys)
    campaign_id = new_id(1)
    await store.write(
        campaign_id,
        "o",
        0,
        CampaignChange(sets={"producer": "o", "state": "running", "spec": b"{}"}),
    )
    segment = Segment(attributes={"plan": "pro", "country": ["DE", "AT"]})

    assert await select(real_redis, keys, store, campaign_id, segment) == 1501
    await store.write(campaign_id, "o", 1, CampaignChange(adopt_selection=True))
    chunks = [await store.chunk(campaign_id, i) for i in range(2)]
    assert [len(chunk) for chunk in chunks] == [1000, 501]
    assert set(chunks[0] + chunks[1]) == {*pro_de, "at-1"}
