"""The bookkeeping of a private server process under ``.clarion/``: its pid and port files,
its start in a session of its own, and its stop by pid (``devtools.local_services``)."""

from __future__ import annotations

import contextlib
import os
import platform
import shutil
import signal
import socket
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit

from streams.core.errors import ClarionError

# How long a private server may take to shut down (PostgreSQL writes a checkpoint, Redis
# flushes its AOF) before it is killed.
STOP_TIMEOUT_S = 60


class LocalServiceError(ClarionError):
    """A private server cannot be started; the message says why and what to do."""


def read_number(path: Path) -> int | None:
    """The whole number a pid or port file holds; None when it is missing or holds none."""
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def record(path: Path, number: int) -> None:
    path.write_text(f"{number}\n")


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (one of another user's counts; a zombie, which has ended
    and waits for its parent to collect it, does not: Linux's /proc tells)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no /proc (macOS): the signal's answer must do
    return stat.rpartition(")")[2].split()[0] != "Z"


def log_tail(path: Path, lines: int = 5) -> str:
    """The last lines of a server's log, for the message saying why it did not start."""
    try:
        tail = path.read_text(errors="replace").splitlines()[-lines:]
    except OSError:
        return f"no log at {path}"
    return " | ".join(line.strip() for line in tail) or f"{path} is empty"


@contextlib.contextmanager
def owned_process(
    home: Path,
    command: list[str],
    stop_signal: signal.Signals,
    output: IO[Any] | int = subprocess.DEVNULL,
    **popen: Any,
) -> Iterator[subprocess.Popen[bytes]]:
    """Run ``command`` with its pid in ``home/pid``; stop it with ``stop_signal`` on exit
    (killed after ``STOP_TIMEOUT_S``) and remove the pid file.

    The server gets a session of its own: Ctrl-C in the terminal reaches the command using
    it, and the server is stopped after that command, not under it.
    """
    process = subprocess.Popen(  # noqa: S603 (a server binary found on this machine)
        command, stdout=output, stderr=subprocess.STDOUT, start_new_session=True, cwd=home,
        **popen,
    )  # fmt: skip
    record(home / "pid", process.pid)
    try:
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(stop_signal)
        try:
            process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        (home / "pid").unlink(missing_ok=True)


def answers(url: str, timeout: float = 1.0) -> bool:
    """Whether something accepts a TCP connection at ``url``'s host and port."""
    parts = urlsplit(url)
    if parts.hostname is None or parts.port is None:
        return False
    try:
        with socket.create_connection((parts.hostname, parts.port), timeout):
            return True
    except OSError:
        return False


def free_port() -> int:
    """A loopback TCP port nobody listens on, from the kernel's ephemeral range (which system
    services' well-known ports are not in)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def port_is_free(port: int) -> bool:
    """Whether a server could listen on ``port`` (as the servers do, despite TIME_WAIT)."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def choose_port(home: Path) -> int:
    """The port recorded in ``home`` when it is still free, else a new free one, recorded."""
    port = read_number(home / "port")
    if port is None or not port_is_free(port):
        port = free_port()
        record(home / "port", port)
    return port


def package_manager(
    system: str | None = None, which: Callable[[str], str | None] = shutil.which
) -> str | None:
    """``brew`` on macOS, else the first of ``apt-get`` and ``dnf`` on the PATH."""
    if (system or platform.system()) == "Darwin":
        return "brew"
    return next((tool for tool in ("apt-get", "dnf") if which(tool)), None)


def reusable(home: Path) -> int | None:
    """The port of a private server another command started in ``home`` and still runs."""
    port = read_number(home / "port")
    pid = read_number(home / "pid")
    if port is None or pid is None or not alive(pid):
        return None
    return port if answers(f"tcp://127.0.0.1:{port}") else None
