"""CORS for the inbox API: pages of configured origins may call ``/v1/inbox``; other origins
and every other path of the API stay closed to cross-origin pages."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator

import httpx
import pytest
from redis.asyncio import Redis

from app.api.app import create_app
from app.catalog import Catalog
from app.settings import Settings
from tests.conftest import ORDERS, PROFILES, http_client
from tests.integration.inbox.api.test_routes import ORIGIN, bearer, token_for

Client = httpx.AsyncClient


@pytest.fixture
async def client(redis: Redis, settings: Settings, catalog: Catalog) -> AsyncIterator[Client]:
    app = create_app(
        dataclasses.replace(settings, inbox_origins=(ORIGIN,)), redis=redis, catalog=catalog
    )
    async with http_client(app) as test_client:
        yield test_client


async def test_cors_opens_the_inbox_to_configured_origins_only(client: Client) -> None:
    preflight = {"Origin": ORIGIN, "Access-Control-Request-Method": "GET"}
    answer = await client.options("/v1/inbox", headers=preflight)
    assert answer.status_code == 204
    assert answer.headers["access-control-allow-origin"] == ORIGIN
    assert "Authorization" in answer.headers["access-control-allow-headers"]
    stranger = {**preflight, "Origin": "https://evil.example"}
    assert (await client.options("/v1/inbox", headers=stranger)).status_code == 403
    token = await token_for(client, "u-1")
    allowed = await client.get("/v1/inbox/counts", headers={**bearer(token), "Origin": ORIGIN})
    assert allowed.headers["access-control-allow-origin"] == ORIGIN
    other = await client.get(
        "/v1/inbox/counts", headers={**bearer(token), "Origin": "https://evil.example"}
    )
    assert "access-control-allow-origin" not in other.headers
    # The producer API is not opened to any origin.
    api = await client.get("/v1/deliveries", headers={**ORDERS, "Origin": ORIGIN})
    assert "access-control-allow-origin" not in api.headers


async def test_a_change_from_another_site_is_taken_only_from_a_configured_origin_on_the_inbox(
    client: Client,
) -> None:
    token = await token_for(client, "u-1")
    for site in ("cross-site", "same-site"):
        stranger = {**bearer(token), "Origin": "https://evil.example", "Sec-Fetch-Site": site}
        refused = await client.post("/v1/inbox/read-all", headers=stranger)
        assert refused.status_code == 403, refused.text
        assert "a page of another site may not change anything here" in refused.json()["detail"]
        assert "access-control-allow-origin" not in refused.headers
        app = {**bearer(token), "Origin": ORIGIN, "Sec-Fetch-Site": site}
        taken = await client.post("/v1/inbox/read-all", headers=app)
        assert (taken.status_code, taken.json()) == (200, {"marked": 0})
        assert taken.headers["access-control-allow-origin"] == ORIGIN
        # The app's origin calls the inbox, not the producer API.
        token_request = await client.post(
            "/v1/recipients/u-1/inbox-tokens", json={}, headers={**PROFILES, "Origin": ORIGIN}
        )
        assert token_request.status_code == 403, token_request.text


def test_settings_name_a_bad_origin() -> None:
    from app.setting_values import SettingsError  # noqa: PLC0415
    from app.settings import Settings  # noqa: PLC0415

    with pytest.raises(SettingsError, match="CLARION_INBOX_ORIGINS"):
        Settings.from_env({"CLARION_INBOX_ORIGINS": "https://ok.example, javascript:alert(1)"})
    parsed = Settings.from_env(
        {"CLARION_INBOX_ORIGINS": "https://a.example/, http://127.0.0.1:8000"}
    )
    assert parsed.inbox_origins == ("https://a.example", "http://127.0.0.1:8000")
    assert dataclasses.replace(parsed).inbox_origins == parsed.inbox_origins
