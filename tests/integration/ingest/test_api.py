"""POST /v1/notifications and POST /v1/notifications/batch against real Redis and fakeredis:
idempotency, validation, auth, and per-item results in request order."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import msgspec
import pytest
from litestar import Litestar
from redis.asyncio import Redis

from app.api.app import create_app
from app.catalog import Catalog, parse_catalog
from app.ingest.answers import IngestAnswer
from app.ingest.api import _entry_of_raw
from app.ingest.ingestor import Ingestor
from app.settings import Settings
from streams.core import codec
from streams.core.errors import Malformed
from streams.core.events import DeliveryQueued, NotificationAccepted
from streams.core.keys import KeySpace
from streams.core.vocabulary import Priority
from tests.conftest import AUTH, JSON, ORDERS, REPO, VIEWER, http_client, stream_events
from tests.integration.api_support import OTP, post

Client = httpx.AsyncClient
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


async def test_openapi_documents_the_request_body(client: Client) -> None:
    schema = (await client.get("/schema/openapi.json")).json()
    body = schema["paths"]["/v1/notifications"]["post"]["requestBody"]
    assert body["content"]["application/json"]["schema"]["$ref"].endswith("NotificationRequest")


def item(key: str, **changes: Any) -> dict[str, Any]:
    return {"idempotency_key": key, **OTP, **changes}


async def post_batch(client: Client, body: Any, headers: dict[str, str] = ORDERS) -> Any:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return await client.post(
        "/v1/notifications/batch", content=content, headers={**JSON, **headers}
    )


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


def restricted_app(redis: Redis, settings: Settings, extra_catalog: str) -> Litestar:
    """The API with the shipped catalog plus ``extra_catalog`` (TOML appended to it)."""
    catalog = parse_catalog((REPO / "clarion.toml").read_text() + extra_catalog)
    return create_app(settings, redis=redis, catalog=catalog)


async def test_a_type_names_the_producers_that_may_send_it(
    redis: Redis, settings: Settings, key_prefix: str
) -> None:
    only_auth = (
        (REPO / "clarion.toml")
        .read_text()
        .replace("[types.otp]\n", '[types.otp]\nproducers = ["auth"]\n')
    )
    app = create_app(settings, redis=redis, catalog=parse_catalog(only_auth))
    async with http_client(app) as client:
        refused = await post(client, OTP, key="o-1")
        batch = await post_batch(client, {"notifications": [item("o-2"), item("o-3", **ORDER)]})
        allowed = await post(client, OTP, key="a-1", headers=AUTH)
    assert refused.status_code == 403
    assert refused.json()["detail"] == "type: producer 'orders' may not send 'otp' notifications"
    assert [r["status_code"] for r in batch.json()["results"]] == [403, 202]
    assert allowed.status_code == 202
    assert await accepted_count(redis, key_prefix) == 2  # the order and auth's OTP


async def test_a_producer_over_its_quota_gets_429_and_nothing_is_written(
    redis: Redis, settings: Settings, key_prefix: str
) -> None:
    quota = "\n[quotas.default]\nrequests = { per_second = 0.5, burst = 2 }\n"
    async with http_client(restricted_app(redis, settings, quota)) as client:
        answers = [await post(client, OTP, key=f"q-{n}") for n in range(3)]
        batch = await post_batch(client, {"notifications": [item("q-9")]})
    assert [a.status_code for a in answers] == [202, 202, 429]
    assert answers[2].headers["retry-after"] == "2"
    assert "over its ingest quota" in answers[2].json()["detail"]
    assert batch.status_code == 429
    assert await accepted_count(redis, key_prefix) == 2


async def test_a_batch_larger_than_the_notifications_burst_is_413(
    redis: Redis, settings: Settings, key_prefix: str
) -> None:
    quota = "\n[quotas.default]\nnotifications = { per_second = 100, burst = 10 }\n"
    async with http_client(restricted_app(redis, settings, quota)) as client:
        response = await post_batch(client, {"notifications": [item(f"b-{n}") for n in range(11)]})
    assert response.status_code == 413
    assert "at most 10 at once" in response.json()["detail"]
    assert await accepted_count(redis, key_prefix) == 0


async def test_a_batch_item_over_the_single_post_limit_fails_alone(
    make_app: Any, redis: Redis, key_prefix: str
) -> None:
    big = item("big", data={"code": "1", "padding": "x" * 5000})
    async with http_client(make_app(max_body_bytes=4096)) as client:
        response = await post_batch(client, {"notifications": [item("small"), big]})
    small, large = response.json()["results"]
    assert (small["status_code"], large["status_code"]) == (202, 413)
    assert large["idempotency_key"] == "big"
    assert "notifications[1]: " in large["detail"]
    assert "at most 4096" in large["detail"]
    assert await accepted_count(redis, key_prefix) == 1


# Nested far deeper than the decoder follows (its recursion limit, about 1000 levels).
DEEP = b"[" * 5000 + b"]" * 5000


def deep_otp(key: str | None = None) -> bytes:
    """An OTP whose ``data`` holds ``DEEP``; a batch item when it has a ``key``."""
    head = b'"idempotency_key": "%s", ' % key.encode() if key else b""
    recipient = b'{"id": "user-1", "phone": "+4915112345678"}'
    return b'{%s"recipient": %s, "type": "otp", "data": {"code": "1", "x": %s}}' % (
        head, recipient, DEEP,
    )  # fmt: skip


async def test_a_single_post_nested_past_the_decoders_limit_is_422_naming_data(
    client: Client,
) -> None:
    refused = await post(client, deep_otp())
    assert refused.status_code == 422
    assert refused.json()["detail"] == "data: objects and arrays nest at most 32 levels deep"


async def test_a_batch_item_nested_past_the_decoders_limit_fails_alone(
    client: Client, redis: Redis, key_prefix: str
) -> None:
    body = b'{"notifications": [%s, %s, %s]}' % (
        json.dumps(item("d-1")).encode(), deep_otp("d-2"), json.dumps(item("d-3")).encode(),
    )  # fmt: skip
    response = await post_batch(client, body)
    assert response.status_code == 200
    first, deep, last = response.json()["results"]
    assert (first["status_code"], deep["status_code"], last["status_code"]) == (202, 422, 202)
    assert deep["idempotency_key"] == "d-2"
    assert deep["detail"] == (
        "notifications[1]: data: objects and arrays nest at most 32 levels deep"
    )
    assert await accepted_count(redis, key_prefix) == 2


async def test_a_batch_item_with_a_string_that_is_not_utf8_fails_alone(
    client: Client, redis: Redis, key_prefix: str
) -> None:
    broken = json.dumps(item("u-2", data={"code": "CODE"})).encode().replace(b"CODE", b"\xff\xfe")
    body = b'{"notifications": [%s, %s]}' % (json.dumps(item("u-1")).encode(), broken)
    response = await post_batch(client, body)
    assert response.status_code == 200
    good, bad = response.json()["results"]
    assert (good["status_code"], bad["status_code"]) == (202, 400)
    assert bad["detail"] == "notifications[1]: a string is not valid UTF-8 (invalid start byte)"
    assert await accepted_count(redis, key_prefix) == 1


async def test_a_refused_batch_item_with_a_string_that_is_not_utf8_fails_alone(
    client: Client,
) -> None:
    broken = b'{"idempotency_key": "u-3", "fax": 1, "data": {"x": "\xff"}}'
    response = await post_batch(client, b'{"notifications": [%s]}' % broken)
    assert response.status_code == 200
    assert response.json()["results"][0]["status_code"] == 422


def test_an_item_its_own_decoding_cannot_follow_is_answered_alone() -> None:
    # The batch's decoding may follow an item a little deeper than the item's own decoding
    # can (more frames are on the stack by then): then the item alone fails.
    key, answer = _entry_of_raw(3, msgspec.Raw(deep_otp("k")), 1 << 20)
    assert isinstance(answer.error, Malformed)
    assert (key, answer.error.detail) == ("", "notifications[3]: nested too deeply to read")


RESERVED = "Idempotency-Key: the prefix 'campaign:' is reserved for campaigns"


async def test_a_key_of_the_form_campaigns_use_is_refused_with_422(
    client: Client, redis: Redis, key_prefix: str
) -> None:
    response = await post(client, OTP, key="campaign:019ae:user-5")
    assert (response.status_code, response.json()["detail"]) == (422, RESERVED)
    body = {"notifications": [item("campaign:019ae:user-5"), item("campaigns-2026")]}
    results = (await post_batch(client, body)).json()["results"]
    assert [(r["status_code"], r.get("detail")) for r in results] == [
        (422, RESERVED),
        (202, None),  # only the prefix is reserved
    ]
    assert await accepted_count(redis, key_prefix) == 1


async def test_a_high_request_goes_ahead_of_batches_and_a_normal_one_does_not(
    redis: Redis, settings: Settings, catalog: Catalog
) -> None:
    app = create_app(settings, redis=redis, catalog=catalog)
    ingestor: Ingestor = app.state.ingestor
    busy_while_ingested: list[bool] = []
    ingest = ingestor.ingest

    async def watched(*args: Any) -> IngestAnswer:
        busy_while_ingested.append(ingestor.high_first.busy)
        return await ingest(*args)

    ingestor.ingest = watched  # type: ignore[method-assign]
    async with http_client(app) as client:
        high = await post(client, OTP, key="h-1")
        normal = await post(client, ORDER, key="n-1")
        invalid = await post(client, {**OTP, "data": {}}, key="h-2")
    assert [high.status_code, normal.status_code, invalid.status_code] == [202, 202, 422]
    assert busy_while_ingested == [True, False, True]
    assert not ingestor.high_first.busy  # every turn ended, the refused one's too


@pytest.mark.parametrize(
    ("schedule", "detail"),
    [
        ({"delay": "P1M"}, "delay: years and months are not durations of fixed length"),
        ({"delay": "PT1.5M"}, "delay: only seconds may have a fraction"),
        ({"delay": "soon"}, "delay: an ISO 8601 duration such as PT15M or P1DT2H, or seconds"),
        ({"delay": -5}, "delay: Expected `float` >= 0.0"),
        ({"delay": "P40D"}, "delay: at most 30 days ahead (CLARION_MAX_SCHEDULE=2592000)"),
        (
            {"send_at": "2999-01-01T00:00:00Z"},
            "send_at: at most 30 days ahead (CLARION_MAX_SCHEDULE=2592000)",
        ),
        (
            {"send_at": "2026-12-24T09:00:00"},
            "send_at: Expected `datetime` with a timezone component",
        ),
        (
            {"send_at": "2026-12-24T09:00:00Z", "delay": 60},
            "send_at, delay: give one of them, not both",
        ),
    ],
)
async def test_a_send_time_that_cannot_be_used_is_422_as_the_docs_say(
    client: Client, schedule: dict[str, Any], detail: str
) -> None:
    response = await post(client, {**OTP, **schedule})
    assert response.status_code == 422, response.text
    assert response.json()["detail"].startswith(detail)
