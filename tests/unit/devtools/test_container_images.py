"""The local Debian bases of make container-check: their names follow their recipes, and how
mmdebstrap is asked for them."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from devtools.container_images import (
    MIRRORS,
    PYTHON_BASE,
    SERVICES_BASE,
    SUITE,
    mmdebstrap_command,
)
from tests.conftest import REPO


def test_a_bases_name_changes_with_its_recipe_only() -> None:
    assert PYTHON_BASE.image == dataclasses.replace(PYTHON_BASE).image
    assert PYTHON_BASE.image.startswith(f"localhost/clarion-check-python:{SUITE}-")
    more = dataclasses.replace(PYTHON_BASE, packages=(*PYTHON_BASE.packages, "curl"))
    assert more.image != PYTHON_BASE.image
    assert PYTHON_BASE.image != SERVICES_BASE.image


def test_the_bases_hold_what_the_dockerfile_and_the_services_run() -> None:
    assert {"python3", "python3-venv", "ca-certificates"} <= set(PYTHON_BASE.packages)
    assert {"redis-server", "postgresql-15"} <= set(SERVICES_BASE.packages)
    dockerfile = (REPO / "Dockerfile").read_text()
    assert "ARG BASE=python:3.11-slim" in dockerfile
    assert "python3 -m venv /opt/clarion" in dockerfile


def test_mmdebstrap_is_asked_for_a_minbase_with_the_packages_and_the_mirrors() -> None:
    command = mmdebstrap_command(SERVICES_BASE, Path("/tmp/rootfs.tar"))
    assert command[:3] == [
        "mmdebstrap",
        "--variant=minbase",
        "--include=redis-server,postgresql-15",
    ]
    assert f"--customize-hook={SERVICES_BASE.customize}" in command
    assert command[-len(MIRRORS) - 2 :] == [SUITE, "/tmp/rootfs.tar", *MIRRORS]
    assert not [part for part in mmdebstrap_command(PYTHON_BASE, Path("x")) if "hook" in part]
