"""The read model's pool in the status API: without one the write model answers and the list
is 503; given a way to connect, a later request connects."""

from __future__ import annotations

import asyncio
import time

import asyncpg
import pytest
from redis.asyncio import Redis

from app.api.app import create_app
from app.api.read_model import ReadModel
from app.settings import Settings
from projections.database import DatabaseNotReady, connect
from tests.conftest import http_client
from tests.integration.api_support import OTP, accept, deliveries, status_of
from tests.integration.delivery_support import fast_catalog


async def test_without_the_read_model_the_write_model_answers_and_the_list_is_503(
    settings: Settings, real_redis: Redis, database_url: str
) -> None:
    fast = fast_catalog()
    app = create_app(settings, redis=real_redis, catalog=fast)  # no pool
    async with http_client(app) as client:
        accepted = await accept(client, OTP, "k1")
        response = await status_of(client, accepted["id"])
        assert response.status_code == 200
        assert [d["status"] for d in response.json()["deliveries"]] == ["QUEUED"]
        response = await deliveries(client, "?status=FAILED")
        assert response.status_code == 503
        assert response.headers["Retry-After"] == "5"
        assert "PostgreSQL" in response.json()["detail"]
        assert (await deliveries(client, "?status=BOGUS")).status_code == 422

        # Given a way to connect, a later request retries: here the first attempt fails.
        attempts: list[str] = []

        async def flaky_connect() -> asyncpg.Pool:
            attempts.append("attempt")
            if len(attempts) == 1:
                raise DatabaseNotReady("PostgreSQL at test is not reachable")
            return await connect(database_url)

        read_model = ReadModel(connect=flaky_connect, retry_interval_s=0.0, wait_s=10.0)
        app.state.read_model = read_model
        try:
            assert (await deliveries(client)).status_code == 503
            response = await deliveries(client)
            assert response.status_code == 200, response.text
            assert response.json()["deliveries"] == []  # connected; nothing projected yet
            assert (await deliveries(client)).status_code == 200
            assert len(attempts) == 2
        finally:
            await read_model.close()


async def test_closing_cuts_a_connection_still_in_use_after_its_wait(database_url: str) -> None:
    """A stopping API closes the pool; a query that never ends (here: a connection held
    in a long sleep) must not hold it for ever."""
    pool = await connect(database_url)
    read_model = ReadModel(pool, close_wait_s=0.5)
    held = await pool.acquire()
    sleeping = asyncio.create_task(held.execute("SELECT pg_sleep(30)"))
    await asyncio.sleep(0.1)
    started = time.monotonic()

    await read_model.close()

    assert time.monotonic() - started < 5
    assert pool.is_closing()
    with pytest.raises((asyncpg.InterfaceError, asyncpg.ConnectionDoesNotExistError)):
        await sleeping
