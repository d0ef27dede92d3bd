"""``python -m devtools.services``: the command runs with the servers it is given, and ends as
its command ends (on this machine the default Redis and PostgreSQL answer: nothing private
starts; tests/integration/devtools/test_local_services.py starts private ones)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

SERVICES = [sys.executable, "-m", "devtools.services"]
# Prints the variables naming the servers and exits with status 3.
SHOW = [sys.executable, "-c",
        "import json, os, sys; print(json.dumps({k: v for k, v in os.environ.items() "
        "if k.endswith(('REDIS_URL', 'DATABASE_URL'))})); sys.exit(3)"]  # fmt: skip


def services(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SERVICES, *args], cwd=REPO, env={**os.environ, **env}, capture_output=True, text=True,
        timeout=60, check=False,
    )  # fmt: skip


def test_the_tests_servers_that_answer_are_used_as_they_are(tmp_path: Path) -> None:
    home = tmp_path / ".clarion"
    result = services("exec", "--for", "tests", "--dir", str(home), "--", *SHOW)
    assert result.returncode == 3, result.stderr
    assert result.stderr == ""  # nothing started, nothing said
    shown = json.loads(result.stdout)
    for variable in ("CLARION_TEST_REDIS_URL", "CLARION_TEST_DATABASE_URL"):
        assert shown.get(variable) == os.environ.get(variable)
    assert not home.exists()


def test_configured_urls_are_never_replaced_even_when_nothing_answers(tmp_path: Path) -> None:
    home = tmp_path / ".clarion"
    nowhere = {
        "CLARION_REDIS_URL": "redis://127.0.0.1:1/0",
        "CLARION_DATABASE_URL": "postgresql://postgres@127.0.0.1:1/clarion",
    }
    result = services("exec", "--dir", str(home), "--", *SHOW, **nowhere)
    assert result.returncode == 3, result.stderr
    assert {k: v for k, v in json.loads(result.stdout).items() if k in nowhere} == nowhere
    assert not home.exists()


def test_a_command_that_cannot_run_is_named_before_any_server_starts(tmp_path: Path) -> None:
    home = tmp_path / ".clarion"
    result = services("exec", "--dir", str(home), "--", "no-such-command-here")
    assert result.returncode == 1
    assert result.stderr == "Error: cannot run no-such-command-here: no such command\n"
    assert not home.exists()


def test_sigterm_is_passed_on_and_the_commands_status_returned(tmp_path: Path) -> None:
    child = ("import signal, sys, time; "
             "signal.signal(signal.SIGTERM, lambda *_: sys.exit(7)); "
             "print('ready', flush=True); time.sleep(60)")  # fmt: skip
    wrapper = subprocess.Popen(
        [*SERVICES, "exec", "--for", "tests", "--dir", str(tmp_path), "--",
         sys.executable, "-c", child],
        cwd=REPO, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert wrapper.stdout is not None
    assert wrapper.stdout.readline() == "ready\n"
    wrapper.send_signal(signal.SIGTERM)
    assert wrapper.wait(30) == 7
    wrapper.stdout.close()


def test_down_says_when_nothing_runs(tmp_path: Path) -> None:
    result = services("down", "--dir", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines() == [
        f"clarion services: no private redis runs in {tmp_path / 'redis'}",
        f"clarion services: no private postgres runs in {tmp_path / 'postgres'}",
    ]


@pytest.mark.parametrize("profile", ["app", "tests"])
def test_exec_needs_a_command(profile: str) -> None:
    result = services("exec", "--for", profile)
    assert result.returncode == 2
    assert "Missing argument 'COMMAND...'" in result.stderr
