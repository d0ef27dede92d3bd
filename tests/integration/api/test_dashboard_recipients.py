"""The dashboard's recipient search against real Redis and PostgreSQL: shown only to a key
with the ``recipients`` scope, the recipient's log from every producer, escaped, paged, no
script; 403 to any other key."""

from __future__ import annotations

import asyncio
import html
import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

import asyncpg
import httpx
import pytest
from litestar import Litestar
from markupsafe import escape
from redis.asyncio import Redis

from app.api import dashboard_recipients
from app.api.app import create_app
from app.settings import Settings
from projections.projector import Projector
from streams.core.consumer_groups import PROJECTOR_GROUP
from streams.core.keys import KeySpace
from tests.conftest import AUTH, ORDERS, basic, http_client
from tests.integration.delivery_support import fast_catalog, wait_until

Client = httpx.AsyncClient
# A recipient id is any printable text: this one must come back escaped.
PERSON = '<i>p&q"</i>'
SEARCHER = {"Authorization": basic("orders", "orders-crm-secret")}  # read + recipients
READER = {"Authorization": basic("orders", "orders-secret")}  # read only
SEARCH = "/dashboard/recipients"


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


async def drained(redis: Redis, keys: KeySpace) -> bool:
    stream = keys.shard(0).events
    groups = [g for g in await redis.xinfo_groups(stream) if g["name"] == PROJECTOR_GROUP.encode()]
    if not groups or (await redis.xpending(stream, PROJECTOR_GROUP))["pending"]:
        return False
    last = groups[0]["last-delivered-id"].decode()
    return not await redis.xrange(stream, f"({last}", "+", count=1)


@pytest.fixture
async def sent(client: Client, real_redis: Redis, keys: KeySpace, pool: asyncpg.Pool) -> Any:
    """PERSON's deliveries from "orders" (EMAIL, PUSH, IN_APP) and "auth" (one SMS)."""
    bodies = [
        (ORDERS, {"recipient": {"id": PERSON, "email": "anna@example.com"},
                  "type": "order_confirmed", "data": {"order_id": "A-17"}}),
        (AUTH, {"recipient": {"id": PERSON, "phone": "+4915112345678"}, "type": "otp",
                "data": {"code": "1"}}),
    ]  # fmt: skip
    answers = []
    for n, (headers, body) in enumerate(bodies):
        response = await client.post(
            "/v1/notifications", json=body, headers={**headers, "Idempotency-Key": f"k-{n}"}
        )
        assert response.status_code == 202, response.text
        answers.append(response.json())
    projector = Projector(real_redis, pool, keys, consumer="test-projector")
    task = asyncio.create_task(projector.run())
    try:
        await wait_until(lambda: drained(real_redis, keys))
    finally:
        projector.stop()
        await asyncio.wait_for(task, 20)
    return answers


def logged_ids(page: str) -> list[str]:
    return re.findall(r'<tr class="delivery" data-id="([0-9a-f-]+)">', page)


async def test_the_dashboard_shows_the_search_only_to_a_key_with_the_recipients_scope(
    client: Client,
) -> None:
    with_scope = await client.get("/dashboard", headers=SEARCHER)
    without = await client.get("/dashboard", headers=READER)
    assert with_scope.status_code == 200
    assert without.status_code == 200
    assert 'action="/dashboard/recipients"' in with_scope.text
    assert "/dashboard/recipients" not in without.text
    assert "recipient-search" not in without.text


async def test_a_search_shows_every_producers_deliveries_escaped(
    client: Client, sent: list[dict[str, Any]]
) -> None:
    response = await client.get(SEARCH, params={"recipient_id": PERSON}, headers=SEARCHER)
    assert response.status_code == 200, response.text
    page = response.text
    assert response.headers["content-security-policy"].startswith("default-src 'none'")
    assert "<script" not in page
    assert PERSON not in page
    assert str(escape(PERSON)) in page  # as Jinja escapes it
    assert "&lt;i&gt;p&amp;q&#34;&lt;/i&gt;" in page
    ids = [d["id"] for answer in sent for d in answer["deliveries"]]
    assert sorted(logged_ids(page)) == sorted(ids)
    assert "<td>auth</td>" in page
    assert "<td>orders</td>" in page
    assert "no_address" in page  # the PUSH delivery's reason
    # Only the caller's own notification links to its timeline.
    order, otp = sent[0]["id"], sent[1]["id"]
    assert f'href="/dashboard/notifications/{order}"' in page
    assert f'href="/dashboard/notifications/{otp}"' not in page
    assert otp in page
    assert "anna@example.com" not in page


async def test_pages_follow_the_older_link(
    client: Client, sent: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dashboard_recipients, "PAGE_SIZE", 3)
    first = (await client.get(SEARCH, params={"recipient_id": PERSON}, headers=SEARCHER)).text
    [older] = re.findall(r'<a id="older" href="([^"]+)"', first)
    link = html.unescape(older)
    assert link.startswith(f"{SEARCH}?recipient_id={quote(PERSON, safe='/')}&cursor=")
    second = await client.get(link, headers=SEARCHER)
    assert second.status_code == 200
    assert len(logged_ids(first)) == 3
    assert len(logged_ids(second.text)) == 1
    assert 'id="older"' not in second.text
    assert set(logged_ids(first)).isdisjoint(logged_ids(second.text))


async def test_an_empty_search_shows_the_box_and_an_unknown_recipient_an_empty_log(
    client: Client,
) -> None:
    empty = await client.get(SEARCH, headers=SEARCHER)
    assert empty.status_code == 200
    assert 'id="recipient-search"' in empty.text
    assert 'id="log"' not in empty.text
    nobody = await client.get(SEARCH, params={"recipient_id": "nobody"}, headers=SEARCHER)
    assert nobody.status_code == 200
    assert "nothing was sent to this recipient" in nobody.text


async def test_keys_without_the_scope_get_403_and_bad_input_a_4xx_page(client: Client) -> None:
    refused = await client.get(SEARCH, params={"recipient_id": "someone"}, headers=READER)
    assert refused.status_code == 403
    assert "recipients" in refused.text
    assert (await client.get(SEARCH, params={"recipient_id": "x"})).status_code == 401
    too_long = await client.get(SEARCH, params={"recipient_id": "x" * 256}, headers=SEARCHER)
    assert too_long.status_code == 422
    bad_cursor = await client.get(
        SEARCH, params={"recipient_id": "x", "cursor": "nope"}, headers=SEARCHER
    )
    assert bad_cursor.status_code == 422
    assert "cursor: invalid" in bad_cursor.text


async def test_a_delivery_sent_later_shows_scheduled_with_its_due_time(
    client: Client, real_redis: Redis, keys: KeySpace, pool: asyncpg.Pool
) -> None:
    body = {"recipient": {"id": PERSON, "phone": "+4915112345678"}, "type": "otp",
            "data": {"code": "1"}, "send_at": "2099-01-01T00:00:00Z"}  # fmt: skip
    too_far = await client.post(
        "/v1/notifications", json=body, headers={**ORDERS, "Idempotency-Key": "k-far"}
    )
    assert too_far.status_code == 422
    assert "send_at: at most 30 days ahead" in too_far.json()["detail"]
    response = await client.post(
        "/v1/notifications",
        json={**body, "send_at": None, "delay": "P1DT2H"},
        headers={**ORDERS, "Idempotency-Key": "k-later"},
    )
    assert response.status_code == 202, response.text
    [sms] = response.json()["deliveries"]
    due = datetime.fromtimestamp(sms["due_ms"] / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    projector = Projector(real_redis, pool, keys, consumer="test-projector")
    task = asyncio.create_task(projector.run())
    try:
        await wait_until(lambda: drained(real_redis, keys))
    finally:
        projector.stop()
        await asyncio.wait_for(task, 20)

    page = (await client.get(SEARCH, params={"recipient_id": PERSON}, headers=SEARCHER)).text
    assert logged_ids(page) == [sms["id"]]
    assert ">SCHEDULED</span>" in page
    assert f"due {due}" in page
    timeline = await client.get(f"/dashboard/notifications/{response.json()['id']}", headers=READER)
    assert timeline.status_code == 200, timeline.text
    assert f"due {due}" in timeline.text
    dashboard = (await client.get("/dashboard", headers=READER)).text
    assert '<span id="scheduled-waiting">1</span> waiting' in dashboard
    assert '<span id="scheduled-later">1</span> sent later on request' in dashboard
    assert f"next due {due}" in dashboard
