"""What the API tests share over HTTP: posting and accepting a notification, asking for its
status and the delivery list, the API with its lifespan running, and reading
``GET /v1/ops/lag`` and ``GET /metrics``."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families
from redis.asyncio import Redis

from app.api.app import create_app
from app.catalog import Catalog
from app.settings import Settings
from tests.conftest import JSON, ORDERS, VIEWER, http_client

Client = httpx.AsyncClient
OTP = {
    "recipient": {"id": "user-1", "phone": "+4915112345678"},
    "type": "otp",
    "data": {"code": "123456"},
}


async def post(
    client: Client, body: Any, key: str | None = "key-1", headers: dict[str, str] = ORDERS
) -> Any:
    all_headers = {**JSON, **headers}
    if key is not None:
        all_headers["Idempotency-Key"] = key
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return await client.post("/v1/notifications", content=content, headers=all_headers)


def otp(directives: dict[str, Any] | None = None) -> dict[str, Any]:
    data: dict[str, Any] = {"code": "1"}
    if directives:
        data["sandbox"] = {"SMS": directives}
    return {"recipient": {"id": "u-1", "phone": "+4915112345678"}, "type": "otp", "data": data}


@asynccontextmanager
async def api(
    redis: Redis, settings: Settings, catalog: Catalog
) -> AsyncIterator[httpx.AsyncClient]:
    """The API with its lifespan running, so its metrics are flushed to Redis."""
    app = create_app(settings, redis=redis, catalog=catalog)
    async with app.lifespan(), http_client(app) as client:
        yield client


async def lag_report(client: httpx.AsyncClient) -> dict[str, Any]:
    response = await client.get("/v1/ops/lag", headers=VIEWER)
    assert response.status_code == 200, response.text
    report: dict[str, Any] = response.json()
    return report


def stream_row(report: dict[str, Any], stream: str) -> dict[str, Any]:
    [row] = [r for r in report["streams"] if r["stream"] == stream and r["shard"] == 0]
    return row


async def scrape(client: httpx.AsyncClient) -> dict[tuple[str, frozenset[Any]], float]:
    """``/metrics`` parsed: each sample's value by name and labels."""
    response = await client.get("/metrics", headers=VIEWER)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def sample(samples: dict[tuple[str, frozenset[Any]], float], name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


async def accept(client: Client, body: dict[str, Any], key: str) -> dict[str, Any]:
    response = await client.post(
        "/v1/notifications", json=body, headers={**ORDERS, "Idempotency-Key": key}
    )
    assert response.status_code == 202, response.text
    answer: dict[str, Any] = response.json()
    return answer


async def status_of(client: Client, notification_id: str, headers: dict[str, str] = ORDERS) -> Any:
    return await client.get(f"/v1/notifications/{notification_id}", headers=headers)


async def deliveries(client: Client, query: str = "", headers: dict[str, str] = ORDERS) -> Any:
    return await client.get(f"/v1/deliveries{query}", headers=headers)
