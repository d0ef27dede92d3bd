"""``make container-check``: the container path, run rather than read.

It builds the ``Dockerfile`` on a local Debian bookworm base (``devtools.container_images``),
starts Redis, PostgreSQL and Clarion from images with the settings ``docker-compose.yml`` gives
them, sends the quick start's notification and waits until its delivery is SENT, then removes
every container and volume it started, on a failure and Ctrl-C too. Containers use the host's
network, on free ports of 127.0.0.1 (never 6379, 5432 or 8000, which the machine's own servers
may hold). The last line says PASS or FAIL; the exit status is not 0 on a failure.

Run as root with podman, runc and mmdebstrap (``make container-check`` installs them from
Debian's packages); no image registry is needed, Debian's apt mirror and PyPI are.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from devtools.container_images import (
    CLARION_IMAGE,
    PG_BIN,
    SERVICES_BASE,
    CheckFailed,
    build_images,
    podman,
    say,
    step,
)

# The ports a machine's own Redis, PostgreSQL and Clarion may hold: never used here.
RESERVED_PORTS = frozenset({6379, 5432, 8000})

# What docker-compose.yml gives each service (tests/unit/devtools/test_container_check.py
# keeps the two the same). Compose's addresses (redis:6379, postgres:5432, 0.0.0.0:8000)
# become free ports on 127.0.0.1 here.
REDIS_ARGUMENTS = (
    *("--appendonly", "yes", "--appendfsync", "everysec"),
    *("--maxmemory-policy", "noeviction"),
)
POSTGRES_PASSWORD = "clarion"  # noqa: S105 (compose's development password)
POSTGRES_DB = "clarion"
CLARION_ENVIRONMENT = {
    "CLARION_API_KEYS": "dev:dev-secret-key:send+read+recipients+admin",
    "CLARION_DIGEST_SECRET": "dev-digest-secret-not-for-production",
    "CLARION_PUBLIC_URL": "http://127.0.0.1:8000",
    "CLARION_LOG_FORMAT": "json",
}

API_KEY = "dev-secret-key"
NOTIFICATION = {
    "recipient": {"id": "user-42", "phone": "+4915112345678"},
    "type": "otp",
    "data": {"code": "424242"},
}
START_TIMEOUT = 60.0
SENT_TIMEOUT = 60.0


def free_ports(count: int, reserved: frozenset[int] = RESERVED_PORTS) -> list[int]:
    """``count`` distinct ports free on 127.0.0.1 now, none of them in ``reserved``."""
    ports: list[int] = []
    holders: list[socket.socket] = []
    try:
        while len(ports) < count:
            holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            holders.append(holder)
            holder.bind(("127.0.0.1", 0))
            port = holder.getsockname()[1]
            if port not in reserved and port not in ports:
                ports.append(port)
    finally:
        for holder in holders:
            holder.close()
    return ports


def postgres_script(port: int) -> str:
    """The PostgreSQL container's command. As the official image does: on first start a
    cluster with ``POSTGRES_PASSWORD`` for user postgres over TCP (trust on the local socket)
    and the database ``POSTGRES_DB``; then the server, as user postgres."""
    data = "/data/pgdata"
    return f"""set -e
mkdir -p {data} && chown postgres:postgres {data} && chmod 700 {data}
if [ ! -s {data}/PG_VERSION ]; then
  echo '{POSTGRES_PASSWORD}' > /tmp/pwfile && chown postgres /tmp/pwfile
  runuser -u postgres -- {PG_BIN}/initdb -D {data} -U postgres --pwfile=/tmp/pwfile \\
    --auth-host=scram-sha-256 --auth-local=trust --encoding=UTF8 --locale=C.UTF-8 >/dev/null
  rm /tmp/pwfile
  echo 'CREATE DATABASE {POSTGRES_DB}' | runuser -u postgres -- {PG_BIN}/postgres --single \\
    -D {data} postgres >/dev/null
fi
exec runuser -u postgres -- {PG_BIN}/postgres -D {data} -p {port} \\
  -c listen_addresses=127.0.0.1 -c unix_socket_directories=/tmp
"""


def clarion_environment(redis_port: int, postgres_port: int, port: int) -> dict[str, str]:
    """Compose's environment for Clarion, with the addresses of this run."""
    database = f"postgres:{POSTGRES_PASSWORD}@127.0.0.1:{postgres_port}/{POSTGRES_DB}"
    return {
        **CLARION_ENVIRONMENT,
        "CLARION_REDIS_URL": f"redis://127.0.0.1:{redis_port}/0",
        "CLARION_DATABASE_URL": f"postgresql://{database}",
        "CLARION_HOST": "127.0.0.1",
        "CLARION_PORT": str(port),
    }


@dataclass
class Started:
    """The containers and volumes of one run, named ``<prefix>-<role>``, removed at its end."""

    prefix: str = field(default_factory=lambda: f"clarion-check-{os.getpid()}")
    containers: list[str] = field(default_factory=list)
    volumes: list[str] = field(default_factory=list)

    def start(
        self,
        role: str,
        image: str,
        *command: str,
        data: str = "",
        env: dict[str, str] | None = None,
    ) -> str:
        """Run ``image`` detached on the host's network, with a new volume at ``data`` if
        given; return the container's name."""
        name = f"{self.prefix}-{role}"
        options = ["--detach", "--name", name, "--network", "host"]
        options += [f"--env={key}={value}" for key, value in (env or {}).items()]
        if data:
            podman("volume", "create", f"{name}-data")
            self.volumes.append(f"{name}-data")
            options.append(f"--volume={name}-data:{data}")
        self.containers.append(name)
        podman("run", *options, image, *command)
        return name

    def remove(self) -> None:
        if self.containers:
            podman("rm", "--force", "--time", "2", *reversed(self.containers), check=False)
        if self.volumes:
            podman("volume", "rm", "--force", *self.volumes, check=False)
        say(f"removed {', '.join(self.containers + self.volumes) or 'nothing'}")


def logs(name: str, lines: int = 40) -> str:
    return podman("logs", "--tail", str(lines), name, check=False, both=True)


def wait_until(name: str, ready: Callable[[], bool], timeout: float, what: str) -> None:
    """Wait for ``ready()``; fail with the container's last lines if it stops or times out."""
    deadline = time.monotonic() + timeout
    while not ready():
        state = podman("inspect", "--format", "{{.State.Running}}", name, check=False)
        if state.strip() != "true":
            raise CheckFailed(f"{name} stopped before {what}; its last lines:\n{logs(name)}")
        if time.monotonic() > deadline:
            raise CheckFailed(
                f"no {what} after {timeout:.0f} s; {name}'s last lines:\n{logs(name)}"
            )
        time.sleep(0.5)


def request(method: str, url: str, body: Any = None, **headers: str) -> tuple[int, Any]:
    """Send a JSON request; return the answer's status and JSON body (or text)."""
    data = json.dumps(body).encode() if body is not None else None
    headers = {key.replace("_", "-"): value for key, value in headers.items()}
    sent = urllib.request.Request(url, data=data, method=method, headers=headers)  # noqa: S310
    try:
        with urllib.request.urlopen(sent, timeout=10) as answer:  # noqa: S310 (127.0.0.1)
            return answer.status, json.loads(answer.read() or b"null")
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode(errors="replace")


def answers_ready(url: str) -> bool:
    try:
        return request("GET", url)[0] == 200
    except (OSError, ValueError):
        return False


def delivery_statuses(notification: Any) -> list[str]:
    """The statuses of a notification's deliveries, as GET /v1/notifications/{id} gives them."""
    if not isinstance(notification, dict):
        return []
    return [str(delivery.get("status")) for delivery in notification.get("deliveries") or []]


def start_services(started: Started) -> str:
    """Redis, PostgreSQL and Clarion, each once it answers; return Clarion's base URL."""
    redis_port, postgres_port, port = free_ports(3)
    with step(f"Redis on 127.0.0.1:{redis_port}"):
        redis = started.start(
            *("redis", SERVICES_BASE.image, "redis-server", "--bind", "127.0.0.1"),
            *("--port", str(redis_port), "--dir", "/data", *REDIS_ARGUMENTS),
            data="/data",
        )
        ping = ("exec", redis, "redis-cli", "-p", str(redis_port), "ping")
        wait_until(redis, lambda: "PONG" in podman(*ping, check=False), START_TIMEOUT, "PONG")
    with step(f"PostgreSQL on 127.0.0.1:{postgres_port}"):
        script = postgres_script(postgres_port)
        postgres = started.start("postgres", SERVICES_BASE.image, "sh", "-c", script, data="/data")
        isready = (
            *("exec", postgres, f"{PG_BIN}/pg_isready", "-U", "postgres"),
            *("-h", "127.0.0.1", "-p", str(postgres_port)),
        )

        def accepting() -> bool:
            return "accepting" in podman(*isready, check=False)

        wait_until(postgres, accepting, START_TIMEOUT, "pg_isready")
    url = f"http://127.0.0.1:{port}"
    with step(f"Clarion on {url}"):
        env = clarion_environment(redis_port, postgres_port, port)
        clarion = started.start("clarion", CLARION_IMAGE, env=env)
        ready = f"{url}/v1/ops/health/ready"
        wait_until(clarion, lambda: answers_ready(ready), START_TIMEOUT, f"200 from {ready}")
    return url


def send_and_follow(url: str, clarion: str) -> None:
    """The quick start's notification, then its deliveries until each is SENT."""
    with step("POST /v1/notifications (the quick start's OTP)"):
        key = f"container-check-{uuid.uuid4()}"
        auth = f"Bearer {API_KEY}"
        status, answer = request(
            "POST", f"{url}/v1/notifications", NOTIFICATION, Authorization=auth,
            Idempotency_Key=key, Content_Type="application/json",
        )  # fmt: skip
        if status != 202 or not isinstance(answer, dict):
            raise CheckFailed(f"POST /v1/notifications answered {status}: {answer}")
        say(f"accepted ({status}): {json.dumps(answer)}")
    where = f"/v1/notifications/{answer['id']}"
    with step(f"GET {where} until its delivery is SENT"):
        deadline = time.monotonic() + SENT_TIMEOUT
        while True:
            status, answer = request("GET", f"{url}{where}", Authorization=auth)
            statuses = delivery_statuses(answer) if status == 200 else []
            if statuses and all(value == "SENT" for value in statuses):
                say(f"deliveries: {', '.join(statuses)}")
                return
            if time.monotonic() > deadline:
                raise CheckFailed(
                    f"not SENT after {SENT_TIMEOUT:.0f} s (last answer {status}: {answer});"
                    f" Clarion's last lines:\n{logs(clarion)}"
                )
            time.sleep(0.5)


def check(rebuild_base: bool) -> None:
    build_images(rebuild_base)
    started = Started()
    try:
        url = start_services(started)
        send_and_follow(url, f"{started.prefix}-clarion")
    finally:
        with step("removing what was started"):
            started.remove()


def stop_on_sigterm(signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.container_check")
    parser.add_argument(
        "--rebuild-base",
        action="store_true",
        help="make the Debian bases afresh with mmdebstrap even when podman has them",
    )
    arguments = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, stop_on_sigterm)
    began = time.monotonic()
    try:
        check(arguments.rebuild_base)
    except CheckFailed as error:
        say(str(error))
    except KeyboardInterrupt:
        say("interrupted")
    except FileNotFoundError as error:
        say(f"{error.filename} is missing (as root: apt-get install podman runc mmdebstrap)")
    else:
        say(f"PASS in {time.monotonic() - began:.1f} s: the image built on Debian bookworm "
            "delivered the quick start's notification")  # fmt: skip
        return 0
    say(f"FAIL after {time.monotonic() - began:.1f} s")
    return 1


if __name__ == "__main__":
    sys.exit(main())
