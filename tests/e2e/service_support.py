"""Running ``clarion`` as a user does: the command, its environment, waiting for the API, and
reading what the processes log."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
from typing import IO

import httpx

from tests.conftest import DIGEST_SECRET, REDIS_URL, REPO

CLARION = [sys.executable, "-m", "app.cli"]


def service_env(prefix: str, port: int, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "CLARION_REDIS_URL": REDIS_URL,
        "CLARION_KEY_PREFIX": prefix,
        "CLARION_PORT": str(port),
        "CLARION_API_KEYS": "shop:shop-secret-key:send+read",
        "CLARION_DIGEST_SECRET": DIGEST_SECRET.decode(),
        "CLARION_CONFIG": str(REPO / "clarion.toml"),
        **extra,
    }


def wait_healthy(url: str, within: float = 20) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/v1/ops/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"{url} is not healthy after {within} s")


class Lines:
    """Every line a process writes to one of its pipes, read in a thread as it comes."""

    def __init__(self, pipe: IO[bytes]) -> None:
        self.lines: list[str] = []
        self.closed = threading.Event()  # every writer closed the pipe
        self._thread = threading.Thread(target=self._read, args=(pipe,), daemon=True)
        self._thread.start()

    def _read(self, pipe: IO[bytes]) -> None:
        with pipe:
            for line in pipe:
                self.lines.append(line.decode(errors="replace").rstrip("\n"))
        self.closed.set()

    def events(self) -> list[str]:
        """The ``event`` of each JSON log line so far."""
        found = []
        for line in list(self.lines):
            with contextlib.suppress(ValueError):
                found.append(str(json.loads(line).get("event")))
        return found

    def wait_for(self, event: str, count: int = 1, within: float = 30) -> None:
        """Wait until ``event`` was logged ``count`` times; fail after ``within`` seconds."""
        deadline = time.monotonic() + within
        while self.events().count(event) < count:
            if time.monotonic() > deadline:
                tail = "\n".join(self.lines[-20:])
                raise AssertionError(f"{event!r} not logged {count} times in {within} s:\n{tail}")
            time.sleep(0.05)

    def wait_closed(self, within: float = 30) -> None:
        """Wait until every process writing to the pipe has exited."""
        assert self.closed.wait(within), "the pipe is still open: a process is still running"
