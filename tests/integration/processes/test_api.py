"""The API process's application, built from the environment as uvicorn builds it."""

from __future__ import annotations

import pytest
from litestar.testing import AsyncTestClient
from redis.asyncio import Redis

from app.processes import api as main
from tests.conftest import API_KEYS, DIGEST_SECRET, REDIS_URL, REPO
from tests.integration.api_support import OTP, accept, deliveries, status_of


async def test_the_api_starts_and_serves_while_postgres_is_unreachable(
    monkeypatch: pytest.MonkeyPatch, key_prefix: str, real_redis: Redis
) -> None:
    for name, value in {
        "CLARION_REDIS_URL": REDIS_URL,
        "CLARION_DATABASE_URL": "postgresql://postgres@127.0.0.1:1/clarion",  # nothing there
        "CLARION_KEY_PREFIX": key_prefix,
        "CLARION_CONFIG": str(REPO / "clarion.toml"),
        "CLARION_API_KEYS": API_KEYS,
        "CLARION_DIGEST_SECRET": DIGEST_SECRET.decode(),
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(main, "configure_logging", lambda *_: None)  # keep the tests' logging
    async with AsyncTestClient(main.build()) as client:  # runs the start-up hooks
        accepted = await accept(client, OTP, "k1")
        response = await status_of(client, accepted["id"])
        assert response.status_code == 200
        assert response.json()["deliveries"][0]["status"] == "QUEUED"
        assert (await deliveries(client)).status_code == 503
        # It made the groups at start-up; only the read model is missing.
        ready = (await client.get("/v1/ops/health/ready")).json()
        assert ready["checks"]["consumer_groups"] == "ok"
        assert ready["checks"]["postgresql"] != "ok"
