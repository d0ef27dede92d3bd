"""Redis faults the service must heal from by itself, with no process restarted.

Out of memory: ``maxmemory`` is set below the memory Redis uses, ``maxmemory-policy`` staying
``noeviction`` (start-up refuses any other), so Redis refuses every command that could grow
its memory, scripts included, until the old limit is set back. A probe write every half
second checks that the refusal holds; should memory fall below the limit (entries deleted
meanwhile), the limit is lowered again and the lapse counted.

Empty restart: Redis is SIGKILLed, its AOF deleted, and it starts again on the same port, so
every process's connection reaches a Redis without keys, streams or consumer groups.

Nothing here restarts a process: ``watch_exits`` records every exit as a crash, and
``replaced`` names every process whose session lost or gained a process since the start.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx
from redis.asyncio import Redis
from redis.exceptions import OutOfMemoryError

from tests.chaos.faults import Crash, Fault
from tests.chaos.processes import DurableRedis, ServiceProcess

OOM_PROBE_EVERY_S = 0.5
# Outside the service's key prefix: the evidence never reads it.
PROBE_KEY = "chaos-suite:oom-probe"
# Long enough for every process to notice that Redis is gone.
EMPTY_DOWN_S = 2.0
WATCH_EVERY_S = 0.2
READINESS_EVERY_S = 0.5
MB = 1024 * 1024


class RedisFaults:
    """Applies the two faults to the chaos Redis and watches the processes meanwhile."""

    def __init__(self, redis: DurableRedis, processes: list[ServiceProcess]) -> None:
        self.redis = redis
        self.processes = processes
        self.faults: list[Fault] = []
        self.crashes: list[Crash] = []
        # Probe writes Redis took during the episode: it was not out of memory then.
        self.oom_lapses = 0
        self._pids = {process.name: process.session_pids() for process in processes}

    async def out_of_memory(self, seconds: float) -> Fault:
        """Hold Redis out of memory for ``seconds``, then restore its limit."""
        client = Redis.from_url(self.redis.url, decode_responses=True)
        try:
            policy = (await client.config_get("maxmemory-policy"))["maxmemory-policy"]
            assert policy == "noeviction", f"maxmemory-policy is {policy}: Redis would evict"
            original = str((await client.config_get("maxmemory"))["maxmemory"])
            used = int((await client.info("memory"))["used_memory"])
            limit = used // 2
            await client.config_set("maxmemory", limit)
            # From when Redis has the limit to just before it gets the old one back: what
            # the service answers in between must be the answer to an out-of-memory Redis.
            at = time.time()
            while time.time() < at + seconds:
                await asyncio.sleep(OOM_PROBE_EVERY_S)
                if await _takes_writes(client):
                    self.oom_lapses += 1
                    limit = min(limit, int((await client.info("memory"))["used_memory"]) // 2)
                    await client.config_set("maxmemory", limit)
            end = time.time()
            await client.config_set("maxmemory", original)
        finally:
            await client.aclose()
        kind = f"OOM (maxmemory {limit / MB:.0f} MB < {used / MB:.0f} MB used)"
        fault = Fault(kind, "redis", at, end)
        self.faults.append(fault)
        return fault

    async def restart_empty(self) -> Fault:
        """SIGKILL Redis, delete its data, start it again on the same port.

        The fault starts once the old Redis is dead: nothing made later can be in its data."""
        await asyncio.to_thread(self.redis.kill)
        at = time.time()
        self.redis.forget_data()
        await asyncio.sleep(EMPTY_DOWN_S)
        await asyncio.to_thread(self.redis.start)
        fault = Fault("SIGKILL, AOF deleted, restart empty", "redis", at, time.time())
        self.faults.append(fault)
        return fault

    async def watch_exits(self) -> None:
        """Record every process that exits (nothing in these runs kills one); restart none."""
        gone: set[str] = set()
        while True:
            await asyncio.sleep(WATCH_EVERY_S)
            for process in self.processes:
                if process.exited() and process.name not in gone:
                    gone.add(process.name)
                    crash = Crash(process.name, process.exit_code(), time.time(), process.tail())
                    self.crashes.append(crash)

    def started_with(self) -> str:
        """How many processes each session had when the run began."""
        return ", ".join(f"{name} {len(pids)}" for name, pids in self._pids.items())

    def replaced(self) -> list[str]:
        """Each process whose session lost or gained a process since the run began: it
        exited, or was restarted (uvicorn restarts an API worker that dies)."""
        changes = []
        for process in self.processes:
            before, now = self._pids[process.name], process.session_pids()
            if before != now:
                changes.append(f"{process.name}: {sorted(before)} -> {sorted(now)}")
        return changes


async def _takes_writes(client: Redis) -> bool:
    try:
        await client.set(PROBE_KEY, "1", px=1000)
    except OutOfMemoryError:
        return False
    return True


@dataclass(frozen=True, slots=True)
class Reading:
    """One answer of the readiness endpoint: its status (None: no answer) and what its Redis
    check said (or why there was no answer)."""

    sent: float
    answered: float
    status: int | None
    redis: str


class ReadinessProbe:
    """Polls ``GET /v1/ops/health/ready`` as a load balancer would."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.readings: list[Reading] = []

    async def run(self) -> None:
        """Poll every ``READINESS_EVERY_S`` until cancelled."""
        async with httpx.AsyncClient(base_url=self.base_url, timeout=2.0) as client:
            while True:
                sent = time.time()
                try:
                    answer = await client.get("/v1/ops/health/ready")
                    checks = answer.json().get("checks", {})
                    redis = str(checks.get("redis", "?"))
                    reading = Reading(sent, time.time(), answer.status_code, redis)
                except (httpx.HTTPError, ValueError) as error:
                    reading = Reading(sent, time.time(), None, type(error).__name__)
                self.readings.append(reading)
                await asyncio.sleep(READINESS_EVERY_S)


async def when_sent(
    share: float, progress: Callable[[], float], sending: asyncio.Task[None]
) -> None:
    """Return once the producer has sent ``share`` of its notifications (or stopped)."""
    # Progress is a number the producer updates: polled, as no event marks it.
    while progress() < share and not sending.done():  # noqa: ASYNC110
        await asyncio.sleep(0.1)
