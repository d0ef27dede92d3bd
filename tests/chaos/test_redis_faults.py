"""Redis faults the service heals from by itself: nothing is restarted, nothing becomes POISON.

The service runs as in ``test_chaos`` (``service``), with the shipped lease limit
(``CLARION_MAX_DELIVERIES`` 5: no worker is killed here, so only a fault can make a delivery
be leased again), and no respawner: a process that exits stays down, and the verdict says so.

- Out of memory: while the producer sends and the workers deliver, Redis is held out of
  memory (``maxmemory`` below its use, ``noeviction``) for ``CLARION_CHAOS_OOM_SECONDS``
  (at least 30), then its limit is restored. Ingest must answer 503 meanwhile (the producer
  retries with the same key), readiness 503 and 200 again soon after; afterwards every
  acknowledged notification is judged as in ``test_chaos``, and none may be POISON. The
  SMTP relay takes EMAIL meanwhile: a message it took whose outcome Redis then refused is
  sent again after the episode, a duplicate the verdict counts and lays at the episode.
- Empty restart: Redis is SIGKILLed and started again without its data on the same port.
  Every notification made after that must be delivered, in Redis and in PostgreSQL, by the
  processes that were running all along; those made before were lost with the dataset by
  definition and are left out of the verdict (the report counts them). No readiness probe
  runs here, as readiness makes missing groups too: the workers and the projector must.

``CLARION_CHAOS_REDIS_NOTIFICATIONS`` (default 6000) and ``CLARION_CHAOS_REDIS_SECONDS``
(the send period, default 60) size each run.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.chaos.evidence import made_since
from tests.chaos.faults import Fault
from tests.chaos.load import Planned, Producer, plan
from tests.chaos.processes import DurableRedis
from tests.chaos.redis_faults import ReadinessProbe, RedisFaults, when_sent
from tests.chaos.redis_verdict import judge_out_of_memory, made_after, no_poison, no_restarts
from tests.chaos.report import render
from tests.chaos.service import API_SECRET, Service, check_logs, conclude, drained, running_service
from tests.chaos.verdict import Verdict, judge

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(900)]

NOTIFICATIONS = int(os.environ.get("CLARION_CHAOS_REDIS_NOTIFICATIONS", "6000"))
SEND_SECONDS = float(os.environ.get("CLARION_CHAOS_REDIS_SECONDS", "60"))
OOM_SECONDS = max(30.0, float(os.environ.get("CLARION_CHAOS_OOM_SECONDS", "30")))
# The shipped default.
MAX_DELIVERIES = 5
# Shares of the notifications sent when each fault begins: with a backlog and sends in
# flight, and enough sent afterwards to judge.
OOM_AT = 0.3
EMPTY_RESTART_AT = 0.4


@dataclass(slots=True)
class Run:
    """What watches one run, and its times (seconds since the epoch)."""

    producer: Producer
    faults: RedisFaults
    readiness: ReadinessProbe | None
    started: float = 0.0
    sent: float = 0.0


@asynccontextmanager
async def observed(service: Service, *, readiness: bool) -> AsyncIterator[Run]:
    """A producer and the faults for ``service``; process exits (and, with ``readiness``,
    the readiness endpoint) watched until the block ends."""
    assert isinstance(service.redis, DurableRedis)  # these faults are a single Redis's
    run = Run(
        Producer(service.base_url, API_SECRET),
        RedisFaults(service.redis, service.processes),
        ReadinessProbe(service.base_url) if readiness else None,
    )
    watchers = [asyncio.create_task(run.faults.watch_exits())]
    if run.readiness is not None:
        watchers.append(asyncio.create_task(run.readiness.run()))
    try:
        yield run
    finally:
        for watcher in watchers:
            watcher.cancel()
        await asyncio.gather(*watchers, return_exceptions=True)


async def send_with(
    run: Run, plans: list[Planned], share: float, inject: Callable[[RedisFaults], Awaitable[Fault]]
) -> Fault:
    """Send every plan, injecting the fault once ``share`` of them is sent; return the fault
    once the producer is done (every plan acknowledged or given up on)."""
    run.started = time.time()
    sending = asyncio.create_task(run.producer.send_all(plans, SEND_SECONDS))
    try:
        await when_sent(share, lambda: run.producer.progress, sending)
        fault = await inject(run.faults)
        await sending
    finally:
        sending.cancel()
    run.sent = time.time()
    return fault


def conclude_run(
    service: Service,
    run: Run,
    title: str,
    verdict: Verdict,
    settled_at: float,
    notes: list[str],
    workdir: Path,
    chaos_report: Callable[[str], None],
) -> None:
    """The checks every run ends with, the summary table, and the test's failure if any."""
    replaced = run.faults.replaced()
    no_restarts(verdict, replaced)
    check_logs(service, verdict)
    notes = [
        *notes,
        f"processes at the start: {run.faults.started_with()}; at the end: "
        + ("the same pids, none restarted" if not replaced else "changed"),
    ]
    table = render(
        title, run.started, run.faults.faults, run.faults.crashes, 0, run.producer.stats,
        verdict, {"send": run.sent - run.started, "drain": settled_at - run.sent}, notes,
    )  # fmt: skip
    conclude(service, verdict, table, run.faults.crashes, workdir, chaos_report)


async def test_out_of_memory_poisons_and_loses_nothing(
    tmp_path: Path, chaos_report: Callable[[str], None]
) -> None:
    plans = plan(NOTIFICATIONS, seed=9)
    with running_service(
        tmp_path, plans, idempotent=True, max_deliveries=MAX_DELIVERIES
    ) as service:
        async with observed(service, readiness=True) as run:
            episode = await send_with(
                run, plans, OOM_AT, lambda faults: faults.out_of_memory(OOM_SECONDS)
            )
            evidence = await drained(service, run.producer.acknowledged)
            settled_at = time.time()
        assert run.readiness is not None
        verdict = judge(
            run.producer.acknowledged, evidence, run.faults.faults, run.faults.crashes,
            run.producer.stats, idempotent=True,
        )  # fmt: skip
        no_poison(verdict, evidence)
        notes = judge_out_of_memory(
            verdict, episode, run.readiness.readings, run.producer.stats.timeline,
            run.faults.oom_lapses,
        )  # fmt: skip
        title = f"{len(plans)} notifications, Redis out of memory for {OOM_SECONDS:g} s"
        conclude_run(service, run, title, verdict, settled_at, notes, tmp_path, chaos_report)


async def test_empty_restart_heals_without_restarting_anything(
    tmp_path: Path, chaos_report: Callable[[str], None]
) -> None:
    plans = plan(NOTIFICATIONS, seed=10)
    with running_service(
        tmp_path, plans, idempotent=True, max_deliveries=MAX_DELIVERIES
    ) as service:
        async with observed(service, readiness=False) as run:
            restart = await send_with(run, plans, EMPTY_RESTART_AT, RedisFaults.restart_empty)
            judged, before = made_after(run.producer.acknowledged, restart.start)
            evidence = await drained(service, judged)
            settled_at = time.time()
        # What was made before the restart was lost with the dataset: out of the verdict.
        evidence = made_since(evidence, restart.start, set(before))
        verdict = judge(
            judged, evidence, run.faults.faults, run.faults.crashes, run.producer.stats,
            idempotent=True,
        )  # fmt: skip
        if not judged:
            verdict.problem("nothing made after the empty restart to judge", "0")
        no_poison(verdict, evidence)
        across = sum(1 for ack in before.values() if ack.answered >= restart.start)
        remade = {p.name: p.log_path.read_text(errors="replace").count("group_missing")
                  for p in (*service.workers, service.projector)}  # fmt: skip
        notes = [
            f"not judged: {len(before)} notifications made before Redis lost its dataset, "
            f"lost with it by definition ({across} of them acknowledged after the restart: "
            "in flight across it)",
            "a consumer group found missing and made again, times: "
            + ", ".join(f"{name}: {n}" for name, n in remade.items()),
        ]
        title = f"{len(plans)} notifications, Redis restarted empty; those made after it judged"
        conclude_run(service, run, title, verdict, settled_at, notes, tmp_path, chaos_report)
