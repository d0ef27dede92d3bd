"""The projector process as ``clarion projector`` runs it: it creates its database and projects
what was accepted; while PostgreSQL is away it waits, and it stops on SIGTERM either way."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
from collections.abc import Iterator

import asyncpg
import msgspec
import pytest

from app.catalog import load_catalog
from app.ingest.fanout import Planner
from app.ingest.ingestor import Ingestor
from streams.core.keys import KeySpace
from tests.conftest import DIGEST, REPO, REQUEST, connect_test_redis, unlink_prefix
from tests.e2e.service_support import CLARION, Lines, service_env
from tests.pg import TEST_SERVER_URL, drop_database, throwaway_name, with_database
from tests.servers import free_port

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def database() -> Iterator[str]:
    """The name of a database nobody created yet; dropped afterwards."""
    name = throwaway_name()
    yield name
    asyncio.run(drop_database(name))


@pytest.fixture
def redis_keys(key_prefix: str) -> Iterator[KeySpace]:
    yield KeySpace(key_prefix)
    unlink_prefix(key_prefix)


def projector(key_prefix: str, database_url: str) -> subprocess.Popen[bytes]:
    env = service_env(key_prefix, free_port(), CLARION_DATABASE_URL=database_url)
    return subprocess.Popen([*CLARION, "projector"], env=env, cwd=REPO, stderr=subprocess.PIPE)


async def accept(keys: KeySpace, *idempotency_keys: str) -> list[str]:
    """Accept ``REQUEST`` under each key; the notification ids."""
    redis = connect_test_redis()
    try:
        ingestor = Ingestor(redis, keys, Planner(load_catalog(REPO / "clarion.toml"), DIGEST), 3600)
        outcomes = [await ingestor.ingest("orders", key, REQUEST) for key in idempotency_keys]
    finally:
        await redis.aclose()
    return [msgspec.json.decode(outcome.response)["id"] for outcome in outcomes]


async def projected(database_url: str) -> set[str]:
    try:
        connection = await asyncpg.connect(database_url)
    except (OSError, asyncpg.PostgresError):
        return set()
    try:
        return {str(r["id"]) for r in await connection.fetch("SELECT id FROM notification")}
    except asyncpg.UndefinedTableError:  # not migrated yet
        return set()
    finally:
        await connection.close()


def test_the_projector_creates_its_database_and_projects_what_was_accepted(
    key_prefix: str, redis_keys: KeySpace, database: str
) -> None:
    database_url = with_database(TEST_SERVER_URL, database)
    first = asyncio.run(accept(redis_keys, "before-start"))
    process = projector(key_prefix, database_url)
    assert process.stderr is not None
    logged = Lines(process.stderr)
    try:
        later = asyncio.run(accept(redis_keys, "while-running"))
        deadline = time.monotonic() + 30
        while asyncio.run(projected(database_url)) != {*first, *later}:
            assert time.monotonic() < deadline, "\n".join(logged.lines[-20:])
            time.sleep(0.2)
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0
    logged.wait_closed()
    assert not [line for line in logged.lines if "Traceback" in line]


@pytest.mark.usefixtures("redis_keys")
def test_the_projector_waits_for_postgresql_and_still_stops_on_sigterm(key_prefix: str) -> None:
    nowhere = f"postgresql://postgres@127.0.0.1:{free_port()}/clarion"
    process = projector(key_prefix, nowhere)
    assert process.stderr is not None
    logged = Lines(process.stderr)
    try:
        logged.wait_for("projector.database_unavailable", count=2)  # it keeps trying
        assert process.poll() is None
    finally:
        process.send_signal(signal.SIGTERM)
        started = time.monotonic()
        assert process.wait(30) == 0
    assert time.monotonic() - started < 10  # not after the whole backoff
