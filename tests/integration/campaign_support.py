"""What the campaign tests share: recipients with profiles, and a campaign run to its end."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from redis.asyncio import Redis

from app.campaigns.generator import Generator, GeneratorOptions
from app.campaigns.lifecycle import Campaigns
from app.campaigns.specs import CampaignSpec
from app.catalog import Catalog
from app.ingest.fanout import Planner
from app.ingest.ingestor import Ingestor
from app.ingest.profiles import Profile
from app.recipients.profiles import encode
from streams.campaigns.store import Campaign, CampaignStore
from streams.core.keys import KeySpace
from streams.recipients.settings import RecipientSettingsStore
from tests.conftest import DIGEST

MARKETING = CampaignSpec(type="marketing", data={"subject": "Spring", "body": "Sale"})


def now() -> datetime:
    return datetime.now(UTC)


async def give_profiles(
    redis: Redis, keys: KeySpace, ids: Sequence[str], attributes: dict[str, Any] | None = None
) -> None:
    """A profile with an email address (and ``attributes``) for each recipient."""
    store = RecipientSettingsStore(redis, keys)

    async def one(recipient_id: str) -> None:
        profile = Profile(email=f"{recipient_id}@example.com", attributes=attributes or {})
        await store.update_profile(recipient_id, lambda _: (encode(profile), ["email"]))

    for start in range(0, len(ids), 50):
        await asyncio.gather(*(one(r) for r in ids[start : start + 50]))


def parts(
    redis: Redis, keys: KeySpace, catalog: Catalog, backlog: int = 1_000_000
) -> tuple[Campaigns, Generator]:
    """The lifecycle and a generator on real time."""
    planner = Planner(catalog, DIGEST)
    ingestor = Ingestor(redis, keys, planner, 3600, now)
    generator = Generator(ingestor, CampaignStore(redis, keys), GeneratorOptions(backlog=backlog))
    return Campaigns(redis, keys, planner, now), generator


async def always() -> bool:
    return True


async def started(campaigns: Campaigns, recipients: Sequence[str]) -> Campaign:
    """A MARKETING campaign of producer "orders" to ``recipients``, started."""
    campaign = await campaigns.create("orders", MARKETING)
    await campaigns.add_recipients("orders", campaign.id, recipients, "")
    return await campaigns.start("orders", campaign.id)
