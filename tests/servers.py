"""Private server processes for tests that must reconfigure, kill or restart them."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def free_cluster_port() -> int:
    """A free port whose cluster bus port (10000 above it, at most 65535) is free too."""
    while True:
        port = free_port()
        if port + 10000 > 65535:
            port -= 20000  # the kernel hands out high ports; try one lower down
        with contextlib.ExitStack() as held:
            try:
                for candidate in (port, port + 10000):
                    probe = held.enter_context(socket.socket())
                    probe.bind(("127.0.0.1", candidate))
            except OSError:
                continue
            return port


def wait_for_port(port: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listens on port {port} after {timeout} s")


@contextlib.contextmanager
def redis_server(workdir: Path, *extra: str) -> Iterator[str]:
    """Start ``redis-server`` on a free port in ``workdir``; yield its URL; stop it by pid."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError("redis-server is not installed")
    port = free_cluster_port() if "--cluster-enabled" in extra else free_port()
    process = subprocess.Popen(
        [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(workdir),
            "--save",
            "",
            "--daemonize",
            "no",
            *extra,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait()


@contextlib.contextmanager
def redis_cluster(workdir: Path, masters: int = 3) -> Iterator[str]:
    """Start a Redis Cluster of ``masters`` nodes (no replicas) on free ports in
    ``workdir``; yield its ``redis+cluster://`` URL naming every node; stop them by pid."""
    with contextlib.ExitStack() as nodes:
        urls = []
        for number in range(masters):
            node_dir = workdir / f"node{number}"
            node_dir.mkdir()
            options = ("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
            urls.append(nodes.enter_context(redis_server(node_dir, *options)))
        addresses = [url.removeprefix("redis://").removesuffix("/0") for url in urls]
        form_cluster(addresses)
        wait_until_cluster_serves(addresses, timeout=10)
        yield "redis+cluster://" + ",".join(addresses)


# ``redis-cli --cluster create`` refuses fewer masters; smaller clusters are formed by hand.
MIN_CREATED_MASTERS = 3
HASH_SLOTS = 16384


def redis_cli() -> str:
    """The path of ``redis-cli``."""
    cli = shutil.which("redis-cli")
    if cli is None:
        raise RuntimeError("redis-cli is not installed")
    return cli


def form_cluster(addresses: list[str]) -> None:
    """Make the cluster-enabled servers at ``addresses`` (``host:port``) one cluster of
    masters, the slots shared between them."""
    cli = redis_cli()
    if len(addresses) >= MIN_CREATED_MASTERS:
        subprocess.run(
            [cli, "--cluster", "create", *addresses, "--cluster-replicas", "0", "--cluster-yes"],
            check=True, capture_output=True, timeout=30,
        )  # fmt: skip
        return

    def run(address: str, *command: str) -> None:
        host, port = address.split(":")
        subprocess.run([cli, "-h", host, "-p", port, *command], check=True, capture_output=True)

    # Each node an equal range of the slots; the others introduced to the first.
    share = HASH_SLOTS // len(addresses)
    for number, address in enumerate(addresses):
        last = HASH_SLOTS - 1 if number == len(addresses) - 1 else (number + 1) * share - 1
        run(address, "cluster", "addslotsrange", str(number * share), str(last))
    first_host, first_port = addresses[0].split(":")
    for address in addresses[1:]:
        run(address, "cluster", "meet", first_host, first_port)


def wait_until_cluster_serves(addresses: list[str], timeout: float) -> None:
    """Wait until every node agrees on every slot's owner and serves."""
    cli = redis_cli()
    deadline = time.monotonic() + timeout
    for address in addresses:
        host, port = address.split(":")
        while not _cluster_node_ready(cli, host, port):
            if time.monotonic() > deadline:
                raise TimeoutError(f"the cluster's node {address} is not ready")
            time.sleep(0.05)


def _cluster_node_ready(cli: str, host: str, port: str) -> bool:
    def run(*command: str) -> bytes:
        return subprocess.run([cli, *command], capture_output=True, check=False).stdout

    return b"cluster_state:ok" in run("-h", host, "-p", port, "cluster", "info") and (
        b"All nodes agree" in run("--cluster", "check", f"{host}:{port}")
    )


class PostgresServer:
    """A private PostgreSQL cluster (initdb as the ``postgres`` user) that tests may stop."""

    def __init__(self) -> None:
        self.bin = _postgres_bin()
        # initdb refuses to run as root, so the postgres user must own the directory, and
        # reach it: pytest's own temporary directories are private to root.
        self.workdir = Path(tempfile.mkdtemp(prefix="clarion-pg-"))
        if os.geteuid() == 0:
            shutil.chown(self.workdir, "postgres", "postgres")
        self.data = self.workdir / "data"
        self.port = free_port()
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        self._as_postgres(["initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres"])

    def _as_postgres(self, command: list[str]) -> None:
        tool, *args = command
        runas = [] if os.geteuid() != 0 else ["runuser", "-u", "postgres", "--"]
        subprocess.run(
            [*runas, str(self.bin / tool), *args],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def start(self) -> None:
        options = f"-p {self.port} -k {self.workdir} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._as_postgres(
            ["pg_ctl", "start", "-w", "-D", str(self.data), "-l", str(self.workdir / "log"),
             "-o", options]
        )  # fmt: skip
        wait_for_port(self.port)

    def stop(self, mode: str = "fast") -> None:
        """Stop the cluster (by the pid in its pid file); ``immediate`` is a crash."""
        self._as_postgres(["pg_ctl", "stop", "-w", "-D", str(self.data), "-m", mode])


def _postgres_bin() -> Path:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/postgres"))
    if found:
        return found[-1].parent
    which = shutil.which("pg_ctl")
    if which is None:
        raise RuntimeError("PostgreSQL server binaries are not installed")
    return Path(which).parent


@contextlib.contextmanager
def postgres_server() -> Iterator[PostgresServer]:
    """A started private PostgreSQL cluster, stopped and removed afterwards."""
    server = PostgresServer()
    try:
        server.start()
        yield server
    finally:
        with contextlib.suppress(subprocess.CalledProcessError):
            server.stop("immediate")
        shutil.rmtree(server.workdir, ignore_errors=True)
