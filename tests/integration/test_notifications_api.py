"""POST /v1/notifications against real Redis and fakeredis: idempotency, validation, auth."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis

from streams import codec
from streams.events import DeliveryQueued, NotificationAccepted
from streams.keys import KeySpace
from streams.vocabulary import Priority
from tests.conftest import AUTH, ORDERS, VIEWER, http_client, stream_events
from tests.integration.api_support import post

Client = httpx.AsyncClient

OTP = {
    "recipient": {"id": "user-1", "phone": "+4915112345678"},
    "type": "otp",
    "data": {"code": "123456"},
}
ORDER = {
    "recipient": {"id": "user-2", "email": "anna@example.com", "push_tokens": ["tok-1"]},
    "type": "order_confirmed",
    "data": {"order_id": "A-17"},
}


async def events(redis: Redis, prefix: str) -> list[Any]:
    return await stream_events(redis, KeySpace(prefix).shard(0).events)


async def test_accepts_and_writes_events_and_work_items(
    client: Client, redis: Redis, key_prefix: str
) -> None:
    response = await post(client, ORDER)
    assert response.status_code == 202
    body = response.json()
    assert [d["channel"] for d in body["deliveries"]] == ["EMAIL", "PUSH", "IN_APP"]
    assert {d["status"] for d in body["deliveries"]} == {"QUEUED"}

    recorded = await events(redis, key_prefix)
    accepted = recorded[0]
    assert isinstance(accepted, NotificationAccepted)
    assert accepted.notification_id == body["id"]
    assert accepted.producer == "orders"
    assert [type(e) for e in recorded[1:]] == [DeliveryQueued] * 3
    shard = KeySpace(key_prefix).shard(0)
    work = await redis.xrange(shard.work(Priority.NORMAL))
    items = [codec.decode_work_item(fields[b"w"]) for _, fields in work]
    assert [i.delivery_id for i in items] == [d["id"] for d in body["deliveries"]]
    assert items[0].address == "anna@example.com"
    # Events never carry contact addresses.
    raw = b"".join(fields[b"e"] for _, fields in await redis.xrange(shard.events))
    assert b"anna@example.com" not in raw
    assert b"tok-1" not in raw


async def test_retry_with_same_key_and_body_returns_same_answer_and_appends_nothing(
    client: Client, redis: Redis, key_prefix: str
) -> None:
    first = await post(client, OTP)
    stream = KeySpace(key_prefix).shard(0).events
    length = await redis.xlen(stream)
    # Same body with other key order and spacing is the same request.
    reordered = json.dumps({"data": {"code": "123456"}, "type": "otp", **OTP}, indent=2)
    second = await post(client, reordered.encode())
    assert second.status_code == 202
    assert second.json() == first.json()
    assert second.headers["Idempotent-Replayed"] == "true"
    assert await redis.xlen(stream) == length


async def test_same_key_different_body_is_422(
    client: Client, redis: Redis, key_prefix: str
) -> None:
    await post(client, OTP)
    length = await redis.xlen(KeySpace(key_prefix).shard(0).events)
    response = await post(client, {**OTP, "data": {"code": "999999"}})
    assert response.status_code == 422
    assert "Idempotency-Key" in response.json()["detail"]
    assert await redis.xlen(KeySpace(key_prefix).shard(0).events) == length


async def test_fifty_concurrent_identical_requests_create_one_notification(
    client: Client, redis: Redis, key_prefix: str
) -> None:
    responses = await asyncio.gather(*(post(client, ORDER, key="same") for _ in range(50)))
    assert {r.status_code for r in responses} <= {202, 409}
    ids = {r.json()["id"] for r in responses if r.status_code == 202}
    assert len(ids) == 1
    accepted = [e for e in await events(redis, key_prefix) if isinstance(e, NotificationAccepted)]
    assert len(accepted) == 1


async def test_two_producers_with_the_same_key_do_not_collide(client: Client) -> None:
    mine = await post(client, OTP, key="order-123", headers=ORDERS)
    theirs = await post(client, {**OTP, "data": {"code": "555555"}}, key="order-123", headers=AUTH)
    assert mine.status_code == theirs.status_code == 202
    assert mine.json()["id"] != theirs.json()["id"]


@pytest.mark.parametrize(
    ("body", "status", "names"),
    [
        ({**OTP, "recipient": {"id": "u", "phone": "0151 1234"}}, 422, "recipient.phone"),
        ({**OTP, "recipient": {"id": "u", "email": "not-an-email"}}, 422, "recipient.email"),
        ({**OTP, "recipient": {"id": ""}}, 422, "recipient.id"),
        ({**OTP, "recipient": {"id": 7}}, 422, "recipient.id"),
        ({**OTP, "priority": "URGENT"}, 422, "priority"),
        ({**OTP, "channels": ["FAX"]}, 422, "channels"),
        ({**OTP, "channels": ["SMS", "SMS"]}, 422, "channels"),
        ({**OTP, "channels": ["PUSH"]}, 422, "channels"),
        ({**OTP, "ttl_seconds": 0}, 422, "ttl_seconds"),
        ({**OTP, "locale": "english please"}, 422, "locale"),
        ({**OTP, "type": "no_such_type"}, 422, "type"),
        ({**OTP, "data": {}}, 422, "data.code"),
        ({**OTP, "data": []}, 422, "data"),
        ({k: v for k, v in OTP.items() if k != "type"}, 422, "`type`"),
        ({**OTP, "surprise": 1}, 422, "surprise"),
        ({**OTP, "recipient": {"id": "u", "fax": "1"}}, 422, "fax"),
        ([OTP], 422, "object"),
        (b"{not json", 400, "body"),
        (b"", 400, "body"),
    ],
)
async def test_invalid_bodies_are_rejected_naming_the_field(
    client: Client, redis: Redis, key_prefix: str, body: Any, status: int, names: str
) -> None:
    response = await post(client, body)
    assert response.status_code == status, response.text
    assert names in response.json()["detail"]
    assert await redis.xlen(KeySpace(key_prefix).shard(0).events) == 0


@pytest.mark.parametrize(
    ("key", "problem"), [(None, "required"), ("", "required"), ("k" * 256, "255")]
)
async def test_bad_idempotency_key_is_400(client: Client, key: str | None, problem: str) -> None:
    response = await post(client, OTP, key=key)
    assert response.status_code == 400
    assert "Idempotency-Key" in response.json()["detail"]
    assert problem in response.json()["detail"]


async def test_key_of_255_characters_is_fine(client: Client) -> None:
    assert (await post(client, OTP, key="k" * 255)).status_code == 202


async def test_body_over_the_limit_is_413(make_app: Any, redis: Redis, key_prefix: str) -> None:
    async with http_client(make_app(max_body_bytes=2048)) as client:
        big = {**OTP, "data": {"code": "1", "padding": "x" * 4096}}
        response = await post(client, big)
    assert response.status_code == 413
    assert await redis.xlen(KeySpace(key_prefix).shard(0).events) == 0


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic b3JkZXJzOng="}],
)
async def test_without_a_valid_key_is_401(client: Client, headers: dict[str, str]) -> None:
    response = await post(client, OTP, headers=headers)
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"].startswith("Bearer")


async def test_without_the_send_scope_is_403(client: Client) -> None:
    response = await post(client, OTP, headers=VIEWER)
    assert response.status_code == 403
    assert "send" in response.json()["detail"]


async def test_health_needs_no_key(client: Client) -> None:
    response = await client.get("/v1/ops/health")
    assert response.status_code == 200
    assert response.json()["redis"] == "ok"


async def test_openapi_documents_the_request_body(client: Client) -> None:
    schema = (await client.get("/schema/openapi.json")).json()
    body = schema["paths"]["/v1/notifications"]["post"]["requestBody"]
    assert body["content"]["application/json"]["schema"]["$ref"].endswith("NotificationRequest")


async def test_redis_down_is_503_and_nothing_is_half_written(catalog: Any, settings: Any) -> None:
    from app.api.app import create_app  # noqa: PLC0415
    from tests.servers import free_port  # noqa: PLC0415

    dead = Redis.from_url(f"redis://127.0.0.1:{free_port()}/0")
    app = create_app(settings, redis=dead, catalog=catalog)
    async with http_client(app) as client:
        response = await post(client, OTP)
    await dead.aclose()
    assert response.status_code == 503
    assert response.headers["Retry-After"] == "1"
    assert "retry" in response.json()["detail"]
