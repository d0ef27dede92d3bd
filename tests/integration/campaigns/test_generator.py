"""The generator against real Redis: every recipient gets one notification, in batches of
1000, whatever was generated before; pause and backlog stop it between batches."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import msgspec
from redis.asyncio import Redis

from app.catalog import Catalog
from app.ingest.requests import NotificationRequest
from streams.campaigns.ids import notification_key
from streams.core.events import (
    CampaignBatchGenerated,
    CampaignStateChanged,
    DeliverySuppressed,
    NotificationAccepted,
    PreferenceEntry,
)
from streams.core.keys import KeySpace
from streams.core.vocabulary import Priority
from streams.recipients.settings import RecipientSettingsStore
from tests.conftest import stream_events
from tests.integration.campaign_support import MARKETING, always, give_profiles, parts, started


async def waiting(redis: Redis, keys: KeySpace) -> int:
    """LOW work items of the producer "orders": in the stream and queued (the stream holds
    at most the fairness buffer)."""
    shard = keys.shard(0)
    return await redis.xlen(shard.work(Priority.LOW)) + await redis.llen(
        shard.queued(Priority.LOW, "orders")
    )


async def test_every_recipient_gets_one_notification_in_batches(
    real_redis: Redis, key_prefix: str, catalog: Catalog
) -> None:
    keys = KeySpace(key_prefix)
    ids = [f"user-{i}" for i in range(2500)]
    await give_profiles(real_redis, keys, ids[:2400])  # 100 have no address at all
    campaigns, generator = parts(real_redis, keys, catalog)
    campaign = await campaigns.create("orders", MARKETING)
    await campaigns.add_recipients("orders", campaign.id, ids[:1500], "")
    await campaigns.add_recipients("orders", campaign.id, ids[1500:], "")
    await campaigns.start("orders", campaign.id)

    await generator.run(campaign.id, always)

    done = await campaigns.get("orders", campaign.id)
    assert (done.state, done.cursor, done.chunks) == ("completed", 3, 3)  # 1000, 500, 1000
    assert (done.accepted, done.repeated, done.skipped) == (2500, 0, 0)
    # Each recipient: one notification under the campaign's key, with an EMAIL and a PUSH
    # delivery, suppressed where the profile has no such address (no push token at all).
    shard = keys.shard(0)
    assert await waiting(real_redis, keys) == 2400
    assert await real_redis.exists(
        shard.idempotency("orders", notification_key(campaign.id, "user-7"))
    )
    events = await stream_events(real_redis, shard.events)
    batches = [e for e in events if isinstance(e, CampaignBatchGenerated)]
    assert [b.batch for b in batches] == [0, 1, 2]
    assert [e.state for e in events if isinstance(e, CampaignStateChanged)] == [
        "running",
        "completed",
    ]
    # The generated chunks were emptied: the audience holds nothing more.
    assert await real_redis.lrange(shard.campaign(campaign.id).audience, 0, -1) == [b""] * 3


async def test_a_batch_run_again_generates_nothing_twice(
    real_redis: Redis, key_prefix: str, catalog: Catalog
) -> None:
    """A generator killed after ingesting a batch, before recording it: the next run
    finds each of its recipients' notifications and counts them as repeated."""
    keys = KeySpace(key_prefix)
    ids = [f"user-{i}" for i in range(1200)]
    await give_profiles(real_redis, keys, ids)
    campaigns, generator = parts(real_redis, keys, catalog)
    campaign = await started(campaigns, ids)
    # The first 700 of the first batch made it before the "crash".
    entries: list[tuple[str, NotificationRequest]] = [
        (notification_key(campaign.id, r), MARKETING.notification(r)) for r in ids[:700]
    ]
    await generator.ingestor.ingest_many("orders", entries)

    await generator.run(campaign.id, always)

    done = await campaigns.get("orders", campaign.id)
    assert (done.accepted, done.repeated, done.skipped) == (500, 700, 0)
    assert await waiting(real_redis, keys) == 1200


async def test_a_pause_stops_it_between_batches_and_resume_goes_on(
    real_redis: Redis, key_prefix: str, catalog: Catalog
) -> None:
    keys = KeySpace(key_prefix)
    ids = [f"user-{i}" for i in range(3000)]
    await give_profiles(real_redis, keys, ids)
    campaigns, generator = parts(real_redis, keys, catalog)
    campaign = await started(campaigns, ids)

    async def pause_after_two_batches() -> bool:
        # Asked before every step: pausing here is pausing between two batches.
        if (await campaigns.get("orders", campaign.id)).cursor == 2:
            await campaigns.pause("orders", campaign.id)
        return True

    await generator.run(campaign.id, pause_after_two_batches)
    paused = await campaigns.get("orders", campaign.id)
    assert (paused.state, paused.cursor) == ("paused", 2)
    assert await waiting(real_redis, keys) == 2000

    await campaigns.resume("orders", campaign.id)
    await generator.run(campaign.id, always)
    done = await campaigns.get("orders", campaign.id)
    assert (done.state, done.accepted) == ("completed", 3000)


async def test_it_waits_while_the_backlog_is_full(
    real_redis: Redis, key_prefix: str, catalog: Catalog
) -> None:
    keys = KeySpace(key_prefix)
    ids = [f"user-{i}" for i in range(2500)]
    await give_profiles(real_redis, keys, ids)
    campaigns, generator = parts(real_redis, keys, catalog, backlog=1000)
    campaign = await started(campaigns, ids)
    waited = 0

    async def until_it_waits() -> bool:
        nonlocal waited
        if await waiting(real_redis, keys) >= 2000:
            waited += 1
        return waited < 3

    await generator.run(campaign.id, until_it_waits)
    # One batch past the backlog of 1000 (the check comes before a batch), then it waited.
    assert await waiting(real_redis, keys) == 2000
    stopped = await campaigns.get("orders", campaign.id)
    assert (stopped.state, stopped.cursor) == ("running", 2)


async def test_recipients_listed_twice_get_one_notification(
    real_redis: Redis, key_prefix: str, catalog: Catalog
) -> None:
    keys = KeySpace(key_prefix)
    await give_profiles(real_redis, keys, ["a", "b"])
    campaigns, generator = parts(real_redis, keys, catalog)
    campaign = await started(campaigns, ["a", "b", "a"])
    await generator.run(campaign.id, always)
    done = await campaigns.get("orders", campaign.id)
    assert (done.audience, done.accepted, done.repeated) == (3, 2, 1)


async def test_a_paced_campaign_stops_within_its_batch_when_paused(
    real_redis: Redis, key_prefix: str, catalog: Catalog
) -> None:
    """At 400 recipients a second a batch of 1000 takes 2.5 s: a pause takes effect within a
    quarter of a second; the batch runs again on resume, nobody twice."""
    keys = KeySpace(key_prefix)
    ids = [f"user-{i}" for i in range(1000)]
    await give_profiles(real_redis, keys, ids)
    campaigns, generator = parts(real_redis, keys, catalog)
    spec = msgspec.structs.replace(MARKETING, rate=400)
    campaign = await campaigns.create("orders", spec)
    await campaigns.add_recipients("orders", campaign.id, ids, "")
    await campaigns.start("orders", campaign.id)
    running = asyncio.create_task(generator.run(campaign.id, always))
    await asyncio.sleep(0.6)
    await campaigns.pause("orders", campaign.id)
    paused_at = time.monotonic()
    await asyncio.wait_for(running, 2)
    assert time.monotonic() - paused_at < 0.5
    halfway = await waiting(real_redis, keys)
    assert 0 < halfway < 1000
    assert (await campaigns.get("orders", campaign.id)).cursor == 0

    await campaigns.resume("orders", campaign.id)
    await generator.run(campaign.id, always)
    done = await campaigns.get("orders", campaign.id)
    assert (done.state, done.accepted, done.repeated) == ("completed", 1000 - halfway, halfway)
    assert await waiting(real_redis, keys) == 1000


async def test_settings_changed_after_a_batch_was_read_ahead_are_applied(
    real_redis: Redis, key_prefix: str, catalog: Catalog
) -> None:
    """The next batch and its recipients' settings are read while a batch is written; a
    recipient who opts out in between is planned again with the opt-out."""
    keys = KeySpace(key_prefix)
    ids = [f"user-{i}" for i in range(2000)]
    await give_profiles(real_redis, keys, ids)
    campaigns, generator = parts(real_redis, keys, catalog)
    campaign = await started(campaigns, ids)
    settings = RecipientSettingsStore(real_redis, keys)
    opted_out = False

    async def opt_out_before_the_second_batch() -> bool:
        nonlocal opted_out
        if not opted_out and (await campaigns.get("orders", campaign.id)).cursor == 1:
            email_off = PreferenceEntry(type="marketing", channel="EMAIL", enabled=False)
            await settings.set_preferences("user-1500", [email_off])
            opted_out = True
        return True

    await generator.run(campaign.id, opt_out_before_the_second_batch)

    assert opted_out
    done = await campaigns.get("orders", campaign.id)
    assert (done.state, done.accepted) == ("completed", 2000)
    events = await stream_events(real_redis, keys.shard(0).events)
    opt_outs = [e for e in events if isinstance(e, DeliverySuppressed) and e.reason == "opted_out"]
    assert [(e.channel, e.notification_id) for e in opt_outs] == [
        ("EMAIL", _notification_of(events, "user-1500"))
    ]
    assert await waiting(real_redis, keys) == 1999


def _notification_of(events: list[Any], recipient_id: str) -> str:
    (accepted,) = [
        e for e in events if isinstance(e, NotificationAccepted) and e.recipient_id == recipient_id
    ]
    return accepted.notification_id
