"""GET /v1/recipients/{id}/deliveries, a recipient's message log, against real Redis and
PostgreSQL: every producer's deliveries to the recipient, paged, filtered, scoped."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import asyncpg
import httpx
import pytest
from litestar import Litestar
from redis.asyncio import Redis

from app.api.app import create_app
from app.settings import Settings
from clarion_client import AsyncClarion, AuthError, InvalidRequestError
from projections.projector import Projector
from streams.core.consumer_groups import PROJECTOR_GROUP
from streams.core.keys import KeySpace
from tests.conftest import AUTH, ORDERS, ORDERS_CRM, PROFILES, VIEWER, http_client
from tests.integration.delivery_support import fast_catalog, wait_until

Client = httpx.AsyncClient
PERSON = "person-7"
# Producer "orders": EMAIL and IN_APP queued, PUSH suppressed (no push token).
ORDER = {
    "recipient": {"id": PERSON, "email": "anna@example.com"},
    "type": "order_confirmed",
    "data": {"order_id": "A-17"},
}
# Producer "auth": one SMS.
OTP = {"recipient": {"id": PERSON, "phone": "+4915112345678"}, "type": "otp", "data": {"code": "1"}}


@pytest.fixture
def keys(key_prefix: str) -> KeySpace:
    return KeySpace(key_prefix)


@pytest.fixture
def app(settings: Settings, real_redis: Redis, pool: asyncpg.Pool) -> Litestar:
    return create_app(settings, redis=real_redis, catalog=fast_catalog(), db=pool)


@pytest.fixture
async def client(app: Litestar) -> AsyncIterator[Client]:
    async with http_client(app) as test_client:
        yield test_client


async def accept(client: Client, body: dict[str, Any], key: str, headers: dict[str, str]) -> Any:
    response = await client.post(
        "/v1/notifications", json=body, headers={**headers, "Idempotency-Key": key}
    )
    assert response.status_code == 202, response.text
    return response.json()


async def drained(redis: Redis, keys: KeySpace) -> bool:
    stream = keys.shard(0).events
    groups = [g for g in await redis.xinfo_groups(stream) if g["name"] == PROJECTOR_GROUP.encode()]
    if not groups or (await redis.xpending(stream, PROJECTOR_GROUP))["pending"]:
        return False
    last = groups[0]["last-delivered-id"].decode()
    return not await redis.xrange(stream, f"({last}", "+", count=1)


@pytest.fixture
async def sent(
    client: Client, real_redis: Redis, keys: KeySpace, pool: asyncpg.Pool
) -> dict[str, list[str]]:
    """Projected deliveries to PERSON from two producers, and one to someone else."""
    order = await accept(client, ORDER, "o-1", ORDERS)
    otps = [await accept(client, OTP, f"a-{n}", AUTH) for n in (1, 2)]
    other = await accept(client, {**OTP, "recipient": {"id": "someone-else",
                                                        "phone": "+4915100000000"}},
                         "a-3", AUTH)  # fmt: skip
    projector = Projector(real_redis, pool, keys, consumer="test-projector")
    task = asyncio.create_task(projector.run())
    try:
        await wait_until(lambda: drained(real_redis, keys))
    finally:
        projector.stop()
        await asyncio.wait_for(task, 20)
    return {
        "orders": [d["id"] for d in order["deliveries"]],
        "auth": [d["id"] for a in otps for d in a["deliveries"]],
        "other": [d["id"] for d in other["deliveries"]],
    }


async def log_of(
    client: Client, query: str = "", headers: dict[str, str] = PROFILES, person: str = PERSON
) -> Any:
    return await client.get(f"/v1/recipients/{person}/deliveries{query}", headers=headers)


async def test_every_producers_deliveries_to_the_recipient_newest_first(
    client: Client, pool: asyncpg.Pool, sent: dict[str, list[str]]
) -> None:
    response = await log_of(client)
    assert response.status_code == 200, response.text
    page = response.json()
    assert page["recipient_id"] == PERSON
    assert page["next_cursor"] is None
    items = page["deliveries"]
    assert sorted(d["id"] for d in items) == sorted(sent["orders"] + sent["auth"])
    assert {d["producer"] for d in items} == {"orders", "auth"}
    keyset = [(d["updated_at"], d["id"]) for d in items]
    assert keyset == sorted(keyset, reverse=True)
    push = next(d for d in items if d["channel"] == "PUSH")
    assert (push["status"], push["reason"], push["type"]) == (
        "SUPPRESSED", "no_address", "order_confirmed"
    )  # fmt: skip
    assert set(push) == {
        "id", "notification_id", "producer", "type", "channel", "status", "reason", "attempts",
        "error_class", "last_error", "provider_message_id", "created_at", "updated_at",
        "due_at",
    }  # fmt: skip
    assert push["due_at"] is None
    # No address is shown anywhere: the read model keeps none.
    assert "anna@example.com" not in response.text
    assert "4915112345678" not in response.text
    # A key with recipients among other scopes reads it too.
    assert (await log_of(client, headers=ORDERS_CRM)).json()["deliveries"] == items


async def test_pages_walk_the_log_once_through_the_cursor(
    client: Client, sent: dict[str, list[str]]
) -> None:
    whole = (await log_of(client)).json()["deliveries"]
    seen: list[dict[str, Any]] = []
    query = "?limit=2"
    cursors = []
    while True:
        response = await log_of(client, query)
        assert response.status_code == 200, response.text
        page = response.json()
        assert len(page["deliveries"]) <= 2
        seen += page["deliveries"]
        cursors.append(page["next_cursor"])
        if page["next_cursor"] is None:
            break
        query = f"?limit=2&cursor={page['next_cursor']}"
    assert seen == whole
    assert len(seen) == 5
    assert [c is not None for c in cursors] == [True, True, False]


async def test_filters_by_status_channel_type_and_time(
    client: Client, sent: dict[str, list[str]]
) -> None:
    async def ids(query: str) -> list[str]:
        response = await log_of(client, query)
        assert response.status_code == 200, response.text
        return sorted(d["id"] for d in response.json()["deliveries"])

    assert await ids("?channel=SMS") == sorted(sent["auth"])
    assert await ids("?type=order_confirmed") == sorted(sent["orders"])
    assert await ids("?status=SUPPRESSED") == [sent["orders"][1]]
    assert await ids("?status=QUEUED&channel=EMAIL") == [sent["orders"][0]]
    assert await ids("?type=nothing") == []
    everything = sorted(sent["orders"] + sent["auth"])
    assert await ids("?since=2000-01-01T00:00:00Z") == everything
    assert await ids("?until=2000-01-01T00:00:00Z") == []
    assert await ids("?since=2999-01-01T00:00:00Z") == []


async def test_a_delivery_sent_later_is_logged_scheduled_with_its_due_time(
    client: Client, real_redis: Redis, keys: KeySpace, pool: asyncpg.Pool
) -> None:
    send_at = (datetime.now(UTC) + timedelta(days=1)).replace(microsecond=0)
    body = {**OTP, "send_at": send_at.astimezone(timezone(timedelta(hours=2))).isoformat()}
    later = await accept(client, body, "a-1", AUTH)
    [sms] = later["deliveries"]
    assert (sms["status"], sms["reason"]) == ("SCHEDULED", "scheduled")
    projector = Projector(real_redis, pool, keys, consumer="test-projector")
    task = asyncio.create_task(projector.run())
    try:
        await wait_until(lambda: drained(real_redis, keys))
    finally:
        projector.stop()
        await asyncio.wait_for(task, 20)

    [logged] = (await log_of(client)).json()["deliveries"]
    assert (logged["id"], logged["status"], logged["reason"]) == (
        sms["id"], "SCHEDULED", "scheduled"
    )  # fmt: skip
    assert datetime.fromisoformat(logged["due_at"]) == send_at


async def test_a_recipient_nothing_was_sent_to_has_an_empty_log(
    client: Client, sent: dict[str, list[str]]
) -> None:
    response = await log_of(client, person="nobody")
    assert response.status_code == 200
    assert response.json()["deliveries"] == []
    assert response.json()["next_cursor"] is None


@pytest.mark.parametrize(
    ("query", "named"),
    [
        ("?limit=0", "limit"),
        ("?limit=501", "limit"),
        ("?status=BOGUS", "status"),
        ("?channel=FAX", "channel"),
        ("?since=yesterday", "since"),
        ("?cursor=not-a-cursor", "cursor"),
        ("?producer=orders", "producer"),  # an unknown parameter
        ("?error_class=PERMANENT", "error_class"),  # the delivery list's, not this one's
    ],
)
async def test_what_a_caller_can_get_wrong_is_422_naming_it(
    client: Client, query: str, named: str
) -> None:
    response = await log_of(client, query)
    assert response.status_code == 422, response.text
    assert response.json()["detail"].startswith(f"{named}:")


async def test_an_invalid_recipient_id_is_422(client: Client) -> None:
    response = await log_of(client, person="x" * 256)
    assert response.status_code == 422
    assert response.json()["detail"].startswith("recipient_id:")


async def test_keys_without_the_recipients_scope_are_403_and_no_key_401(client: Client) -> None:
    for headers, code in ((ORDERS, 403), (AUTH, 403), (VIEWER, 403), ({}, 401)):
        assert (await log_of(client, headers=headers)).status_code == code


async def test_the_openapi_schema_documents_the_log(client: Client) -> None:
    schema = (await client.get("/schema/openapi.json")).json()
    operation = schema["paths"]["/v1/recipients/{recipient_id}/deliveries"]["get"]
    names = {parameter["name"] for parameter in operation["parameters"]}
    assert names == {
        "recipient_id", "status", "channel", "type", "since", "until", "limit", "cursor",
    }  # fmt: skip


async def test_the_client_reads_the_log_page_by_page(
    client: Client, sent: dict[str, list[str]]
) -> None:
    whole = (await log_of(client)).json()["deliveries"]
    async with AsyncClarion("http://clarion", "profiles-secret", http_client=client) as clarion:
        first = await clarion.recipient_deliveries(PERSON, limit=3)
        rest = await clarion.recipient_deliveries(PERSON, limit=3, cursor=first.next_cursor)
        sms = await clarion.recipient_deliveries(PERSON, channel="SMS", notification_type="otp")
        with pytest.raises(InvalidRequestError, match="limit: must be an integer"):
            await clarion.recipient_deliveries(PERSON, limit=501)
    assert first.recipient_id == PERSON
    assert [d.id for d in first.deliveries + rest.deliveries] == [d["id"] for d in whole]
    assert rest.next_cursor is None
    assert sorted(d.id for d in sms.deliveries) == sorted(sent["auth"])
    assert {d.producer for d in sms.deliveries} == {"auth"}
    async with AsyncClarion("http://clarion", "orders-secret", http_client=client) as clarion:
        with pytest.raises(AuthError):
            await clarion.recipient_deliveries(PERSON)
