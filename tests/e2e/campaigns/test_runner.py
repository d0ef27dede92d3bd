"""Campaign generation in real worker processes: every process killed twice while it
generates, and still one notification per recipient."""

from __future__ import annotations

import signal
from collections import Counter
from pathlib import Path

import pytest
from redis.asyncio import Redis

from app.campaigns.lifecycle import Campaigns
from app.campaigns.specs import CampaignSpec
from app.catalog import load_catalog
from app.ingest.fanout import Planner
from streams.campaigns.ids import campaign_of
from streams.campaigns.store import CampaignStore
from streams.core.events import NotificationAccepted
from streams.core.keys import KeySpace
from tests.conftest import DIGEST, stream_events
from tests.e2e.processes.test_worker import worker_env, workers
from tests.integration.campaign_support import give_profiles, now
from tests.integration.delivery_support import catalog_text, wait_until

pytestmark = pytest.mark.timeout(180)
RECIPIENTS = 20_000


async def test_sigkill_of_every_worker_twice_leaves_one_notification_per_recipient(
    real_redis: Redis, key_prefix: str, tmp_path: Path
) -> None:
    keys = KeySpace(key_prefix)
    catalog_path = tmp_path / "catalog.toml"
    catalog_path.write_text(catalog_text())
    ids = [f"r-{i}" for i in range(RECIPIENTS)]
    await give_profiles(real_redis, keys, ids)
    campaigns = Campaigns(real_redis, keys, Planner(load_catalog(catalog_path), DIGEST), now)
    spec = CampaignSpec(type="marketing", data={"subject": "s", "body": "b"}, rate=2500)
    campaign = await campaigns.create("orders", spec)
    for start in range(0, RECIPIENTS, 10_000):
        await campaigns.add_recipients("orders", campaign.id, ids[start : start + 10_000], "")
    await campaigns.start("orders", campaign.id)
    store = CampaignStore(real_redis, keys)

    def generated_past(batches: int) -> object:
        async def check() -> bool:
            found = await store.get(campaign.id)
            assert found is not None
            return found.cursor >= batches

        return check

    env = worker_env(key_prefix, catalog_path)
    kills = 0
    for batches in (3, 9):  # killed twice, each time halfway through generating
        with workers(env, [0, 1]) as processes:
            await wait_until(generated_past(batches), within=60)  # type: ignore[arg-type]
            for process in processes:
                process.send_signal(signal.SIGKILL)
                process.wait()
                kills += 1
    halfway = await store.get(campaign.id)
    assert halfway is not None
    assert halfway.state == "running"
    assert halfway.cursor < halfway.chunks
    with workers(env, [0, 1]):

        async def completed() -> bool:
            found = await store.get(campaign.id)
            return found is not None and found.state == "completed"

        await wait_until(completed, within=90)

    assert kills == 4
    done = await store.get(campaign.id)
    assert done is not None
    assert (done.generated, done.skipped) == (RECIPIENTS, 0)
    accepted = [
        event
        for event in await stream_events(real_redis, keys.shard(0).events)
        if isinstance(event, NotificationAccepted)
        and campaign_of(event.idempotency_key) == campaign.id
    ]
    per_recipient = Counter(event.recipient_id for event in accepted)
    assert set(per_recipient) == set(ids)
    assert set(per_recipient.values()) == {1}
