"""Unknown query parameters are refused, as unknown body fields are: every endpoint of the
OpenAPI schema answers 422 naming one it does not take (real Redis and PostgreSQL)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import asyncpg
import httpx
import pytest
from redis.asyncio import Redis

from app.api.app import create_app
from app.catalog import Catalog
from app.settings import Settings
from tests.conftest import OPS, ORDERS, http_client

# A value for each path parameter: any will do, the parameter is refused first.
PATH_VALUES = {"notification_id": "01a22000-0000-7000-8000-000000000000"}


@pytest.fixture
async def client(
    settings: Settings, real_redis: Redis, catalog: Catalog, pool: asyncpg.Pool
) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(settings, redis=real_redis, catalog=catalog, db=pool)
    async with http_client(app) as test_client:
        yield test_client


async def get_paths(client: httpx.AsyncClient) -> dict[str, set[str]]:
    """Each GET path of the OpenAPI schema, its path parameters filled in, with the query
    parameters it documents."""
    schema = (await client.get("/schema/openapi.json")).json()
    paths = {}
    for path, item in schema["paths"].items():
        if "get" not in item:
            continue
        filled = re.sub(r"\{(\w+)\}", lambda m: PATH_VALUES.get(m[1], "x"), path)
        parameters = item["get"].get("parameters", [])
        paths[filled] = {p["name"] for p in parameters if p["in"] == "query"}
    return paths


async def test_every_get_endpoint_refuses_an_unknown_query_parameter_naming_it(
    client: httpx.AsyncClient,
) -> None:
    paths = await get_paths(client)
    assert {"/v1/deliveries", "/v1/dlq", "/v1/campaigns", "/v1/inbox", "/v1/suppressions"} <= set(
        paths
    )
    for path, documented in paths.items():
        for headers in (OPS, ORDERS, {}):
            response = await client.get(path, params={"recipient_id": "u-1"}, headers=headers)
            assert response.status_code == 422, (path, response.text)
            detail = response.json()["detail"]
            assert detail.startswith("recipient_id: unknown query parameter"), (path, detail)
            for name in documented:  # the answer says what the endpoint takes
                assert name in detail, (path, detail)


async def test_known_parameters_pass_and_the_first_unknown_one_is_named(
    client: httpx.AsyncClient,
) -> None:
    listed = await client.get("/v1/deliveries", params={"limit": "5"}, headers=ORDERS)
    assert listed.status_code == 200, listed.text
    refused = await client.get(
        "/v1/deliveries?limit=5&statuz=FAILED&other=1", headers=ORDERS
    )  # a typo of a filter no longer widens the answer to every delivery
    assert refused.status_code == 422
    assert refused.json()["detail"] == (
        "statuz: unknown query parameter (this endpoint takes: channel, cursor, error_class, "
        "limit, since, status, type, until)"
    )
    health = await client.get("/v1/ops/health/live", params={"verbose": "1"})
    assert health.status_code == 422
    assert health.json()["detail"] == "verbose: unknown query parameter (this endpoint takes: none)"
    # A long name is cut in the answer.
    long = await client.get("/v1/dlq", params={"n" * 1000: "1"}, headers=OPS)
    assert long.status_code == 422
    assert long.json()["detail"].startswith("n" * 64 + ": unknown")


async def test_parameters_an_endpoint_reads_itself_are_not_unknown(
    client: httpx.AsyncClient,
) -> None:
    # The realtime stream takes its token in the query (EventSource sends no header).
    stream = await client.get("/v1/inbox/stream", params={"token": "t", "last_event_id": "1"})
    assert stream.status_code == 401
    # Elsewhere a token in the query is refused with a hint where it belongs.
    listing = await client.get("/v1/inbox", params={"token": "t"})
    assert listing.status_code == 401
    assert "Authorization: Bearer" in listing.json()["detail"]


async def test_pages_for_browsers_take_any_query(client: httpx.AsyncClient) -> None:
    # Not in the OpenAPI schema: a link to them may carry what it likes (utm_source, ...).
    for path in ("/schema/openapi.json", "/inbox/demo"):
        response = await client.get(path, params={"utm_source": "mail"})
        assert response.status_code != 422, (path, response.text)


async def test_the_openapi_schema_documents_the_refusal(client: httpx.AsyncClient) -> None:
    schema = (await client.get("/schema/openapi.json")).json()
    undocumented = [
        path for path, item in schema["paths"].items()
        if "get" in item and "422" not in item["get"]["responses"]
    ]  # fmt: skip
    assert undocumented == []


async def test_every_endpoint_that_changes_something_refuses_an_unknown_query_parameter_too(
    client: httpx.AsyncClient,
) -> None:
    """POST, PUT, PATCH and DELETE as GET: refused before the body is read, before anything
    is written. The providers' feedback callbacks are the one exception: their URL is the
    provider's to append to."""
    schema = (await client.get("/schema/openapi.json")).json()
    checked = 0
    for path, item in schema["paths"].items():
        filled = re.sub(r"\{(\w+)\}", lambda m: PATH_VALUES.get(m[1], "x"), path)
        for method in ("post", "put", "patch", "delete"):
            if method not in item:
                continue
            response = await client.request(
                method.upper(), filled, params={"utm_source": "x"}, headers=OPS, json={}
            )
            if path.startswith("/v1/feedback/"):
                assert response.status_code != 422 or "utm_source" not in response.text
                continue
            assert response.status_code == 422, (method, path, response.text)
            assert response.json()["detail"].startswith("utm_source: unknown query parameter")
            checked += 1
    assert checked >= 15


async def test_a_notification_sent_with_an_unknown_query_parameter_is_not_accepted(
    client: httpx.AsyncClient,
) -> None:
    body = {"recipient": {"id": "u-1", "email": "u@example.com"}, "type": "order_confirmed",
            "data": {"order_id": "A-1"}}  # fmt: skip
    headers = {**ORDERS, "Idempotency-Key": "q-1"}
    refused = await client.post("/v1/notifications?dry_run=1", json=body, headers=headers)
    assert refused.status_code == 422
    assert refused.json()["detail"].startswith("dry_run: unknown query parameter")
    accepted = await client.post("/v1/notifications", json=body, headers=headers)
    assert accepted.status_code == 202  # the key was not spent by the refused request
