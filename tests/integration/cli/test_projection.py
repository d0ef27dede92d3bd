"""``clarion projection rebuild`` as an operator runs it, against real Redis and PostgreSQL:
what it says before the swap, the question when notifications would be lost, and clear
errors."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import asyncpg
import pytest
from click.testing import CliRunner, Result

from app.cli import projection as projection_command
from app.cli.main import main
from tests.conftest import REDIS_URL


@pytest.fixture(autouse=True)
def tests_logging(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep the tests' logging: the command would configure the process's own."""
    monkeypatch.setattr(projection_command, "configure_logging", lambda *_: None)


async def rebuild(key_prefix: str, database_url: str, *args: str, answer: str = "") -> Result:
    env = {"CLARION_REDIS_URL": REDIS_URL, "CLARION_KEY_PREFIX": key_prefix,
           "CLARION_DATABASE_URL": database_url}  # fmt: skip
    return await asyncio.to_thread(
        CliRunner().invoke, main, ["projection", "rebuild", *args], env=env, input=answer
    )


async def lose_a_notification(pool: asyncpg.Pool) -> None:
    """A notification in the live table whose history is gone (as after retention)."""
    async with pool.acquire() as connection:
        await connection.execute(
            "INSERT INTO notification VALUES ($1, 'shop', 'k', 'otp', 'HIGH', 'u-1', 'en', $2, $2)",
            "01a22000-0000-7000-8000-000000000000",
            datetime(2020, 1, 1, tzinfo=UTC),
        )


async def test_a_rebuild_with_nothing_to_lose_is_swapped_in(
    key_prefix: str, database_url: str, pool: asyncpg.Pool
) -> None:
    result = await rebuild(key_prefix, database_url, "--yes")
    assert result.exit_code == 0, result.output
    assert "History: 0 events in PostgreSQL" in result.output
    assert "notification: 0 rows now, 0 rebuilt" in result.output
    assert result.output.rstrip().endswith("Rebuilt tables swapped in.")


async def test_a_rebuild_that_would_lose_notifications_asks_first(
    key_prefix: str, database_url: str, pool: asyncpg.Pool
) -> None:
    await lose_a_notification(pool)

    refused = await rebuild(key_prefix, database_url, answer="n\n")

    assert refused.exit_code == 0, refused.output
    assert "notification: 1 rows now, 0 rebuilt" in refused.output
    assert "1 notifications of the current tables have no history left" in refused.output
    assert refused.output.rstrip().endswith("Not swapped: the read model is unchanged.")
    async with pool.acquire() as connection:
        assert await connection.fetchval("SELECT count(*) FROM notification") == 1

    agreed = await rebuild(key_prefix, database_url, "--yes")
    assert "have no history left" not in agreed.output  # --yes asks nothing
    assert agreed.output.rstrip().endswith("Rebuilt tables swapped in.")
    async with pool.acquire() as connection:
        assert await connection.fetchval("SELECT count(*) FROM notification") == 0


async def test_what_stops_a_rebuild_is_said_without_a_traceback(
    key_prefix: str, database_url: str
) -> None:
    nowhere = await asyncio.to_thread(
        CliRunner().invoke, main, ["projection", "rebuild", "--yes"],
        env={"CLARION_REDIS_URL": "redis://127.0.0.1:1/0", "CLARION_DATABASE_URL": database_url},
    )  # fmt: skip
    assert nowhere.exit_code == 1
    assert "not reachable" in nowhere.output
    bad = await asyncio.to_thread(
        CliRunner().invoke, main, ["projection", "rebuild"], env={"CLARION_SHARDS": "many"}
    )
    assert bad.exit_code == 1
    assert "CLARION_SHARDS" in bad.output
    for result in (nowhere, bad):
        assert "Traceback" not in result.output
