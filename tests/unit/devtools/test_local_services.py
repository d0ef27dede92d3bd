"""When private servers are started (only for default URLs nothing answers), which port they
get, and what a missing or old ``redis-server`` is told."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from app.settings import Settings
from devtools import local_postgres
from devtools.local_processes import (
    LocalServiceError,
    choose_port,
    free_port,
    package_manager,
    port_is_free,
    read_number,
)
from devtools.local_services import (
    APP,
    REDIS_INSTALL,
    TESTS,
    Profile,
    checked_redis_version,
    is_default,
    missing_message,
    needs_private,
    parse_redis_version,
    private_services,
    redis_binary,
    stop_left_running,
)
from tests import conftest, pg


def test_the_profiles_defaults_are_the_applications_and_the_tests() -> None:
    assert (APP.redis_default, APP.database_default) == (
        Settings().redis_url, Settings().database_url,
    )  # fmt: skip
    # What tests/conftest.py and tests/pg.py use when their variables are unset.
    assert TESTS.redis_default == "redis://127.0.0.1:6379/0"
    assert TESTS.database_default == "postgresql://postgres@127.0.0.1:5432/postgres"
    assert conftest.REDIS_URL in {TESTS.redis_default, *_configured("CLARION_TEST_REDIS_URL")}
    assert pg.TEST_SERVER_URL in {TESTS.database_default, *_configured("CLARION_TEST_DATABASE_URL")}


def _configured(variable: str) -> set[str]:
    return {os.environ[variable]} if variable in os.environ else set()


@pytest.mark.parametrize(
    ("env", "default"),
    [
        ({}, True),
        ({"CLARION_REDIS_URL": ""}, True),
        ({"CLARION_REDIS_URL": "   "}, True),
        ({"CLARION_REDIS_URL": "redis://127.0.0.1:6379/0"}, True),
        ({"CLARION_REDIS_URL": "redis://127.0.0.1:6379/1"}, False),
        ({"CLARION_REDIS_URL": "redis://cache:6379/0"}, False),
        ({"CLARION_TEST_REDIS_URL": "redis://elsewhere:1/0"}, True),  # not the app's variable
    ],
)
def test_a_url_is_default_when_unset_blank_or_set_to_the_default(
    env: dict[str, str], default: bool
) -> None:
    assert is_default(env, APP.redis_variable, APP.redis_default) is default


def listening() -> socket.socket:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    return server


def test_a_private_server_is_needed_only_for_a_default_url_nothing_answers() -> None:
    with listening() as server:
        port = server.getsockname()[1]
        answering = f"redis://127.0.0.1:{port}/0"
        assert not needs_private({}, "URL", answering)
    # The same port, closed now: nothing answers the default.
    assert needs_private({}, "URL", answering)
    # A URL someone set is theirs, answering or not.
    assert not needs_private({"URL": "redis://127.0.0.1:1/0"}, "URL", answering)


def test_the_recorded_port_is_kept_while_it_is_free(tmp_path: Path) -> None:
    first = choose_port(tmp_path)
    assert read_number(tmp_path / "port") == first
    assert choose_port(tmp_path) == first


def test_a_new_port_is_chosen_and_recorded_when_the_recorded_one_is_taken(
    tmp_path: Path,
) -> None:
    with listening() as server:
        taken = server.getsockname()[1]
        (tmp_path / "port").write_text(f"{taken}\n")
        assert not port_is_free(taken)
        chosen = choose_port(tmp_path)
    assert chosen != taken
    assert read_number(tmp_path / "port") == chosen


def test_a_damaged_port_file_is_replaced(tmp_path: Path) -> None:
    (tmp_path / "port").write_text("six thousand\n")
    chosen = choose_port(tmp_path)
    assert 1024 < chosen < 65536
    assert read_number(tmp_path / "port") == chosen


@pytest.mark.parametrize(
    ("answer", "version"),
    [
        ("Redis server v=7.0.15 sha=00000000:0 malloc=jemalloc-5.3.0 bits=64", (7, 0, 15)),
        ("Redis server v=7.2.4 sha=00000000:0", (7, 2, 4)),
        ("Redis server v=6.2.14 sha=00000000:0", (6, 2, 14)),
        ("Valkey server v=8.0.1 sha=00000000:0", (8, 0, 1)),
        ("something else", None),
    ],
)
def test_the_version_is_read_from_the_servers_answer(
    answer: str, version: tuple[int, ...] | None
) -> None:
    assert parse_redis_version(answer) == version


def test_redis_7_and_newer_are_accepted() -> None:
    assert checked_redis_version("/x/redis-server", "Redis server v=7.0.0 sha=0", None) == "7.0.0"
    assert checked_redis_version("/x/redis-server", "Redis server v=7.4.2 sha=0", None) == "7.4.2"


def test_an_older_redis_is_refused_with_the_upgrade_command() -> None:
    with pytest.raises(LocalServiceError) as refused:
        checked_redis_version("/x/redis-server", "Redis server v=6.2.14 sha=0", "apt-get")
    assert str(refused.value) == (
        "/x/redis-server is Redis 6.2.14; Clarion needs Redis 7.0 or newer: "
        "sudo apt-get install redis-server, or run everything in containers with "
        "'docker compose up'"
    )


def test_an_unreadable_version_is_refused_too() -> None:
    with pytest.raises(LocalServiceError, match=r"of unknown version \('garbage'\)"):
        checked_redis_version("/x/redis-server", "garbage", "brew")


def test_a_missing_redis_server_names_the_install_command_and_docker_compose() -> None:
    with pytest.raises(LocalServiceError) as missing:
        redis_binary(which=lambda _: None)
    message = str(missing.value)
    assert message.startswith("redis-server is not installed and no server answers")
    assert "'docker compose up'" in message


@pytest.mark.parametrize(
    ("system", "tools", "manager", "command"),
    [
        ("Darwin", {"apt-get"}, "brew", "brew install redis"),
        ("Linux", {"apt-get", "dnf"}, "apt-get", "sudo apt-get install redis-server"),
        ("Linux", {"dnf"}, "dnf", "sudo dnf install redis"),
        ("Linux", set(), None, "install redis-server with your package manager"),
    ],
)
def test_the_install_command_is_the_platforms(
    system: str, tools: set[str], manager: str | None, command: str
) -> None:
    found = package_manager(
        system, which=lambda tool: f"/usr/bin/{tool}" if tool in tools else None
    )
    assert found == manager
    assert missing_message("redis-server", REDIS_INSTALL, found) == (
        f"redis-server is not installed and no server answers at the default URL: {command}, "
        "or run everything in containers with 'docker compose up'"
    )


def test_down_leaves_a_process_alone_whose_pid_a_stale_file_names(tmp_path: Path) -> None:
    """After a reboot the pid in a pid file may be another process's: only a live process
    whose recorded port answers is stopped."""
    for name in ("redis", "postgres"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "pid").write_text(f"{os.getpid()}\n")  # this very test: alive
        (tmp_path / name / "port").write_text(f"{free_port()}\n")  # nothing answers there
    lines: list[str] = []
    stop_left_running(tmp_path, lines.append)
    assert lines == [
        f"no private redis runs in {tmp_path / 'redis'}",
        f"no private postgres runs in {tmp_path / 'postgres'}",
    ]


def test_nothing_starts_when_a_needed_server_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Redis is not started only to be stopped again because PostgreSQL is missing."""

    def no_postgres() -> tuple[Path, str | None]:
        raise LocalServiceError("the PostgreSQL server (postgres, initdb) is not installed")

    monkeypatch.setattr(local_postgres, "server", no_postgres)
    nothing = Profile(
        "R", f"redis://127.0.0.1:{free_port()}/0",
        "D", f"postgresql://postgres@127.0.0.1:{free_port()}/postgres", "postgres",
    )  # fmt: skip
    lines: list[str] = []
    with (
        pytest.raises(LocalServiceError, match="PostgreSQL server"),
        private_services(tmp_path / ".clarion", nothing, {}, lines.append),
    ):
        pytest.fail("the servers were started")
    assert lines == []
    assert not (tmp_path / ".clarion").exists()
