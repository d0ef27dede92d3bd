"""The service as real processes, and a Redis that can be killed and brought back from its AOF
(or without it, empty).

Every process writes its output to a log file of its own, so a failed run can show what each
one said last. Processes run in sessions of their own: stopping one (the API is a uvicorn
supervisor with children) reaches its whole group, and nothing here touches any other process.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import httpx
import redis

from tests.conftest import REPO
from tests.servers import form_cluster, free_cluster_port, free_port, wait_until_cluster_serves

STOP_TIMEOUT_S = 30.0


def tail(path: Path, lines: int = 30, width: int = 400) -> str:
    """The last ``lines`` lines of a log file, each cut at ``width`` characters."""
    if not path.exists():
        return ""
    last = path.read_text(errors="replace").splitlines()[-lines:]
    return "\n".join(line[:width] for line in last)


class DurableRedis:
    """A private ``redis-server`` with AOF and ``appendfsync always``: a 202 survives a crash.

    ``kill`` is SIGKILL; ``start`` again uses the same port and directory, so Redis replays
    its AOF and clients reconnect to the address they know; after ``forget_data`` it starts
    empty instead.
    """

    name = "redis"

    def __init__(self, workdir: Path, *, cluster: bool = False) -> None:
        self.workdir = workdir
        # A cluster's node also listens on its port + 10000 (the cluster bus).
        self.port = free_cluster_port() if cluster else free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.log_path = workdir / "redis.log"
        self._cluster = ("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
        self._options = self._cluster if cluster else ()
        self._process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60.0) -> None:
        """Start and wait until Redis answers PING (after loading its AOF)."""
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed")
        with self.log_path.open("ab") as log:
            self._process = subprocess.Popen(
                [binary, "--port", str(self.port), "--bind", "127.0.0.1",
                 "--dir", str(self.workdir), "--appendonly", "yes", "--appendfsync", "always",
                 "--save", "", "--daemonize", "no", *self._options],
                stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        client = redis.Redis.from_url(self.url, socket_timeout=1, socket_connect_timeout=1)
        deadline = time.monotonic() + timeout
        try:
            while True:
                try:
                    if client.ping():  # LOADING while the AOF is replayed
                        return
                except redis.RedisError:
                    if time.monotonic() > deadline:
                        raise
                if self._process.poll() is not None:
                    raise RuntimeError(f"redis-server exited:\n{tail(self.log_path)}")
                time.sleep(0.05)
        finally:
            client.close()

    def kill(self) -> None:
        """SIGKILL, by pid: a crash. What was fsynced is in the AOF."""
        assert self._process is not None
        self._process.kill()
        self._process.wait()

    def forget_data(self) -> None:
        """Delete the AOF and any snapshot (only while stopped): the next ``start`` is a
        Redis that lost its dataset, on the same port."""
        assert self._process is None or self._process.poll() is not None, "Redis is running"
        shutil.rmtree(self.workdir / "appendonlydir", ignore_errors=True)
        for name in ("appendonly.aof", "dump.rdb"):
            (self.workdir / name).unlink(missing_ok=True)

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()


class DurableCluster:
    """A Redis Cluster of three ``DurableRedis`` masters (no replicas), with the same
    interface: ``kill`` SIGKILLs one master (the next in turn) while the others go on serving
    their slots, and ``start`` brings it back from its AOF (and its ``nodes.conf``: the same
    node, owning the same slots)."""

    def __init__(self, workdir: Path, masters: int = 3) -> None:
        self.nodes = []
        for number in range(masters):
            (workdir / f"node{number}").mkdir()
            self.nodes.append(DurableRedis(workdir / f"node{number}", cluster=True))
        self.url = "redis+cluster://" + ",".join(self._addresses)
        self.name = "redis"  # which master: set by each kill
        self._down: DurableRedis | None = None
        self._kills = 0

    def start(self, timeout: float = 60.0) -> None:
        """The first time, start every node and form the cluster; after ``kill``, restart
        the killed master. Either way, wait until every node sees every slot served."""
        if self._down is not None:
            self._down.start(timeout)
            self._down = None
        else:
            for node in self.nodes:
                node.start(timeout)
            form_cluster(self._addresses)
        wait_until_cluster_serves(self._addresses, timeout)

    @property
    def _addresses(self) -> list[str]:
        return [f"127.0.0.1:{node.port}" for node in self.nodes]

    def kill(self) -> None:
        node = self.nodes[self._kills % len(self.nodes)]
        self._kills += 1
        node.kill()
        self._down = node
        self.name = f"redis 127.0.0.1:{node.port}"

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


class ServiceProcess:
    """One ``clarion`` command as a child process, with its log and what was done to it."""

    def __init__(self, name: str, args: tuple[str, ...], env: Mapping[str, str], logs: Path):
        self.name = name
        self.args = args
        self.env = dict(env)
        self.log_path = logs / f"{name}.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.started_at = 0.0
        # Set when this suite killed the process on purpose: its exit is not a crash.
        self.killed_on_purpose = False

    def start(self) -> None:
        with self.log_path.open("ab") as log:
            log.write(f"--- start {self.starts + 1} at {time.time():.3f}\n".encode())
            log.flush()
            self.process = subprocess.Popen(
                [sys.executable, "-m", "app.cli", *self.args],
                env=self.env,
                cwd=REPO,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.starts += 1
        self.started_at = time.time()
        self.killed_on_purpose = False

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def exited(self) -> bool:
        return self.process is not None and self.process.poll() is not None

    def exit_code(self) -> int | None:
        return None if self.process is None else self.process.poll()

    def kill(self) -> None:
        """SIGKILL the process (the API: its whole group), and reap it."""
        assert self.process is not None
        self.killed_on_purpose = True
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGKILL)
        self.process.wait()

    def pause(self) -> None:
        os.kill(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.pid, signal.SIGCONT)

    def stop(self) -> None:
        """SIGTERM (each process finishes what it has in flight), SIGKILL after a timeout."""
        if self.process is None or self.process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGCONT)  # a paused process cannot handle SIGTERM
            os.killpg(self.pid, signal.SIGTERM)
        try:
            self.process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, signal.SIGKILL)
            self.process.wait()

    def tail(self, lines: int = 30) -> str:
        return tail(self.log_path, lines)

    def session_pids(self) -> frozenset[int]:
        """The live processes of this one's session: itself and its children (the API's
        uvicorn workers, which uvicorn restarts on its own when one dies)."""
        pids = set()
        for stat in Path("/proc").glob("[0-9]*/stat"):
            with contextlib.suppress(OSError):
                # After the command name: state, parent, process group, session, ...
                state, _, _, session = stat.read_text().rsplit(")", 1)[1].split()[:4]
                if int(session) == self.pid and state != "Z":
                    pids.add(int(stat.parent.name))
        return frozenset(pids)


def wait_for_api(base_url: str, api: ServiceProcess, timeout: float = 60.0) -> None:
    """Wait until the API is ready (``/v1/ops/health/ready`` answers 200): Redis takes
    writes, every consumer group exists (the API makes them at start-up) and PostgreSQL
    answers."""
    deadline = time.monotonic() + timeout
    last = "no answer"
    while time.monotonic() < deadline:
        if api.exited():
            raise RuntimeError(f"the API exited at start-up:\n{api.tail()}")
        try:
            answer = httpx.get(f"{base_url}/v1/ops/health/ready", timeout=1)
        except httpx.HTTPError as error:
            last = type(error).__name__
        else:
            if answer.status_code == 200:
                return
            last = f"{answer.status_code} {answer.text}"
        time.sleep(0.1)
    raise RuntimeError(
        f"the API was not ready within {timeout} s (last answer: {last}):\n{api.tail()}"
    )
