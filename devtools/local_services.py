"""Private Redis and PostgreSQL for ``make run`` and ``make test`` on a machine that runs
neither (``python -m devtools.services exec``).

The rule: a server is started privately only when its URL is the default one (the variable is
unset, blank or set to the default) and nothing answers there. A URL someone configured is
never replaced, and a machine whose servers answer on the default ports is used as it is. A
private server lives under ``.clarion/<name>/``: its data (kept between runs), its log, the
port it listens on (a free loopback port, recorded so the next run finds it again, and chosen
anew only when something else took it) and its pid. Whoever started it stops it on exit; a
second command finding it running uses it and leaves it alone.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import redis
from redis.exceptions import RedisError

from app.settings import Settings
from devtools import local_postgres
from devtools.local_processes import (
    LocalServiceError,
    alive,
    answers,
    choose_port,
    log_tail,
    owned_process,
    package_manager,
    read_number,
    reusable,
)

Say = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class Profile:
    """Which variables name the servers, their default values, and the database a private
    PostgreSQL's URL names."""

    redis_variable: str
    redis_default: str
    database_variable: str
    database_default: str
    database_name: str


# ``clarion run``: the defaults of ``app.settings``; the database is created on first start.
APP = Profile(
    "CLARION_REDIS_URL", Settings().redis_url,
    "CLARION_DATABASE_URL", Settings().database_url, "clarion",
)  # fmt: skip
# The test suite: the defaults of tests/conftest.py and tests/pg.py (a unit test keeps them equal).
TESTS = Profile(
    "CLARION_TEST_REDIS_URL", "redis://127.0.0.1:6379/0",
    "CLARION_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres", "postgres",
)  # fmt: skip
PROFILES = {"app": APP, "tests": TESTS}

MIN_REDIS = (7, 0)
# The one install command per package manager; Darwin means Homebrew.
REDIS_INSTALL = {
    "brew": "brew install redis",
    "apt-get": "sudo apt-get install redis-server",
    "dnf": "sudo dnf install redis",
}


def is_default(env: Mapping[str, str], variable: str, default: str) -> bool:
    """Whether ``variable`` leaves the URL at its default (unset and blank count as unset,
    as ``Settings.from_env`` reads them)."""
    return (env.get(variable, "").strip() or default) == default


def needs_private(env: Mapping[str, str], variable: str, default: str) -> bool:
    """A private server is needed when the URL is the default and nothing answers there."""
    return is_default(env, variable, default) and not answers(default)


def install_command(what: str, commands: Mapping[str, str], manager: str | None) -> str:
    """The one command that installs ``what`` with ``manager`` (from ``package_manager``)."""
    return commands.get(manager or "", f"install {what} with your package manager")


def missing_message(what: str, commands: Mapping[str, str], manager: str | None) -> str:
    """Says how to install ``what`` here, and that ``docker compose up`` needs none of it."""
    return (
        f"{what} is not installed and no server answers at the default URL: "
        f"{install_command(what, commands, manager)}, "
        "or run everything in containers with 'docker compose up'"
    )


def parse_redis_version(text: str) -> tuple[int, ...] | None:
    """The version in ``redis-server --version``'s answer ("Redis server v=7.0.15 sha=...")."""
    match = re.search(r"\bv=(\d+)\.(\d+)\.(\d+)", text)
    return tuple(int(part) for part in match.groups()) if match else None


def checked_redis_version(binary: str, answer: str, manager: str | None) -> str:
    """The version ``binary --version`` answered; ``LocalServiceError`` when it is older than
    7.0 (Clarion's Lua scripts and stream commands need Redis 7) or cannot be read."""
    version = parse_redis_version(answer)
    if version is not None and version[:2] >= MIN_REDIS:
        return ".".join(map(str, version))
    found = ".".join(map(str, version)) if version else f"of unknown version ({answer[:80]!r})"
    raise LocalServiceError(
        f"{binary} is Redis {found}; Clarion needs Redis 7.0 or newer: "
        f"{install_command('Redis 7', REDIS_INSTALL, manager)}, "
        "or run everything in containers with 'docker compose up'"
    )


def redis_binary(which: Callable[[str], str | None] = shutil.which) -> tuple[str, str]:
    """The path and version of ``redis-server``; ``LocalServiceError`` when it is missing
    or too old."""
    binary = which("redis-server")
    if binary is None:
        raise LocalServiceError(missing_message("redis-server", REDIS_INSTALL, package_manager()))
    answer = subprocess.run(  # noqa: S603 (the redis-server found on the PATH)
        [binary, "--version"], capture_output=True, text=True, timeout=10, check=False
    ).stdout
    return binary, checked_redis_version(binary, answer.strip(), package_manager())


def wait_for_redis(process: subprocess.Popen[bytes], port: int, home: Path) -> None:
    """Until the private Redis answers PING (it answers LOADING while it reads its AOF)."""
    client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=1)
    deadline = time.monotonic() + 60
    try:
        while True:
            with contextlib.suppress(RedisError):
                if client.ping():
                    return
            if process.poll() is not None or time.monotonic() > deadline:
                raise LocalServiceError(
                    f"the private Redis did not start: {log_tail(home / 'redis.log')}"
                )
            time.sleep(0.1)
    finally:
        client.close()


@contextlib.contextmanager
def private_redis(home: Path, found: tuple[str, str], say: Say) -> Iterator[int]:
    """A private Redis (``found``: ``redis_binary()``'s answer) on a loopback port with its
    AOF in ``home``; yields the port."""
    binary, version = found
    running = reusable(home)
    if running is not None:
        say(f"using the private Redis already running on 127.0.0.1:{running} ({home})")
        yield running
        return
    home.mkdir(parents=True, exist_ok=True)
    port = choose_port(home)
    # The settings Clarion's start-up check asks for (docker-compose.yml's): AOF, noeviction.
    command = [
        binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(home),
        "--appendonly", "yes", "--appendfsync", "everysec", "--save", "",
        "--maxmemory-policy", "noeviction", "--logfile", "redis.log",
    ]  # fmt: skip
    try:
        with owned_process(home, command, signal.SIGTERM) as process:
            wait_for_redis(process, port, home)
            say(f"started a private Redis {version} on 127.0.0.1:{port} (data in {home})")
            yield port
    finally:
        say("stopped the private Redis")


@contextlib.contextmanager
def private_services(
    home: Path, profile: Profile, env: Mapping[str, str], say: Say
) -> Iterator[dict[str, str]]:
    """Start what the defaults lack; yield the variables naming the private servers (none
    when every server answers or is configured); stop what was started on exit."""
    exports: dict[str, str] = {}
    home = home.resolve()  # the servers run in their own directories
    need_redis = needs_private(env, profile.redis_variable, profile.redis_default)
    need_postgres = needs_private(env, profile.database_variable, profile.database_default)
    # What may be missing is looked for before anything starts.
    redis_found = redis_binary() if need_redis else None
    postgres_found = local_postgres.server() if need_postgres else None
    with contextlib.ExitStack() as stack:
        if redis_found is not None:
            port = stack.enter_context(private_redis(home / "redis", redis_found, say))
            exports[profile.redis_variable] = f"redis://127.0.0.1:{port}/0"
        if postgres_found is not None:
            servers = local_postgres.private_postgres(home / "postgres", postgres_found, say)
            port = stack.enter_context(servers)
            exports[profile.database_variable] = (
                f"postgresql://postgres@127.0.0.1:{port}/{profile.database_name}"
            )
        yield exports


def stop_left_running(home: Path, say: Say) -> None:
    """Stop the private servers a killed command left running in ``home``: by the pid in the
    pid file, and only while that process lives and the recorded port answers (a stale pid
    file must not stop a process that took the number since)."""
    stops = {"redis": signal.SIGTERM, "postgres": signal.SIGINT}
    for name, stop_signal in stops.items():
        pid = read_number(home / name / "pid")
        if pid is None or reusable(home / name) is None:
            say(f"no private {name} runs in {home / name}")
            continue
        os.kill(pid, stop_signal)
        deadline = time.monotonic() + 60
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if alive(pid):
            raise LocalServiceError(f"the private {name} (pid {pid}) did not stop in 60 s")
        (home / name / "pid").unlink(missing_ok=True)
        say(f"stopped the private {name} (pid {pid})")
