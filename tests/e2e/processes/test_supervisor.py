"""``clarion run``'s supervisor with real child processes: a child that dies is started again,
SIGTERM stops every child (each finishing its work), and children die with the supervisor."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.conftest import DIGEST_SECRET, REDIS_URL, REPO, unlink_prefix
from tests.e2e.service_support import Lines

pytestmark = pytest.mark.timeout(120)

# The supervisor as ``clarion run`` starts it, over children given as name=arguments.
SUPERVISE = """
import sys
from app.logging import configure_logging
from app.processes.supervisor import Child, supervise
configure_logging("json", "INFO")
children = [arg.split("=", 1) for arg in sys.argv[1:]]
sys.exit(supervise([Child(name, tuple(args.split())) for name, args in children]))
"""


@pytest.fixture
def supervisor(key_prefix: str) -> Iterator[type[subprocess.Popen[bytes]]]:
    """Starts supervisors (their stderr piped) and stops what is left of them afterwards."""
    started: list[subprocess.Popen[bytes]] = []

    class Supervisor(subprocess.Popen[bytes]):
        def __init__(self, *children: str) -> None:
            env = {**os.environ, "CLARION_REDIS_URL": REDIS_URL, "CLARION_KEY_PREFIX": key_prefix,
                   "CLARION_CONFIG": str(REPO / "clarion.toml"),
                   "CLARION_DIGEST_SECRET": DIGEST_SECRET.decode()}  # fmt: skip
            super().__init__(
                [sys.executable, "-c", SUPERVISE, *children],
                env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            )  # fmt: skip
            started.append(self)

    try:
        yield Supervisor
    finally:
        for process in started:
            if process.poll() is None:
                process.kill()
                process.wait()
        unlink_prefix(key_prefix)


def test_a_child_that_dies_is_started_again(
    supervisor: type[subprocess.Popen[bytes]],
) -> None:
    process = supervisor("help=--help")  # prints its usage and exits at once
    assert process.stderr is not None
    logged = Lines(process.stderr)
    logged.wait_for("supervisor.child_died", count=2)
    process.send_signal(signal.SIGTERM)
    assert process.wait(30) == 0


def test_sigterm_stops_every_child_and_each_finishes_first(
    supervisor: type[subprocess.Popen[bytes]],
) -> None:
    process = supervisor("worker-0=worker --slot 0", "worker-1=worker --slot 1")
    assert process.stderr is not None
    logged = Lines(process.stderr)
    logged.wait_for("worker.started", count=2)
    process.send_signal(signal.SIGTERM)
    assert process.wait(45) == 0
    logged.wait_closed()  # no child outlived the supervisor
    assert logged.events().count("worker.stopped") == 2
    assert "supervisor.child_died" not in logged.events()  # none was restarted meanwhile


def test_children_die_with_the_supervisor(supervisor: type[subprocess.Popen[bytes]]) -> None:
    process = supervisor("worker-0=worker --slot 0")
    assert process.stderr is not None
    logged = Lines(process.stderr)
    logged.wait_for("worker.started")
    process.kill()  # nothing of the supervisor runs any more: the kernel tells the child
    process.wait()
    logged.wait_closed()
    assert "worker.stopped" in logged.events()  # stopped cleanly, not killed
