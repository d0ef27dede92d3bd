"""Private Redis and PostgreSQL really started from this machine's binaries in a temporary
directory, used, stopped, and started again on the data they kept."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest
import redis

from devtools.local_processes import alive, read_number
from devtools.local_services import Profile, private_services, stop_left_running
from tests.servers import free_port

# Starting a cluster with initdb takes a few seconds; two starts and stops, more on a busy machine.
pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def home() -> Iterator[Path]:
    """A directory the ``postgres`` user can reach when the tests run as root (pytest's own
    temporary directories are private to their owner)."""
    workdir = Path(tempfile.mkdtemp(prefix="clarion-services-"))
    workdir.chmod(0o755)
    try:
        yield workdir / ".clarion"
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def nothing_there() -> Profile:
    """A profile whose default URLs name ports nobody listens on: both servers are needed."""
    return Profile(
        "CLARION_TEST_REDIS_URL", f"redis://127.0.0.1:{free_port()}/0",
        "CLARION_TEST_DATABASE_URL", f"postgresql://postgres@127.0.0.1:{free_port()}/postgres",
        "postgres",
    )  # fmt: skip


async def database_answer(url: str, statement: str) -> object:
    connection = await asyncpg.connect(url)
    try:
        return await connection.fetchval(statement)
    finally:
        await connection.close()


def test_both_servers_start_answer_keep_their_data_and_stop(home: Path) -> None:
    lines: list[str] = []
    profile = nothing_there()
    with private_services(home, profile, {}, lines.append) as exports:
        pids = [read_number(home / name / "pid") for name in ("redis", "postgres")]
        client = redis.Redis.from_url(exports["CLARION_TEST_REDIS_URL"])
        client.set("kept", "between runs")
        assert client.config_get("appendonly") == {"appendonly": "yes"}
        client.close()
        database_url = exports["CLARION_TEST_DATABASE_URL"]
        asyncio.run(database_answer(database_url, "CREATE TABLE kept (n int)"))

    assert all(pid is not None and not alive(pid) for pid in pids), pids
    assert not (home / "redis" / "pid").exists()
    assert not (home / "postgres" / "pid").exists()
    assert any(line.startswith("started a private Redis 7.") for line in lines), lines
    assert "stopped the private PostgreSQL" in lines

    # Again: the same ports (recorded, still free) and the data of the first run.
    with private_services(home, profile, {}, lines.append) as again:
        assert again == exports
        client = redis.Redis.from_url(again["CLARION_TEST_REDIS_URL"])
        assert client.get("kept") == b"between runs"
        client.close()
        tables = "SELECT count(*) FROM pg_tables WHERE tablename = 'kept'"
        assert asyncio.run(database_answer(again["CLARION_TEST_DATABASE_URL"], tables)) == 1
        pids = [read_number(home / name / "pid") for name in ("redis", "postgres")]
    assert all(pid is not None and not alive(pid) for pid in pids), pids


def test_a_second_command_uses_the_running_servers_and_leaves_them_running(home: Path) -> None:
    profile = nothing_there()
    with private_services(home, profile, {}, lambda _: None) as first:
        lines: list[str] = []
        with private_services(home, profile, {}, lines.append) as second:
            assert second == first
        assert sum("already running" in line for line in lines) == 2, lines
        pids = [read_number(home / name / "pid") for name in ("redis", "postgres")]
        assert all(pid is not None and alive(pid) for pid in pids), pids
        client = redis.Redis.from_url(first["CLARION_TEST_REDIS_URL"])
        assert client.ping()
        client.close()
    assert all(pid is not None and not alive(pid) for pid in pids)


def test_down_stops_servers_a_killed_command_left_running(home: Path) -> None:
    profile = nothing_there()
    servers = private_services(home, profile, {}, lambda _: None)
    servers.__enter__()  # as a command killed with SIGKILL would: never left
    pids = [read_number(home / name / "pid") for name in ("redis", "postgres")]
    lines: list[str] = []
    try:
        stop_left_running(home, lines.append)
        assert all(pid is not None and not alive(pid) for pid in pids), pids
        assert [line.split(" (")[0] for line in lines] == [
            "stopped the private redis",
            "stopped the private postgres",
        ]
    finally:
        servers.__exit__(None, None, None)  # reaps the stopped children


@pytest.mark.standalone_redis  # a cluster's URL names several nodes
def test_no_server_starts_while_the_defaults_answer(home: Path) -> None:
    """This machine's own Redis and PostgreSQL answer the default URLs: nothing changes."""
    defaults = Profile(
        "CLARION_TEST_REDIS_URL", os.environ.get("CLARION_TEST_REDIS_URL", "") or
        "redis://127.0.0.1:6379/0",
        "CLARION_TEST_DATABASE_URL", os.environ.get("CLARION_TEST_DATABASE_URL", "") or
        "postgresql://postgres@127.0.0.1:5432/postgres", "postgres",
    )  # fmt: skip
    with private_services(home, defaults, {}, lambda _: None) as exports:
        assert exports == {}
    assert not home.exists()
