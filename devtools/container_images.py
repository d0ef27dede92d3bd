"""The images ``make container-check`` runs (``devtools.container_check``), made without any
image registry, and the podman commands it runs them with.

The bases are Debian bookworm root filesystems made by ``mmdebstrap`` from Debian's apt mirror
and imported with ``podman import``: one with python3 and python3-venv, on which the
``Dockerfile`` builds Clarion (``--build-arg BASE=...``), and one with bookworm's redis-server
(7.0) and postgresql-15, which the Redis and PostgreSQL containers run. A base's name holds a
digest of what it is made of, and it stays in podman's image store: a later run finds it there
and skips ``mmdebstrap`` (minutes), until the recipe changes or ``--rebuild-base`` asks.

podman reads ``deploy/container-check/containers.conf`` only (``CONTAINERS_CONF``), which
turns off the default ulimits that crun fails to apply under some hosts' cgroups, and every
command runs under runc.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / ".clarion" / "container"
CONTAINERS_CONF = ROOT / "deploy" / "container-check" / "containers.conf"
RUNTIME = "runc"
CLARION_IMAGE = "localhost/clarion:container-check"
# The system's CA bundle, which Debian's pip trusts: the host's is lent to the build's steps.
CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"

SUITE = "bookworm"
MIRRORS = (
    "deb http://deb.debian.org/debian bookworm main",
    "deb http://deb.debian.org/debian bookworm-updates main",
    "deb http://deb.debian.org/debian-security bookworm-security main",
)
# Documentation, manual pages and translations are left out of every base.
DPKG_OPTIONS = tuple(
    f"path-exclude=/usr/share/{directory}/*" for directory in ("doc", "man", "locale", "info")
)
PG_BIN = "/usr/lib/postgresql/15/bin"


class CheckFailed(Exception):
    """A step of the check failed; the message says which and why."""


@dataclass(frozen=True)
class Base:
    """A local Debian image: a minbase root filesystem with ``packages`` added."""

    role: str
    packages: tuple[str, ...]
    # Shell run on the finished root filesystem ("$1") before it is packed.
    customize: str = ""

    @property
    def image(self) -> str:
        """Its name in podman's store, with a digest of its recipe: a changed recipe is a new
        image, made afresh."""
        recipe = [SUITE, MIRRORS, DPKG_OPTIONS, self.packages, self.customize]
        digest = hashlib.sha256(json.dumps(recipe).encode()).hexdigest()[:12]
        return f"localhost/clarion-check-{self.role}:{SUITE}-{digest}"


PYTHON_BASE = Base("python", ("python3", "python3-venv", "ca-certificates"))
# The cluster postgresql-common makes on installation is dropped: the container makes its own.
SERVICES_BASE = Base(
    "services",
    ("redis-server", "postgresql-15"),
    customize='rm -rf "$1/var/lib/postgresql/15/main" "$1/etc/postgresql/15/main"',
)


def say(line: str) -> None:
    print(f"container-check: {line}", flush=True)


@contextlib.contextmanager
def step(name: str) -> Iterator[None]:
    """Print ``name``, then how long it took (or that it failed)."""
    say(f"{name} ...")
    started = time.monotonic()
    try:
        yield
    except BaseException:
        say(f"{name}: failed after {time.monotonic() - started:.1f} s")
        raise
    say(f"{name}: done in {time.monotonic() - started:.1f} s")


def podman_environment() -> dict[str, str]:
    return {**os.environ, "CONTAINERS_CONF": str(CONTAINERS_CONF)}


def podman(*arguments: str, check: bool = True, log: Path | None = None, both: bool = False) -> str:
    """Run ``podman --runtime runc ARGUMENTS``; return its output (see ``run``)."""
    return run(["podman", "--runtime", RUNTIME, *arguments], check=check, log=log, both=both)


def run(
    command: Sequence[str], *, check: bool = True, log: Path | None = None, both: bool = False
) -> str:
    """Run ``command``; return its standard output (with ``both`` its standard error after
    it), or with ``log`` its whole output, which goes to that file. With ``check``, a failure
    raises ``CheckFailed`` with its last lines."""
    if log is None:
        done = subprocess.run(  # noqa: S603 (fixed commands of this package)
            command, env=podman_environment(), capture_output=True, text=True, check=False
        )
        output, returncode = done.stdout + done.stderr, done.returncode
        result = output if both else done.stdout
    else:
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("w") as sink:
            returncode = subprocess.run(  # noqa: S603
                command,
                env=podman_environment(),
                stdout=sink,
                stderr=subprocess.STDOUT,
                check=False,
            ).returncode
        output = result = log.read_text(errors="replace")
    if check and returncode != 0:
        tail = "\n".join(output.strip().splitlines()[-30:])
        where = f" (whole output: {log})" if log else ""
        named = " ".join(command[:4] if command[0] == "podman" else command[:1])
        raise CheckFailed(f"{named} exited with {returncode}{where}:\n{tail}")
    return result


def image_exists(image: str) -> bool:
    done = subprocess.run(  # noqa: S603
        ["podman", "--runtime", RUNTIME, "image", "exists", image],  # noqa: S607
        env=podman_environment(),
        check=False,
    )
    return done.returncode == 0


def mmdebstrap_command(base: Base, target: Path) -> list[str]:
    command = ["mmdebstrap", "--variant=minbase", f"--include={','.join(base.packages)}"]
    command += [f"--dpkgopt={option}" for option in DPKG_OPTIONS]
    if base.customize:
        command.append(f"--customize-hook={base.customize}")
    return [*command, SUITE, str(target), *MIRRORS]


def ensure_base(base: Base, rebuild: bool) -> None:
    """Make ``base`` with mmdebstrap and import it, unless podman has it already."""
    if not rebuild and image_exists(base.image):
        say(f"base {base.image}: in podman's image store, not rebuilt")
        return
    with step(f"base {base.image}: mmdebstrap {SUITE} with {', '.join(base.packages)}"):
        WORK.mkdir(parents=True, exist_ok=True)
        rootfs = WORK / f"{base.role}-rootfs.tar"
        try:
            run(mmdebstrap_command(base, rootfs), log=WORK / f"{base.role}-mmdebstrap.log")
            podman(
                *("import", "--change", "ENV=LANG=C.UTF-8"),
                *(
                    "--change",
                    "ENV=PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                ),
                *(str(rootfs), base.image),
            )
        finally:
            rootfs.unlink(missing_ok=True)


def build_clarion() -> None:
    """Build the ``Dockerfile`` on the python base. Its pip (Debian's) trusts the system's CA
    bundle: the host's is lent to the build's steps, so PyPI is reached through any TLS proxy
    the host trusts (the image keeps its own bundle)."""
    lend = [f"--volume={CA_BUNDLE}:{CA_BUNDLE}:ro"] if Path(CA_BUNDLE).is_file() else []
    with step(f"image {CLARION_IMAGE}: podman build --build-arg BASE={PYTHON_BASE.image}"):
        podman(
            *("build", *lend, "--network", "host"),
            *("--build-arg", f"BASE={PYTHON_BASE.image}", "--tag", CLARION_IMAGE),
            *("--file", str(ROOT / "Dockerfile"), str(ROOT)),
            log=WORK / "build.log",
        )


def build_images(rebuild_base: bool) -> None:
    for base in (PYTHON_BASE, SERVICES_BASE):
        ensure_base(base, rebuild_base)
    build_clarion()
