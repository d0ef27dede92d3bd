"""What make container-check starts the containers with: docker-compose.yml's settings on free
ports of 127.0.0.1, and how it reads the notification it follows."""

from __future__ import annotations

import re
import socket

import yaml

from devtools.container_check import (
    CLARION_ENVIRONMENT,
    POSTGRES_DB,
    POSTGRES_PASSWORD,
    REDIS_ARGUMENTS,
    RESERVED_PORTS,
    clarion_environment,
    delivery_statuses,
    free_ports,
    postgres_script,
)
from tests.conftest import REPO

COMPOSE = yaml.safe_load((REPO / "docker-compose.yml").read_text())["services"]


def compose_default(value: str) -> str:
    """``${NAME:-default}`` as Compose reads it with NAME unset."""
    return re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", value)


def test_redis_runs_with_composes_arguments() -> None:
    command = COMPOSE["redis"]["command"]
    assert command[0] == "redis-server"
    assert tuple(command[1:]) == REDIS_ARGUMENTS


def test_postgres_gets_composes_database_and_password() -> None:
    environment = COMPOSE["postgres"]["environment"]
    assert (environment["POSTGRES_DB"], environment["POSTGRES_PASSWORD"]) == (
        POSTGRES_DB,
        POSTGRES_PASSWORD,
    )
    script = postgres_script(54321)
    assert f"CREATE DATABASE {POSTGRES_DB}" in script
    assert f"echo '{POSTGRES_PASSWORD}'" in script
    assert "-p 54321" in script
    assert "listen_addresses=127.0.0.1" in script


def test_clarion_gets_composes_environment_with_this_runs_addresses() -> None:
    composed = {
        key: compose_default(str(value)) for key, value in COMPOSE["clarion"]["environment"].items()
    }
    addresses = {"CLARION_REDIS_URL", "CLARION_DATABASE_URL", "CLARION_HOST", "CLARION_PORT"}
    assert {key: value for key, value in composed.items() if key not in addresses} == (
        CLARION_ENVIRONMENT
    )
    environment = clarion_environment(40001, 40002, 40003)
    assert environment.keys() == composed.keys()
    assert environment["CLARION_REDIS_URL"] == "redis://127.0.0.1:40001/0"
    assert environment["CLARION_DATABASE_URL"] == (
        "postgresql://postgres:clarion@127.0.0.1:40002/clarion"
    )
    assert (environment["CLARION_HOST"], environment["CLARION_PORT"]) == ("127.0.0.1", "40003")


def test_free_ports_are_distinct_free_and_never_the_reserved_ones() -> None:
    ports = free_ports(3)
    assert len(set(ports)) == 3
    assert not set(ports) & RESERVED_PORTS
    for port in ports:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", port))


def test_delivery_statuses_read_the_answer_of_get_notification() -> None:
    answer = {"id": "n", "deliveries": [{"id": "d", "channel": "SMS", "status": "SENT"}]}
    assert delivery_statuses(answer) == ["SENT"]
    assert delivery_statuses({"id": "n", "deliveries": []}) == []
    assert delivery_statuses("not found") == []
