"""Erasing a recipient end to end, against real Redis, PostgreSQL, a worker and the projector:
with notifications sent (the sandbox recorded them), dead-lettered and still waiting, its
addresses are looked for afterwards in every Redis key and every read-model row, and none is
found; its waiting deliveries ended SUPPRESSED ("erased"); a ``RecipientErased`` event
records it without personal data; a later notification to the id is one for an unknown
recipient. Its throttle logs go too."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator

import asyncpg
import httpx
import pytest
from redis.asyncio import Redis

from app.api.app import create_app
from app.catalog import parse_catalog
from app.settings import Settings
from projections.projector import Projector
from streams.core.events import RecipientErased
from streams.core.keys import KeySpace
from streams.delivery.throttles import Throttles
from tests.conftest import PROFILES, http_client, stream_events
from tests.integration.api_support import post
from tests.integration.delivery_support import (
    catalog_text,
    fast_catalog,
    running_worker,
    wait_until,
)

pytestmark = pytest.mark.timeout(60)

EMAIL, PHONE, TOKEN = "erase-me@example.com", "+4915199887766", "fcm erase-me-token"
PROFILE = {"email": EMAIL, "phone": PHONE, "push_targets": [{"platform": "fcm",
           "token": "erase-me-token"}], "attributes": {"name": "Erika"}}  # fmt: skip
ORDER = {"recipient": {"id": "erika"}, "type": "order_confirmed", "data": {"order_id": "A-1"}}
FAILING_OTP = {
    "recipient": {"id": "erika", "phone": PHONE}, "type": "otp",
    "data": {"code": "1", "sandbox": {"SMS": {"fail_permanent": "no such number"}}},
}  # fmt: skip
ADDRESSES = [EMAIL.encode(), PHONE.encode(), b"erase-me-token", b"Erika"]


@pytest.fixture
async def api(
    real_redis: Redis, settings: Settings, pool: asyncpg.Pool
) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(settings, redis=real_redis, catalog=fast_catalog(attempts=1), db=pool)
    async with http_client(app) as client:
        yield client


async def everything_in_redis(redis: Redis, prefix: str) -> bytes:
    """Every value of every key under ``prefix``, read by its type, joined."""
    parts: list[bytes] = []
    async for key in redis.scan_iter(match=f"{prefix}:*", count=1000):
        kind = (await redis.type(key)).decode()
        if kind == "string":
            parts.append(await redis.get(key) or b"")
        elif kind == "hash":
            parts += [b"%s=%s" % pair for pair in (await redis.hgetall(key)).items()]
        elif kind == "stream":
            for _, fields in await redis.xrange(key):
                parts += [b"%s=%s" % pair for pair in fields.items()]
        elif kind == "zset":
            parts += await redis.zrange(key, 0, -1)
        else:
            raise AssertionError(f"{key!r}: a {kind} nobody expects")
        parts.append(key)
    return b"\n".join(parts)


async def everything_in_postgres(pool: asyncpg.Pool) -> str:
    tables = await pool.fetch("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
    rows = []
    for (table,) in tables:
        rows += [str(row[0]) for row in await pool.fetch(f'SELECT t::text FROM "{table}" t')]
    return "\n".join(rows)


async def project(redis: Redis, pool: asyncpg.Pool, keys: KeySpace) -> None:
    """Run the projector until it has read every event there is now."""
    projector = Projector(redis, pool, keys, consumer="p")
    task = asyncio.create_task(projector.run())
    stream = keys.shard(0).events
    last = (await redis.xrevrange(stream, count=1))[0][0].decode()

    async def caught_up() -> bool:
        row = await pool.fetchrow("SELECT last_id FROM projection_checkpoint WHERE stream = $1",
                                  stream)  # fmt: skip
        return row is not None and tuple(map(int, row[0].split("-"))) >= tuple(
            map(int, last.split("-"))
        )

    try:
        await wait_until(caught_up)
    finally:
        projector.stop()
        await task


async def test_an_erased_recipient_s_addresses_are_nowhere_afterwards(
    api: httpx.AsyncClient, real_redis: Redis, key_prefix: str, pool: asyncpg.Pool
) -> None:
    keys = KeySpace(key_prefix)
    assert (
        await api.put("/v1/recipients/erika", json=PROFILE, headers=PROFILES)
    ).status_code == 200
    sent = (await post(api, ORDER, key="o-1")).json()
    failed = (await post(api, FAILING_OTP, key="o-2")).json()
    async with running_worker(real_redis, keys, fast_catalog(attempts=1)):

        async def done() -> bool:
            dlq = await real_redis.xlen(keys.shard(0).dlq)
            calls = await real_redis.xlen(keys.sandbox_sent)
            # IN_APP goes to the inbox, not the sandbox.
            to_sandbox = [d for d in sent["deliveries"] if d["channel"] != "IN_APP"]
            return bool(dlq == 1 and calls >= len(to_sandbox) + 1)

        await wait_until(done)
    waiting = (await post(api, ORDER, key="o-3")).json()  # no worker now: it waits
    await project(real_redis, pool, keys)
    before = await everything_in_redis(real_redis, key_prefix)
    assert all(address in before for address in ADDRESSES)  # the search finds them there
    assert await real_redis.exists(keys.shard(0).inbox("erika").messages) == 1

    made = await api.post("/v1/recipients/erika/inbox-tokens", json={}, headers=PROFILES)
    app_token = {"Authorization": f"Bearer {made.json()['token']}"}
    assert (await api.get("/v1/inbox", headers=app_token)).status_code == 200

    erased = await api.delete("/v1/recipients/erika", headers=PROFILES)
    assert erased.status_code == 200
    # Its app's token no longer reads anything, even what arrives for the id afterwards.
    refused = await api.get("/v1/inbox", headers=app_token)
    assert (refused.status_code, refused.json()["detail"]) == (
        401, "the recipient token is revoked",
    )  # fmt: skip
    assert erased.json() == {
        "recipient_id": "erika", "deliveries_ended": len(waiting["deliveries"]),
        "dead_letters_removed": 1, "still_in_flight": 0,
    }  # fmt: skip
    await project(real_redis, pool, keys)

    in_redis = await everything_in_redis(real_redis, key_prefix)
    in_postgres = await everything_in_postgres(pool)
    inbox = keys.shard(0).inbox("erika")
    assert await real_redis.exists(inbox.messages, inbox.order, inbox.feed) == 0
    for address in ADDRESSES:
        assert address not in in_redis
        assert address.decode() not in in_postgres
    statuses = await pool.fetch(
        "SELECT status, reason FROM delivery WHERE notification_id = $1", waiting["id"]
    )
    assert {(row["status"], row["reason"]) for row in statuses} == {("SUPPRESSED", "erased")}
    events = await stream_events(real_redis, keys.shard(0).events)
    [record] = [event for event in events if isinstance(event, RecipientErased)]
    assert (record.recipient_id, record.deliveries_ended) == ("erika", 3)
    assert failed["deliveries"][0]["channel"] == "SMS"

    # From now on, erika is a recipient Clarion knows nothing about.
    assert (await api.get("/v1/recipients/erika", headers=PROFILES)).status_code == 404
    later = (await post(api, ORDER, key="o-4")).json()
    assert [d.get("reason") for d in later["deliveries"]] == ["no_address", "no_address", None]
    again = await api.delete("/v1/recipients/erika", headers=PROFILES)
    assert again.json()["deliveries_ended"] == 1  # the inbox delivery just queued


async def test_an_erased_recipient_s_throttle_logs_go_too(
    real_redis: Redis, settings: Settings, key_prefix: str, pool: asyncpg.Pool
) -> None:
    keys = KeySpace(key_prefix)
    marker = 'label = "Order confirmations"'
    text = catalog_text(attempts=1)
    assert marker in text
    catalog = parse_catalog(
        text.replace(marker, f'{marker}\nthrottle = {{ limit = 5, per = "1h" }}', 1), "t.toml"
    )
    capped = dataclasses.replace(settings, recipient_cap=(9, 3600))
    scopes = ["t:order_confirmed", "default:SMS"]  # the type's own, the default cap's
    for scope in [*scopes, "t:elsewhere"]:
        await Throttles(real_redis, keys).count([("erika", scope, 5, 60_000, "d-1")])
    await Throttles(real_redis, keys).count([("ben", scopes[0], 5, 60_000, "d-2")])
    app = create_app(capped, redis=real_redis, catalog=catalog, db=pool)
    async with http_client(app) as client:
        erased = await client.delete("/v1/recipients/erika", headers=PROFILES)
    assert erased.status_code == 200, erased.text
    assert [await real_redis.exists(keys.throttle("erika", s)) for s in scopes] == [0, 0]
    # A scope no throttle of this catalog has expires on its own; others' logs stay.
    assert await real_redis.exists(keys.throttle("erika", "t:elsewhere")) == 1
    assert await real_redis.exists(keys.throttle("ben", scopes[0])) == 1
