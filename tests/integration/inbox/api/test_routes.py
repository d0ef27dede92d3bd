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
from streams.core.keys import KeySpace
from tests.conftest import JSON, ORDERS, PROFILES, Clock, http_client, stream_events
from tests.integration.api.test_unsubscribe import link as unsubscribe_link
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
        assert (await client.get("/v1/inbox/counts", headers=bearer(token))).status_code == 200
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


async def test_a_token_in_the_query_is_taken_by_the_stream_only(client: Client) -> None:
    token = await token_for(client, "u-1")
    for method, path in (
        ("GET", "/v1/inbox"),
        ("GET", "/v1/inbox/counts"),
        ("POST", "/v1/inbox/read-all"),
        ("POST", "/v1/inbox/0190a7c0-0000-7000-8000-000000000000/read"),
    ):
        response = await client.request(method, f"{path}?token={token}")
        assert response.status_code == 401, path
        assert "Authorization: Bearer" in response.json()["detail"], path
        assert "stream only" in response.json()["detail"], path
    assert (await client.get("/v1/inbox", headers=bearer(token))).status_code == 200


async def revoke(client: Client, recipient: str, headers: dict[str, str] = PROFILES) -> Any:
    return await client.post(f"/v1/recipients/{recipient}/inbox-tokens/revoke", headers=headers)


async def test_revoking_refuses_every_token_made_before_on_every_endpoint(
    client: Client, real_redis: Redis, key_prefix: str, catalog: Catalog
) -> None:
    [message_id] = await deliver(client, real_redis, key_prefix, catalog, [("u-1", "V-1")])
    old, others = await token_for(client, "u-1"), await token_for(client, "u-2")
    assert (await client.get("/v1/inbox/counts", headers=bearer(old))).json()["unread"] == 1
    assert (await revoke(client, "u-1", ORDERS)).status_code == 403  # send+read only
    answer = await revoke(client, "u-1")
    assert answer.status_code == 200, answer.text
    assert answer.json()["recipient_id"] == "u-1"
    assert "revoked_before" in answer.json()
    for method, path in (
        ("GET", "/v1/inbox"),
        ("GET", "/v1/inbox/counts"),
        ("POST", "/v1/inbox/read-all"),
        ("POST", f"/v1/inbox/{message_id}/read"),
        ("POST", "/v1/inbox/not-a-message/read"),
        ("GET", "/v1/inbox/stream"),
    ):
        response = await client.request(method, path, headers=bearer(old))
        assert response.status_code == 401, path
        assert response.json()["detail"] == "the recipient token is revoked", path
    events = await stream_events(real_redis, KeySpace(key_prefix).shard(0).events)
    assert not any(type(event).__name__ == "InboxMessageRead" for event in events)
    # A token made after it works; another recipient's never stopped working.
    new = await token_for(client, "u-1")
    assert (await client.get("/v1/inbox/counts", headers=bearer(new))).json()["unread"] == 1
    assert (await client.get("/v1/inbox", headers=bearer(others))).status_code == 200


async def test_a_revoke_names_a_recipient_as_a_token_request_does(client: Client) -> None:
    assert (await revoke(client, "u-1", {})).status_code == 401
    assert (await revoke(client, "x" * 300)).status_code == 422


async def test_recipient_token_keys_rotate_without_touching_unsubscribe_links_or_digests(
    real_redis: Redis, settings: Settings, catalog: Catalog, clock: Clock
) -> None:
    old_key, new_key = (
        ("k1", b"the-old-recipient-token-key"),
        ("k2", b"the-new-recipient-token-key"),
    )

    def app_with(*keys: tuple[str, bytes]) -> Litestar:
        return create_app(
            dataclasses.replace(settings, inbox_token_keys=keys),
            redis=real_redis, catalog=catalog, clock=clock,
        )  # fmt: skip

    async with http_client(app_with()) as derived:
        from_digest = await token_for(derived, "u-1")
    async with http_client(app_with(old_key)) as before:
        made_before = await token_for(before, "u-1")
    async with http_client(app_with(new_key, old_key)) as rotating:
        made_during = await token_for(rotating, "u-1")
        assert (made_before[:3], made_during[:3]) == ("k1.", "k2.")
        for token in (made_before, made_during):
            assert (await rotating.get("/v1/inbox", headers=bearer(token))).status_code == 200
        # Configured keys replace the one derived from the digest secret.
        response = await rotating.get("/v1/inbox", headers=bearer(from_digest))
        assert response.status_code == 401
    async with http_client(app_with(new_key)) as after:
        assert (await after.get("/v1/inbox", headers=bearer(made_during))).status_code == 200
        response = await after.get("/v1/inbox", headers=bearer(made_before))
        assert (response.status_code, response.json()["detail"]) == (
            401, "the recipient token is forged",
        )  # fmt: skip
        # An unsubscribe link (signed under the digest secret) still works.
        assert (await after.get(unsubscribe_link(clock))).status_code == 200
