"""``clarion run``'s process supervisor: the API and the delivery workers as child processes.

The supervisor owns SIGTERM and SIGINT: it stops every child (each finishes what it has in
flight) and exits. A child that dies on its own is started again after a pause, so one
crashed worker does not stop delivery. Children die with the supervisor (Linux).
"""

from __future__ import annotations

import ctypes
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from types import FrameType

import structlog

log = structlog.get_logger(__name__)

RESTART_PAUSE_S = 1.0
STOP_TIMEOUT_S = 30.0
_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Ask the kernel to SIGTERM this process when its parent dies (Linux only)."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


@dataclass(frozen=True, slots=True)
class Child:
    """A child process: a name for logs and the ``clarion`` arguments that run it."""

    name: str
    args: tuple[str, ...]

    def start(self) -> subprocess.Popen[bytes]:
        command = [sys.executable, "-m", "app.cli", *self.args]
        return subprocess.Popen(command, preexec_fn=die_with_parent)  # noqa: PLW1509, S603


def supervise(children: list[Child]) -> int:
    """Run ``children`` until SIGTERM or SIGINT; restart any that dies. The exit code."""
    stopping = False

    def on_signal(signum: int, _: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    running = {child: child.start() for child in children}
    while not stopping:
        time.sleep(0.2)
        for child, process in list(running.items()):
            if process.poll() is not None and not stopping:
                log.warning("supervisor.child_died", child=child.name, exit_code=process.returncode)
                time.sleep(RESTART_PAUSE_S)
                running[child] = child.start()
    for process in running.values():
        if process.poll() is None:
            process.terminate()  # SIGTERM: each child finishes what it has in flight
    deadline = time.monotonic() + STOP_TIMEOUT_S
    for process in running.values():
        try:
            process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
    return 0
