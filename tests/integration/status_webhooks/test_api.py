"""``PUT``, ``GET`` and ``DELETE /v1/status-webhook``: a producer sets its own webhook with its
``send`` key; the URL is checked like a webhook URL and the secret like a Standard Webhooks
secret; a secret Clarion makes is shown once; nothing is ever answered with a 5xx."""

from __future__ import annotations

import base64
import json
from typing import Any

import httpx
import msgspec
import pytest
from redis.asyncio import Redis

from app.api.app import create_app
from app.catalog import Catalog, parse_catalog
from app.settings import Settings
from streams.core.keys import KeySpace
from streams.status_webhooks.store import StatusWebhookStore
from tests.conftest import AUTH, JSON, ORDERS, PROFILES, REPO, VIEWER, http_client

Client = httpx.AsyncClient
PATH = "/v1/status-webhook"
URL = "https://hooks.example.com/clarion/statuses?token=abc"
SECRET = "whsec_" + base64.b64encode(b"s" * 32).decode()


async def put(client: Client, body: Any, headers: dict[str, str] = ORDERS) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return await client.put(PATH, content=content, headers={**JSON, **headers})


async def test_a_producer_sets_its_webhook_and_gets_a_secret_shown_once(
    client: Client, redis: Redis, key_prefix: str
) -> None:
    response = await put(client, {"url": URL})
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["url"] == URL
    assert answer["secret_set"] is True
    assert answer["max_batch"] == 1
    secret = answer["secret"]
    assert secret.startswith("whsec_")
    assert len(base64.b64decode(secret.removeprefix("whsec_"))) == 32
    stored = await StatusWebhookStore(redis, KeySpace(key_prefix)).get("orders")
    assert stored is not None
    assert stored.secret == secret

    shown = await client.get(PATH, headers=ORDERS)
    assert shown.status_code == 200
    assert shown.json() == {
        "url": URL, "secret_set": True, "max_batch": 1, "waiting": 0, "dead_letters": 0,
    }  # fmt: skip
    assert secret not in shown.text


async def test_a_secret_of_the_producers_own_is_kept_and_not_echoed(
    client: Client, redis: Redis, key_prefix: str
) -> None:
    response = await put(client, {"url": URL, "secret": SECRET, "max_batch": 50})
    assert response.status_code == 200, response.text
    assert "secret" not in response.json()
    assert response.json()["max_batch"] == 50
    stored = await StatusWebhookStore(redis, KeySpace(key_prefix)).get("orders")
    assert stored is not None
    assert (stored.secret, stored.max_batch) == (SECRET, 50)


async def test_each_producer_has_its_own(client: Client) -> None:
    assert (await put(client, {"url": URL})).status_code == 200
    assert (await client.get(PATH, headers=AUTH)).status_code == 404
    assert (await put(client, {"url": "https://auth.example.com/s"}, AUTH)).status_code == 200
    assert (await client.get(PATH, headers=ORDERS)).json()["url"] == URL


async def test_delete_stops_it_and_drops_what_waited(
    client: Client, redis: Redis, key_prefix: str
) -> None:
    assert (await put(client, {"url": URL})).status_code == 200
    hooks = KeySpace(key_prefix).status_webhooks("orders")
    await redis.xadd(hooks.outbox, {"d": "x", "v": 1, "b": b"{}"})
    assert (await client.get(PATH, headers=ORDERS)).json()["waiting"] == 1
    assert (await client.delete(PATH, headers=ORDERS)).status_code == 204
    assert (await client.get(PATH, headers=ORDERS)).status_code == 404
    assert await redis.exists(hooks.outbox, hooks.config) == 0
    assert (await client.delete(PATH, headers=ORDERS)).status_code == 204  # idempotent


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE"])
async def test_it_needs_a_send_key(client: Client, method: str) -> None:
    content = json.dumps({"url": URL}).encode()
    assert (await client.request(method, PATH, content=content)).status_code == 401
    for headers in (VIEWER, PROFILES):
        response = await client.request(method, PATH, content=content, headers=headers)
        assert response.status_code == 403, response.text
        assert "send" in response.json()["detail"]


@pytest.mark.parametrize(
    ("body", "status", "detail"),
    [
        ({"url": "http://hooks.example.com/x"}, 422, "url: plain http to hooks.example.com"),
        ({"url": "https://10.1.2.3/x"}, 422, "url: 10.1.2.3 is a private address"),
        ({"url": "https://127.0.0.1:8443/x"}, 422, "url: 127.0.0.1 is a loopback address"),
        (
            {"url": "https://[::ffff:169.254.169.254]/"},
            422,
            "url: ::ffff:a9fe:a9fe is a link-local",
        ),
        ({"url": "https://user:pw@hooks.example.com/"}, 422, "url: the URL may not hold user"),
        ({"url": "https://hooks.example.com/ä"}, 422, "url: the URL is not an ASCII URL"),
        ({"url": "https://hooks.example.com/\x00"}, 422, "url: the URL is not an ASCII URL"),
        ({"url": "ftp://hooks.example.com/"}, 422, "url: the URL must be http or https"),
        ({"url": "https://hooks.example.com:25/"}, 422, "url: port 25 of hooks.example.com"),
        ({"url": ""}, 422, "url: Expected `str` of length >= 1"),
        ({"url": URL, "secret": "s3cret"}, 422, "secret: is not a Standard Webhooks secret"),
        ({"url": URL, "secret": "whsec_c2hvcnQ="}, 422, "secret: holds 5 bytes"),
        ({"url": URL, "max_batch": 0}, 422, "max_batch: Expected `int` >= 1"),
        ({"url": URL, "max_batch": 501}, 422, "max_batch: Expected `int` <= 500"),
        ({"url": URL, "fax": 1}, 422, "Object contains unknown field `fax`"),
        ({}, 422, "Object missing required field `url`"),
        (b'{"url": ', 400, "body: "),
        (b"", 400, "body: a JSON object is required"),
    ],
)
async def test_what_is_wrong_is_named(client: Client, body: Any, status: int, detail: str) -> None:
    response = await put(client, body)
    assert response.status_code == status, response.text
    assert response.json()["detail"].startswith(detail), response.json()["detail"]
    assert (await client.get(PATH, headers=ORDERS)).status_code == 404


async def test_an_invalid_secret_is_never_echoed(client: Client) -> None:
    wrong = "whsec_" + "not base64 at all!" * 3
    response = await put(client, {"url": URL, "secret": wrong})
    assert response.status_code == 422
    assert "not base64" not in response.text


async def test_the_catalog_may_allow_plain_http_and_private_networks(
    redis: Redis, catalog: Catalog, settings: Settings
) -> None:
    text = (REPO / "clarion.toml").read_text() + (
        '\n[status_webhooks]\nallow_http_hosts = ["127.0.0.1"]\nallow_networks = ["127.0.0.0/8"]\n'
    )
    allowing = msgspec.structs.replace(catalog, status_webhooks=parse_catalog(text).status_webhooks)
    app = create_app(settings, redis=redis, catalog=allowing)
    async with http_client(app) as client:
        assert (await put(client, {"url": "http://127.0.0.1:9000/s"})).status_code == 200
        # Only what is listed: another private network is still refused.
        response = await put(client, {"url": "http://10.0.0.1/s"})
        assert response.status_code == 422
        assert response.json()["detail"].startswith("url: plain http to 10.0.0.1")
