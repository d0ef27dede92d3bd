"""A private server's pid and port files, and its start and stop."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from devtools import local_processes
from devtools.local_processes import (
    alive,
    answers,
    log_tail,
    owned_process,
    read_number,
    record,
    reusable,
)

# A process that ignores SIGTERM, as a server stuck in its shutdown would.
IGNORE_SIGTERM = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
STUBBORN = [sys.executable, "-c", IGNORE_SIGTERM + "print('deaf', flush=True); time.sleep(600)"]


def test_numbers_are_recorded_and_read_back(tmp_path: Path) -> None:
    record(tmp_path / "port", 6399)
    assert read_number(tmp_path / "port") == 6399
    assert read_number(tmp_path / "missing") is None
    (tmp_path / "bad").write_text("x")
    assert read_number(tmp_path / "bad") is None


def test_an_ended_process_is_not_alive_even_before_it_is_collected() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 30
    while alive(child.pid):  # not collected: after it ends it is a zombie until poll()
        assert time.monotonic() < deadline, "a zombie still counts as alive"
        time.sleep(0.01)
    assert child.poll() == 0
    assert not alive(child.pid)
    assert alive(os.getpid())


def test_the_tail_of_a_log_says_why_a_server_did_not_start(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("".join(f"line {n}\n" for n in range(10)))
    assert log_tail(log, lines=2) == "line 8 | line 9"
    assert log_tail(tmp_path / "none.log") == f"no log at {tmp_path / 'none.log'}"


def test_an_owned_process_is_stopped_and_its_pid_file_removed(tmp_path: Path) -> None:
    command = [sys.executable, "-c", "import time; time.sleep(600)"]
    with owned_process(tmp_path, command, signal.SIGTERM) as process:
        assert read_number(tmp_path / "pid") == process.pid
        assert alive(process.pid)
    assert process.returncode == -signal.SIGTERM
    assert not (tmp_path / "pid").exists()


def test_a_process_that_does_not_stop_is_killed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(local_processes, "STOP_TIMEOUT_S", 0.5)
    with owned_process(tmp_path, STUBBORN, signal.SIGTERM, subprocess.PIPE) as process:
        assert process.stdout is not None
        assert process.stdout.readline() == b"deaf\n"  # SIGTERM is ignored from here on
    process.stdout.close()
    assert process.returncode == -signal.SIGKILL


def test_a_running_server_is_reused_only_while_its_process_lives_and_its_port_answers(
    tmp_path: Path,
) -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        record(tmp_path / "port", port)
        assert reusable(tmp_path) is None  # no pid file
        with owned_process(tmp_path, [sys.executable, "-c", "import time; time.sleep(600)"],
                           signal.SIGTERM):  # fmt: skip
            assert answers(f"tcp://127.0.0.1:{port}")
            assert reusable(tmp_path) == port
        record(tmp_path / "pid", process_that_ended())
        assert reusable(tmp_path) is None
    assert not answers(f"tcp://127.0.0.1:{port}")


def process_that_ended() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid
