"""The schema as a document and the function behind each operation, for the docs site's API
reference (the Swagger UI page is tested end to end, in tests/e2e/api/test_docs.py)."""

from __future__ import annotations

import httpx
from redis.asyncio import Redis

from app.api.app import create_app
from app.api.docs import operations, schema_document
from app.catalog import Catalog
from app.ingest.api import create_notification
from app.settings import Settings


async def test_the_document_is_the_schema_served_with_the_same_examples_every_time(
    fake: Redis, catalog: Catalog, settings: Settings
) -> None:
    document = schema_document(create_app(settings, redis=fake, catalog=catalog))
    again = schema_document(create_app(settings, redis=fake, catalog=catalog))
    assert document == again
    served_app = create_app(settings, redis=fake, catalog=catalog)
    transport = httpx.ASGITransport(app=served_app)
    async with httpx.AsyncClient(transport=transport, base_url="http://clarion") as client:
        served = (await client.get("/schema/openapi.json")).json()
    assert served.keys() == document.keys()
    assert served["paths"].keys() == document["paths"].keys()


def test_each_operation_is_found_by_its_method_and_schema_path(
    fake: Redis, catalog: Catalog, settings: Settings
) -> None:
    app = create_app(settings, redis=fake, catalog=catalog)
    found = operations(app)
    assert found[("post", "/v1/notifications")] is create_notification.fn
    paths = schema_document(app)["paths"]
    for path, methods in paths.items():
        for method in methods:
            assert (method, path) in found
