"""POST /v1/notifications/batch: per-item results in request order, pipelined ingest."""

from __future__ import annotations

import json
from typing import Any

import httpx
from redis.asyncio import Redis

from streams.events import NotificationAccepted
from streams.keys import KeySpace
from tests.conftest import ORDERS, VIEWER, stream_events
from tests.integration.api_support import post
from tests.integration.test_notifications_api import OTP

Client = httpx.AsyncClient


def item(key: str, **changes: Any) -> dict[str, Any]:
    return {"idempotency_key": key, **OTP, **changes}


async def post_batch(client: Client, body: Any, headers: dict[str, str] = ORDERS) -> Any:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return await client.post("/v1/notifications/batch", content=content, headers=headers)


async def accepted_count(redis: Redis, prefix: str) -> int:
    events = await stream_events(redis, KeySpace(prefix).shard(0).events)
    return sum(isinstance(event, NotificationAccepted) for event in events)


async def test_each_item_gets_its_own_result_in_order(
    client: Client, redis: Redis, key_prefix: str
) -> None:
    await post(client, OTP, key="taken")  # accepted earlier by the single endpoint
    body = {
        "notifications": [
            item("b-1"),
            item("b-2", recipient={"id": "u", "phone": "12"}),
            item("taken"),
            item("taken", data={"code": "other"}),
            item("b-3", type="nope"),
            {**OTP, "data": {"code": "1"}},
            item(""),
            item("b-1"),
        ]
    }
    response = await post_batch(client, body)
    assert response.status_code == 200
    results = response.json()["results"]
    assert [r["status_code"] for r in results] == [202, 422, 202, 422, 422, 422, 400, 202]
    assert [r["idempotency_key"] for r in results] == [
        "b-1", "b-2", "taken", "taken", "b-3", "", "", "b-1",
    ]  # fmt: skip
    assert "notifications[1].recipient.phone" in results[1]["detail"]
    assert "idempotency_key" in results[5]["detail"]
    assert results[7]["id"] == results[0]["id"]  # a repeated key in one batch: one notification
    assert results[0]["deliveries"][0]["channel"] == "SMS"
    # b-1 and the earlier "taken": two notifications, nothing else.
    assert await accepted_count(redis, key_prefix) == 2


async def test_batch_retry_is_idempotent(client: Client, redis: Redis, key_prefix: str) -> None:
    body = {"notifications": [item(f"k-{n}") for n in range(200)]}
    first = (await post_batch(client, body)).json()["results"]
    second = (await post_batch(client, body)).json()["results"]
    assert first == second
    assert await accepted_count(redis, key_prefix) == 200


async def test_batch_over_1000_items_is_422(client: Client) -> None:
    body = {"notifications": [item(f"k-{n}") for n in range(1001)]}
    response = await post_batch(client, body)
    assert response.status_code == 422
    assert "notifications" in response.json()["detail"]


async def test_batch_of_1000_is_accepted(client: Client, redis: Redis, key_prefix: str) -> None:
    body = {"notifications": [item(f"k-{n}") for n in range(1000)]}
    results = (await post_batch(client, body)).json()["results"]
    assert {r["status_code"] for r in results} == {202}
    assert len({r["id"] for r in results}) == 1000
    assert await accepted_count(redis, key_prefix) == 1000


async def test_batch_body_errors(client: Client) -> None:
    assert (await post_batch(client, b"{oops")).status_code == 400
    assert (await post_batch(client, {"notifications": []})).status_code == 422
    assert (await post_batch(client, {"items": []})).status_code == 422
    assert (await post_batch(client, {"notifications": [item("x")]}, VIEWER)).status_code == 403
