"""A type that waits for an address (``await_address_seconds``), on real Redis with a running
worker and the sandbox: without the option a delivery without an address is suppressed at
once; with it, it waits, is looked at again, and ends SUPPRESSED ``no_address`` after its
bound, or is sent within about a second of a profile change that gives it an address.
Deliveries sent later are looked at again the same way when they come due, a batch at a
time."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
from redis.asyncio import Redis

from app.api.app import create_app
from app.catalog import Catalog, parse_catalog
from app.ingest.profiles import Profile
from app.metrics import SUPPRESSED
from app.recipients.profiles import encode
from app.settings import Settings
from projections.projector import Projector
from streams.core.events import DeliveryDeferred, DeliverySuppressed
from streams.core.keys import KeySpace
from streams.core.vocabulary import Channel
from streams.recipients.settings import RecipientSettingsStore
from streams.recipients.suppressions import Suppression, SuppressionStore
from tests.conftest import DIGEST, ORDERS, http_client, stream_events
from tests.integration.api_support import post
from tests.integration.delivery_support import (
    accept,
    catalog_text,
    running_worker,
    sandbox_calls,
    state,
    wait_until,
)

RECIPIENT = "u-awaits"


def waiting_catalog(seconds: int | None) -> Catalog:
    """The shipped catalog, quick retries, order confirmations waiting ``seconds`` (None: not)."""
    text = catalog_text()
    if seconds is not None:
        header = "[types.order_confirmed]\n"
        assert header in text
        text = text.replace(header, f"{header}await_address_seconds = {seconds}\n", 1)
    return parse_catalog(text, "test-catalog.toml")


def order(key: str = "o-1") -> dict[str, Any]:
    """An order confirmation by EMAIL to a recipient Clarion knows no address of."""
    return {
        "recipient": {"id": RECIPIENT},
        "type": "order_confirmed",
        "channels": ["EMAIL"],
        "data": {"order_id": key},
    }


async def events_of(redis: Redis, keys: KeySpace, delivery_id: str) -> list[Any]:
    events = await stream_events(redis, keys.shard(0).events)
    return [e for e in events if getattr(e, "delivery_id", None) == delivery_id]


async def ended(redis: Redis, keys: KeySpace, delivery_id: str, within: float) -> dict[str, str]:
    async def done() -> bool:
        status = (await state(redis, keys, delivery_id)).get("status")
        return status in {"SENT", "SUPPRESSED", "FAILED", "EXPIRED"}

    await wait_until(done, within)
    return await state(redis, keys, delivery_id)


async def test_without_the_option_no_address_is_suppressed_at_once(
    real_redis: Redis, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix)
    answer = await accept(real_redis, keys, waiting_catalog(None), order(), "k")
    [delivery] = answer["deliveries"]
    assert (delivery["status"], delivery["reason"]) == ("SUPPRESSED", "no_address")
    assert await real_redis.zcard(keys.shard(0).delayed) == 0
    [event] = await events_of(real_redis, keys, delivery["id"])
    assert isinstance(event, DeliverySuppressed)
    assert event.reason == "no_address"


async def test_it_waits_looks_again_and_is_suppressed_no_address_after_its_bound(
    real_redis: Redis, key_prefix: str
) -> None:
    keys, catalog = KeySpace(key_prefix), waiting_catalog(2)
    started = time.monotonic()
    answer = await accept(real_redis, keys, catalog, order(), "k")
    [delivery] = answer["deliveries"]
    assert (delivery["status"], delivery["reason"]) == ("SCHEDULED", "awaiting_address")
    async with running_worker(real_redis, keys, catalog) as worker:
        done = await ended(real_redis, keys, delivery["id"], within=6)
        await worker.metrics.flush()
    took = time.monotonic() - started
    assert (done["status"], done["reason"]) == ("SUPPRESSED", "no_address")
    assert 1.9 < took < 4.5
    # Its wait recorded once, at ingest (the looks change neither status nor reason), then
    # its end.
    waits, last = await events_of(real_redis, keys, delivery["id"])
    assert isinstance(waits, DeliveryDeferred)
    assert (waits.reason, waits.version) == ("awaiting_address", 1)
    assert isinstance(last, DeliverySuppressed)
    assert (last.reason, last.version) == ("no_address", 2)
    assert await sandbox_calls(real_redis, keys) == []
    assert await real_redis.zcard(keys.shard(0).delayed) == 0
    assert await real_redis.pttl(keys.shard(0).awaiting(RECIPIENT)) < 1500  # gone, or soon
    counted = await real_redis.hgetall(keys.metric(SUPPRESSED.name))
    assert [int(n) for field, n in counted.items() if b"no_address" in field] == [1]


async def test_a_profile_change_giving_an_address_releases_it_within_a_second(
    real_redis: Redis, key_prefix: str
) -> None:
    keys, catalog = KeySpace(key_prefix), waiting_catalog(60)
    answer = await accept(real_redis, keys, catalog, order(), "k")
    [delivery] = answer["deliveries"]
    async with running_worker(real_redis, keys, catalog):
        # Looks at 1 s, 2 s and 4 s; the next one would be at 8 s.
        await asyncio.sleep(4.5)
        assert await sandbox_calls(real_redis, keys) == []
        assert await real_redis.zcard(keys.shard(0).awaiting(RECIPIENT)) == 1
        changed_at = time.time()
        profile = encode(Profile(email="anna@example.com"))
        await RecipientSettingsStore(real_redis, keys).update_profile(
            RECIPIENT, lambda _stored: (profile, ["email"])
        )
        done = await ended(real_redis, keys, delivery["id"], within=3)
    assert done["status"] == "SENT"
    [call] = await sandbox_calls(real_redis, keys)
    assert call["address"] == "anna@example.com"
    assert call["at_ms"] / 1000 - changed_at < 1.3
    assert not await real_redis.exists(keys.shard(0).awaiting(RECIPIENT))


async def test_the_read_model_shows_the_wait_then_the_suppression(
    real_redis: Redis, key_prefix: str, pool: asyncpg.Pool
) -> None:
    keys, catalog = KeySpace(key_prefix), waiting_catalog(2)
    [delivery] = (await accept(real_redis, keys, catalog, order(), "k"))["deliveries"]
    projector = Projector(real_redis, pool, keys, consumer="p")
    task = asyncio.create_task(projector.run())

    async def row() -> tuple[str, str | None]:
        async with pool.acquire() as connection:
            found = await connection.fetchrow(
                "SELECT status, reason FROM delivery WHERE id = $1", delivery["id"]
            )
        return (found["status"], found["reason"]) if found else ("", None)

    async def waiting() -> bool:
        return await row() == ("SCHEDULED", "awaiting_address")

    async def suppressed() -> bool:
        return await row() == ("SUPPRESSED", "no_address")

    try:
        await wait_until(waiting, within=1.5)  # before any worker looked
        async with running_worker(real_redis, keys, catalog):
            await ended(real_redis, keys, delivery["id"], within=6)
            await wait_until(suppressed, within=5)
    finally:
        projector.stop()
        await task


async def test_a_producer_sees_the_wait_in_the_answer_and_the_status_api(
    real_redis: Redis, settings: Settings, pool: asyncpg.Pool
) -> None:
    app = create_app(settings, redis=real_redis, catalog=waiting_catalog(60), db=pool)
    async with http_client(app) as client:
        answer = await post(client, order(), key="o-1")
        assert answer.status_code == 202
        [delivery] = answer.json()["deliveries"]
        assert (delivery["status"], delivery["reason"]) == ("SCHEDULED", "awaiting_address")
        status = await client.get(f"/v1/notifications/{answer.json()['id']}", headers=ORDERS)
    assert status.status_code == 200
    [seen] = status.json()["deliveries"]
    assert (seen["status"], seen["reason"]) == ("SCHEDULED", "awaiting_address")


async def test_deliveries_sent_later_are_decided_together_by_the_settings_when_due(
    real_redis: Redis, key_prefix: str
) -> None:
    """A batch coming due is read in one round trip; each delivery still gets its own
    recipient's decision: one switched the type off meanwhile, one's address went on the
    suppression list, the others go."""
    keys, catalog = KeySpace(key_prefix), waiting_catalog(None)
    send_at = datetime.now(UTC) + timedelta(seconds=1)
    ids = {}
    for name in ("off", "listed", "goes-1", "goes-2"):
        body = {
            "recipient": {"id": f"u-{name}", "email": f"{name}@example.com"},
            "type": "order_confirmed",
            "channels": ["EMAIL"],
            "data": {"order_id": name},
            "send_at": send_at.isoformat(),
        }
        answer = await accept(real_redis, keys, catalog, body, f"k-{name}")
        ids[name] = answer["deliveries"][0]["id"]
    await RecipientSettingsStore(real_redis, keys).switch_off(
        "u-off", "order_confirmed", Channel.EMAIL, "api"
    )
    await SuppressionStore(real_redis, keys).add(Suppression(
        channel=Channel.EMAIL, digest=DIGEST("listed@example.com"), reason="complaint",
        source="test", at_ms=1,
    ))  # fmt: skip

    async def ended() -> bool:
        found = [await state(real_redis, keys, i) for i in ids.values()]
        return all(f.get("status") in {"SENT", "SUPPRESSED"} for f in found)

    async with running_worker(real_redis, keys, catalog):
        await wait_until(ended, within=10)
    statuses = {name: (await state(real_redis, keys, i))["status"] for name, i in ids.items()}
    assert statuses == {
        "off": "SUPPRESSED", "listed": "SUPPRESSED", "goes-1": "SENT", "goes-2": "SENT",
    }  # fmt: skip
    sent = {call["delivery_id"] for call in await sandbox_calls(real_redis, keys)}
    assert sent == {ids["goes-1"], ids["goes-2"]}
