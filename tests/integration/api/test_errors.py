"""The Redis error handler against a Redis that is not there: 503, nothing half written."""

from __future__ import annotations

from typing import Any

from redis.asyncio import Redis

from tests.conftest import http_client
from tests.integration.api_support import OTP, post


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
