"""A producer's campaign limits, checked in the same script as the write (so uploads or
creations racing each other cannot pass a limit together); the recipients a segment chose,
hidden from a key without the ``recipients`` scope even before the read model has them; and
the generator waiting for its producer's notifications quota."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest
from redis.asyncio import Redis

from app.api.app import create_app
from app.campaigns.specs import CampaignSpec, Segment
from app.catalog import Catalog, parse_catalog
from app.settings import Settings
from streams.core.errors import ClarionError, RateLimited, TooLarge
from streams.core.events import NotificationAccepted
from streams.core.keys import KeySpace
from tests.conftest import ORDERS, ORDERS_CRM, http_client, stream_events
from tests.integration.campaign_support import MARKETING, always, give_profiles, parts
from tests.integration.delivery_support import catalog_text

LIMITS = """
[quotas.producers.orders]
campaigns = { open = 3, audience = 15000, open_audience = 15000 }
notifications = { per_second = 100, burst = 10 }
"""


@pytest.fixture
def limited() -> Catalog:
    return parse_catalog(catalog_text() + LIMITS, "limits.toml")


async def test_uploads_racing_cannot_pass_the_producers_limit_together(
    real_redis: Redis, key_prefix: str, limited: Catalog
) -> None:
    keys = KeySpace(key_prefix, shards=2)
    campaigns, _ = parts(real_redis, keys, limited)
    first, second = [await campaigns.create("orders", MARKETING) for _ in range(2)]
    ids = [f"u-{i}" for i in range(10_000)]

    outcomes = await asyncio.gather(
        campaigns.add_recipients("orders", first.id, ids, ""),
        campaigns.add_recipients("orders", second.id, ids, ""),
        return_exceptions=True,
    )

    refused = [o for o in outcomes if isinstance(o, ClarionError)]
    assert len(refused) == 1, outcomes
    assert isinstance(refused[0], TooLarge)
    assert "campaigns.open_audience" in refused[0].detail
    audiences = [(await campaigns.get("orders", c.id)).audience for c in (first, second)]
    assert sorted(audiences) == [0, 10_000]  # the refused upload added nothing
    # Nor its chunks: the refused campaign's audience list is empty.
    refused_id = first.id if audiences[0] == 0 else second.id
    home = keys.campaign_home(refused_id)
    assert await real_redis.llen(home.campaign(refused_id).audience) == 0


async def test_creations_racing_cannot_pass_the_open_campaigns_limit(
    real_redis: Redis, key_prefix: str, limited: Catalog
) -> None:
    keys = KeySpace(key_prefix)
    campaigns, _ = parts(real_redis, keys, limited)

    outcomes = await asyncio.gather(
        *(campaigns.create("orders", MARKETING) for _ in range(8)), return_exceptions=True
    )

    refused = [o for o in outcomes if isinstance(o, ClarionError)]
    assert (len(outcomes) - len(refused), [type(r) for r in refused]) == (3, [RateLimited] * 5)
    assert len(await campaigns.store.recent("orders", 100)) == 3  # nothing else written
    # Another producer has limits of its own (the defaults).
    assert (await campaigns.create("auth", MARKETING)).state == "draft"


async def test_a_completed_campaign_frees_its_place_and_its_recipients(
    real_redis: Redis, key_prefix: str, limited: Catalog
) -> None:
    keys = KeySpace(key_prefix)
    campaigns, generator = parts(real_redis, keys, limited)
    ids = [f"u-{i}" for i in range(15_000)]
    opened = [await campaigns.create("orders", MARKETING) for _ in range(3)]
    await campaigns.add_recipients("orders", opened[0].id, ids[:20], "")
    with pytest.raises(TooLarge, match="open_audience"):  # 20 + 14,981: past 15,000
        await campaigns.add_recipients("orders", opened[1].id, ids[19:], "")
    await campaigns.start("orders", opened[0].id)
    await generator.run(opened[0].id, always)

    assert (await campaigns.get("orders", opened[0].id)).state == "completed"
    await campaigns.add_recipients("orders", opened[1].id, ids[19:], "")  # room again
    assert (await campaigns.create("orders", MARKETING)).state == "draft"


async def test_the_generator_waits_for_the_notifications_quota(
    real_redis: Redis, key_prefix: str, limited: Catalog
) -> None:
    keys = KeySpace(key_prefix)
    ids = [f"u-{i}" for i in range(40)]
    await give_profiles(real_redis, keys, ids)
    campaigns, generator = parts(real_redis, keys, limited)
    campaign = await campaigns.create("orders", MARKETING)
    await campaigns.add_recipients("orders", campaign.id, ids, "")
    await campaigns.start("orders", campaign.id)

    began = time.monotonic()
    await generator.run(campaign.id, always)

    # 40 at 100 a second with a burst of 10: 0.3 s at least; every one generated.
    assert time.monotonic() - began >= 0.28
    done = await campaigns.get("orders", campaign.id)
    assert (done.state, done.accepted, done.skipped) == ("completed", 40, 0)


async def test_a_segments_recipients_are_hidden_before_the_read_model_has_them(
    real_redis: Redis, key_prefix: str, catalog: Catalog, settings: Settings
) -> None:
    keys = KeySpace(key_prefix)
    await give_profiles(real_redis, keys, ["pro-1"], {"plan": "pro"})
    await give_profiles(real_redis, keys, ["listed-1"], {"plan": "free"})
    campaigns, generator = parts(real_redis, keys, catalog)
    by_segment = CampaignSpec(
        type="marketing", data=MARKETING.data, segment=Segment(attributes={"plan": "pro"})
    )
    for spec, uploaded in ((by_segment, []), (MARKETING, ["listed-1"])):
        campaign = await campaigns.create("orders", spec)
        if uploaded:
            await campaigns.add_recipients("orders", campaign.id, uploaded, "")
        await campaigns.start("orders", campaign.id)
        await generator.run(campaign.id, always)
    events = await stream_events(real_redis, keys.shard(0).events)
    notifications = {
        e.recipient_id: e.notification_id for e in events if isinstance(e, NotificationAccepted)
    }

    async with http_client(create_app(settings, redis=real_redis, catalog=catalog)) as client:

        async def shown(notification_id: str, headers: dict[str, str]) -> str | None:
            answer: httpx.Response = await client.get(
                f"/v1/notifications/{notification_id}", headers=headers
            )
            assert answer.status_code == 200, answer.text
            recipient_id: str | None = answer.json()["recipient_id"]
            return recipient_id

        assert await shown(notifications["pro-1"], ORDERS) is None
        assert await shown(notifications["pro-1"], ORDERS_CRM) == "pro-1"
        assert await shown(notifications["listed-1"], ORDERS) == "listed-1"
