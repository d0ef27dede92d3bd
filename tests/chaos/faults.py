"""The faults, applied while the producer sends.

Worker SIGKILLs every few seconds, one worker SIGSTOPped for longer than the lease, Redis
SIGKILLed and restarted from its AOF, PostgreSQL stopped in ``immediate`` mode (a crash) and
started again, the projector SIGKILLed. A respawner restarts every process that exited, as a
supervisor would; an exit this suite did not cause is recorded as a crash.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from tests.chaos.processes import DurableCluster, DurableRedis, ServiceProcess
from tests.servers import PostgresServer

KILL_EVERY_S = 5.0
# How ``clarion worker`` and ``clarion projector`` refuse to start without Redis (or without
# a master of the cluster).
REDIS_REFUSAL = ("Error: Redis at ", "Error: the Redis Cluster at ")
RESPAWN_PAUSE_S = 1.0
REDIS_DOWN_S = 2.0
POSTGRES_DOWN_S = 3.0
PAUSE_BEYOND_LEASE_S = 2.0
BUSY_AFTER_START_S = 2.0


@dataclass(frozen=True, slots=True)
class Fault:
    """One injected fault, with its wall-clock times (seconds since the epoch).

    ``end`` is when it was over: the kill itself for a SIGKILL of a service process, the
    SIGCONT after a SIGSTOP, the moment Redis or PostgreSQL answered again after a crash.
    """

    kind: str
    target: str
    start: float
    end: float

    @property
    def interrupts_delivery(self) -> bool:
        """Whether a delivery in flight can be cut off by it (and so be sent again)."""
        return self.target.startswith(("worker", "redis"))


@dataclass(frozen=True, slots=True)
class Crash:
    """A process that exited although nobody killed it."""

    name: str
    exit_code: int | None
    at: float
    log_tail: str


class FaultInjector:
    """Applies the schedule and respawns whatever exited."""

    def __init__(
        self,
        redis: DurableRedis | DurableCluster,
        postgres: PostgresServer,
        workers: list[ServiceProcess],
        projector: ServiceProcess,
        api: ServiceProcess,
        lease_s: float,
    ) -> None:
        self.redis = redis
        self.postgres = postgres
        self.workers = workers
        self.projector = projector
        self.api = api
        self.lease_s = lease_s
        self.faults: list[Fault] = []
        self.crashes: list[Crash] = []
        self.refused_starts = 0
        self._redis_up = True
        self._paused: ServiceProcess | None = None

    def milestones(self) -> list[tuple[float, Callable[[], Coroutine[Any, Any, None]]]]:
        """The one-off faults, each at a share of the notifications sent."""
        return [
            (0.20, functools.partial(self._kill, self.projector)),
            (0.30, functools.partial(self._pause, self.workers[-1])),
            # After the projector's restart: the Redis crash meets processes that were not
            # restarted after it, and must reconnect on their own.
            (0.50, self._crash_redis),
            (0.65, self._crash_postgres),
        ]

    async def run(self, progress: Callable[[], float], sending: asyncio.Task[None]) -> None:
        """Inject faults while ``sending`` runs: one-offs as ``progress`` (the share sent)
        passes their milestones, a worker SIGKILL every few seconds; return once every
        fault is over (Redis and PostgreSQL up, the paused worker resumed)."""
        running: list[asyncio.Task[None]] = []

        async def at_milestones() -> None:
            for share, fault in self.milestones():
                # Progress is a number the producer updates: polled, as no event marks it.
                while progress() < share and not sending.done():  # noqa: ASYNC110
                    await asyncio.sleep(0.1)
                # Faults with a duration run beside the others: kills go on meanwhile.
                running.append(asyncio.create_task(fault()))

        milestones = asyncio.create_task(at_milestones())
        for turn in itertools.count():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(KILL_EVERY_S):
                    await asyncio.shield(sending)
            if sending.done():
                break
            victim = self.workers[turn % len(self.workers)]
            if victim is self._paused:  # SIGKILL would end the pause this suite wants
                victim = next(w for w in self.workers if w is not victim)
            running.append(asyncio.create_task(self._kill(victim)))
        await milestones
        await asyncio.gather(*running)

    async def respawn(self) -> None:
        """Restart every exited process after a pause; record the ones nobody killed."""
        down_since: dict[str, float] = {}
        while True:
            await asyncio.sleep(0.2)
            for process in (*self.workers, self.projector, self.api):
                if not process.exited():
                    continue
                now = time.time()
                if process.name not in down_since:
                    down_since[process.name] = now
                    if not process.killed_on_purpose:
                        self._unprovoked_exit(process, now)
                # A supervisor would retry until Redis is back; waiting for it keeps the
                # refused start-ups out of the crash list.
                if self._redis_up and now - down_since[process.name] >= RESPAWN_PAUSE_S:
                    process.start()
                    del down_since[process.name]

    def _unprovoked_exit(self, process: ServiceProcess, at: float) -> None:
        if process.tail(1).startswith(REDIS_REFUSAL):
            # Started just before Redis went down: a refusal to start, which a supervisor
            # answers by trying again, as the respawner does.
            self.refused_starts += 1
        else:
            self.crashes.append(Crash(process.name, process.exit_code(), at, process.tail()))

    async def _kill(self, process: ServiceProcess) -> None:
        if process.exited():
            return  # killed a moment ago and not back yet
        at = time.time()
        process.kill()
        self.faults.append(Fault("SIGKILL", process.name, at, at))

    async def _pause(self, process: ServiceProcess) -> None:
        """SIGSTOP for longer than the lease: others take its deliveries over meanwhile."""
        seconds = self.lease_s + PAUSE_BEYOND_LEASE_S
        self._paused = process  # from now on the periodic kills spare it
        # Just killed, it may not be back yet; once back, let it take work in hand. (Polled:
        # the respawner starts it, nothing signals that.)
        while process.exited() or time.time() - process.started_at < BUSY_AFTER_START_S:  # noqa: ASYNC110
            await asyncio.sleep(0.1)
        at = time.time()
        process.pause()
        await asyncio.sleep(seconds)
        process.resume()
        self._paused = None
        self.faults.append(Fault(f"SIGSTOP {seconds:g} s, SIGCONT", process.name, at, time.time()))

    async def _crash_redis(self) -> None:
        at = time.time()
        self._redis_up = False
        self.redis.kill()
        await asyncio.sleep(REDIS_DOWN_S)
        await asyncio.to_thread(self.redis.start)
        self._redis_up = True
        self.faults.append(Fault("SIGKILL, restart from AOF", self.redis.name, at, time.time()))

    async def _crash_postgres(self) -> None:
        at = time.time()
        await asyncio.to_thread(self.postgres.stop, "immediate")
        await asyncio.sleep(POSTGRES_DOWN_S)
        await asyncio.to_thread(self.postgres.start)
        self.faults.append(Fault("immediate stop, start", "postgres", at, time.time()))
