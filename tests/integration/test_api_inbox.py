"""The inbox API against real Redis, with a delivery worker filling inboxes: recipient tokens
(scope ``recipients``, lifetime, tampering, expiry), a recipient reading its own inbox and
never another's, read/unread/seen/archive/read-all."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from litestar import Litestar
from redis.asyncio import Redis

from app.api.app import create_app
from app.catalog import Catalog
from app.settings import Settings
from streams.keys import KeySpace
from tests.conftest import JSON, ORDERS, PROFILES, Clock, http_client
from tests.integration.api_support import post
from tests.integration.delivery_support import running_worker, state, wait_until

Client = httpx.AsyncClient
ORIGIN = "https://app.example.com"


def order(recipient: str, order_id: str) -> dict[str, Any]:
    return {
        "recipient": {"id": recipient, "email": f"{recipient}@example.com"},
        "type": "order_confirmed",
        "data": {"order_id": order_id},
    }


@pytest.fixture
async def client(
    real_redis: Redis, settings: Settings, catalog: Catalog, clock: Clock
) -> AsyncIterator[Client]:
    """The API on the real Redis the delivery worker fills inboxes in."""
    clock.now = datetime.now(UTC)  # the worker expires what is past its TTL by Redis's clock
    inbox_settings = dataclasses.replace(settings, inbox_origins=(ORIGIN,))
    app = create_app(inbox_settings, redis=real_redis, catalog=catalog, clock=clock)
    async with http_client(app) as test_client:
        yield test_client


async def token_for(client: Client, recipient: str, **body: Any) -> str:
    response = await client.post(
        f"/v1/recipients/{recipient}/inbox-tokens", json=body, headers=PROFILES
    )
    assert response.status_code == 201, response.text
    token: str = response.json()["token"]
    return token


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def deliver(
    client: Client, redis: Redis, key_prefix: str, catalog: Catalog, orders: list[tuple[str, str]]
) -> list[str]:
    """Accept each (recipient, order) and wait until its IN_APP delivery is SENT; their ids."""
    keys = KeySpace(key_prefix)
    ids = []
    for recipient, order_id in orders:
        answer = await post(client, order(recipient, order_id), key=f"k-{order_id}")
        assert answer.status_code == 202, answer.text
        ids += [d["id"] for d in answer.json()["deliveries"] if d["channel"] == "IN_APP"]

    async def sent() -> bool:
        found = [await state(redis, keys, delivery_id) for delivery_id in ids]
        return all(f.get("status") == "SENT" for f in found)

    async with running_worker(redis, keys, catalog):
        await wait_until(sent)
    return ids


async def test_a_token_is_made_only_with_the_recipients_scope(client: Client) -> None:
    response = await client.post("/v1/recipients/u-1/inbox-tokens", json={}, headers=ORDERS)
    assert response.status_code == 403
    response = await client.post("/v1/recipients/u-1/inbox-tokens", json={})
    assert response.status_code == 401
    response = await client.post("/v1/recipients/u-1/inbox-tokens", headers=PROFILES)
    assert response.status_code == 415  # a JSON body, "{}" for the defaults
    assert "'application/json' is required" in response.json()["detail"]
    response = await client.post("/v1/recipients/u-1/inbox-tokens", headers={**PROFILES, **JSON})
    assert response.status_code == 400  # "{}" for the defaults
    response = await client.post(
        "/v1/recipients/u-1/inbox-tokens", json={"ttl_seconds": 86400}, headers=PROFILES
    )
    assert response.status_code == 422
    assert "ttl_seconds" in response.json()["detail"]
    response = await client.post(
        "/v1/recipients/u-1/inbox-tokens", json={"ttl_seconds": 600}, headers=PROFILES
    )
    assert response.status_code == 201
    assert response.json()["recipient_id"] == "u-1"


async def test_a_recipient_reads_and_marks_its_own_inbox(
    client: Client, real_redis: Redis, key_prefix: str, catalog: Catalog
) -> None:
    first, second = await deliver(
        client, real_redis, key_prefix, catalog, [("u-1", "A-1"), ("u-1", "A-2")]
    )
    token = await token_for(client, "u-1")
    page = (await client.get("/v1/inbox", headers=bearer(token))).json()
    assert [m["id"] for m in page["messages"]] == [second, first]
    assert page["messages"][0]["title"] == "Order confirmed"
    assert page["messages"][0]["body"] == "Order A-2 is confirmed."
    assert page["counts"] == {"unread": 2, "unseen": 2}
    assert page["next"] is None
    one = (await client.get("/v1/inbox?limit=1", headers=bearer(token))).json()
    assert one["next"] == second
    older = (await client.get(f"/v1/inbox?limit=1&before={second}", headers=bearer(token))).json()
    assert [m["id"] for m in older["messages"]] == [first]

    read = await client.post(f"/v1/inbox/{first}/read", headers=bearer(token))
    assert read.status_code == 200, read.text
    assert read.json()["read_at"] is not None
    assert (await state(real_redis, KeySpace(key_prefix), first))["status"] == "READ"
    counts = (await client.get("/v1/inbox/counts", headers=bearer(token))).json()
    assert counts == {"unread": 1, "unseen": 2}
    archived = await client.post(f"/v1/inbox/{second}/archive", headers=bearer(token))
    assert archived.status_code == 200
    listed = (await client.get("/v1/inbox?filter=archived", headers=bearer(token))).json()
    assert [m["id"] for m in listed["messages"]] == [second]
    await client.post(f"/v1/inbox/{second}/unarchive", headers=bearer(token))
    marked = (await client.post("/v1/inbox/read-all", headers=bearer(token))).json()
    assert marked == {"marked": 1}
    unread = (await client.get("/v1/inbox?filter=unread", headers=bearer(token))).json()
    assert unread["messages"] == []
    bad = await client.post(f"/v1/inbox/{first}/shred", headers=bearer(token))
    assert bad.status_code == 404
    assert "action" in bad.json()["detail"]


async def test_a_token_never_reads_another_recipients_inbox(
    client: Client, real_redis: Redis, key_prefix: str, catalog: Catalog
) -> None:
    [theirs] = await deliver(client, real_redis, key_prefix, catalog, [("u-2", "B-1")])
    mine = await token_for(client, "u-1")
    assert (await client.get("/v1/inbox", headers=bearer(mine))).json()["messages"] == []
    for action in ("read", "archive"):
        response = await client.post(f"/v1/inbox/{theirs}/{action}", headers=bearer(mine))
        assert response.status_code == 404
    assert (await state(real_redis, KeySpace(key_prefix), theirs))["status"] == "SENT"
    # An API key is no recipient token, and a token is no API key.
    assert (await client.get("/v1/inbox", headers=ORDERS)).status_code == 401
    assert (await client.get("/v1/deliveries", headers=bearer(mine))).status_code == 401


async def test_a_missing_tampered_or_expired_token_is_401(
    make_app: Callable[..., Litestar], clock: Clock
) -> None:
    async with http_client(make_app()) as client:
        token = await token_for(client, "u-1", ttl_seconds=60)
        assert (await client.get("/v1/inbox")).status_code == 401
        tampered = token[:-2] + ("A" if token[-2] != "A" else "B") + token[-1]
        response = await client.get("/v1/inbox", headers=bearer(tampered))
        assert response.status_code == 401
        assert "forged" in response.json()["detail"] or "malformed" in response.json()["detail"]
        assert (await client.get(f"/v1/inbox/counts?token={token}")).status_code == 200
        clock.now += timedelta(seconds=61)
        response = await client.get("/v1/inbox", headers=bearer(token))
        assert response.status_code == 401
        assert "expired" in response.json()["detail"]


async def test_the_demo_page_and_its_script_are_served_with_a_strict_policy(
    client: Client,
) -> None:
    page = await client.get("/inbox/demo")
    script = await client.get("/inbox/demo.js")
    assert page.status_code == script.status_code == 200
    assert page.headers["content-type"] == "text/html; charset=utf-8"
    assert script.headers["content-type"].startswith("text/javascript")
    policy = page.headers["content-security-policy"]
    assert "script-src 'self'" in policy
    assert "default-src 'none'" in policy
    assert '<script src="/inbox/demo.js">' in page.text
    assert "EventSource" in script.text
