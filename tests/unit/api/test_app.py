"""The application factory: every request starts a fresh log context bound to its
notification, and the batch endpoint has a body limit of its own."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
import structlog
from redis.asyncio import Redis

from app.api.app import bind_request_context, create_app
from app.catalog import Catalog
from app.settings import Settings
from tests.conftest import ORDERS

OTP = {"recipient": {"id": "u-1", "phone": "+4915112345678"}, "type": "otp", "data": {"code": "1"}}


@pytest.fixture(autouse=True)
def clean_log_context() -> Iterator[None]:
    structlog.contextvars.clear_contextvars()
    yield
    structlog.contextvars.clear_contextvars()


async def test_a_request_starts_a_fresh_log_context_bound_to_its_notification() -> None:
    structlog.contextvars.bind_contextvars(delivery_id="left over from another request")
    request: Any = SimpleNamespace(path_params={"notification_id": "019bc123-4567"})
    await bind_request_context(request)
    assert structlog.contextvars.get_contextvars() == {"notification_id": "019bc123-4567"}

    await bind_request_context(SimpleNamespace(path_params={}))  # type: ignore[arg-type]
    assert structlog.contextvars.get_contextvars() == {}


async def test_the_batch_endpoint_takes_bodies_larger_than_the_single_one(
    fake: Redis, catalog: Catalog, settings: Settings
) -> None:
    limits = dataclasses.replace(settings, max_body_bytes=2048, max_batch_body_bytes=8192)
    app = create_app(limits, redis=fake, catalog=catalog)
    batch = {"notifications": [{**OTP, "idempotency_key": f"k-{n}"} for n in range(20)]}
    too_big = {"notifications": [{**OTP, "idempotency_key": f"k-{n}"} for n in range(100)]}
    assert 2048 < len(json.dumps(batch)) < 8192 < len(json.dumps(too_big))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://clarion") as client:
        accepted = await client.post("/v1/notifications/batch", json=batch, headers=ORDERS)
        refused = await client.post("/v1/notifications/batch", json=too_big, headers=ORDERS)
        single = await client.post(
            "/v1/notifications",
            json={**OTP, "data": {"code": "1", "padding": "x" * 4096}},
            headers={**ORDERS, "Idempotency-Key": "big"},
        )
    assert accepted.status_code == 200, accepted.text
    assert {r["status_code"] for r in accepted.json()["results"]} == {202}
    assert refused.status_code == 413
    assert single.status_code == 413


async def test_the_schema_is_public_json_and_yaml_without_third_party_scripts(
    fake: Redis, catalog: Catalog, settings: Settings
) -> None:
    """Litestar's HTML viewers load scripts from a CDN, without integrity hashes, onto the
    dashboard's origin: only the Swagger UI that Clarion serves itself is there
    (tests/e2e/api/test_docs.py reads it)."""
    app = create_app(settings, redis=fake, catalog=catalog)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://clarion") as client:
        answers = {
            path: await client.get(path)
            for path in ("/schema", "/schema/openapi.json", "/schema/openapi.yaml")
        }
        viewers = [
            (await client.get(f"/schema/{name}")).status_code
            for name in ("redoc", "elements", "rapidoc", "scalar")
        ]
        swagger = await client.get("/schema/swagger")
    assert {path: a.status_code for path, a in answers.items()} == dict.fromkeys(answers, 200)
    assert answers["/schema"].json()["info"]["title"] == "Clarion"
    assert answers["/schema/openapi.yaml"].text.startswith("info:") or "openapi:" in (
        answers["/schema/openapi.yaml"].text
    )
    assert set(viewers) == {404}
    assert all("<script" not in a.text for a in answers.values())
    assert swagger.status_code == 200
    assert "script-src 'self';" in swagger.headers["content-security-policy"]
    assert "<script>" not in swagger.text
