"""The whole service under faults: nothing acknowledged is lost, doubled or left unfinished.

The API (two uvicorn workers), two delivery workers and the projector run as real processes
against a private Redis (AOF, ``appendfsync always``) and a private PostgreSQL. While the
producer sends, workers are SIGKILLed and one is SIGSTOPped past its lease, Redis is SIGKILLed
and restarted from its AOF, PostgreSQL crashes and restarts, the projector is SIGKILLed.
Once the faults stop and the service drains, ``verdict`` judges what is left; the summary
table is printed at the end of the session.

``CLARION_CHAOS_NOTIFICATIONS`` (default 20000) and ``CLARION_CHAOS_SECONDS`` (the send
period, default 60) size a run.
"""

from __future__ import annotations

import asyncio
import os
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from redis.asyncio import Redis

from streams.keys import KeySpace
from tests.chaos.evidence import (
    FINAL,
    Evidence,
    read_read_model,
    read_sandbox,
    read_write_model,
)
from tests.chaos.faults import FaultInjector
from tests.chaos.load import Acknowledged, Producer, plan
from tests.chaos.processes import DurableRedis, ServiceProcess, wait_for_api
from tests.chaos.report import render
from tests.chaos.verdict import expectations, judge
from tests.integration.delivery_support import catalog_text
from tests.servers import PostgresServer, free_port, postgres_server

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(1200)]

NOTIFICATIONS = int(os.environ.get("CLARION_CHAOS_NOTIFICATIONS", "20000"))
SEND_SECONDS = float(os.environ.get("CLARION_CHAOS_SECONDS", "60"))
LEASE_MS = 5000
# A worker is killed every few seconds, so a healthy work entry may be handed out many times
# (each restart and takeover counts) before one worker gets to finish it; the default of 5
# would dead-letter such entries as poison.
MAX_DELIVERIES = 50
DRAIN_TIMEOUT_S = 300.0
PREFIX = "chaos"
API_SECRET = "chaos-secret-key"
SHIPPED_RATE_LIMIT = "rate_limit = { per_second = 5000, burst = 500 }"
# What the producer's addresses look like: none may appear in any process's log.
CONTACT = re.compile(r"user\d+@example\.com|\+49151\d{8}")


@dataclass(slots=True)
class Service:
    redis: DurableRedis
    postgres: PostgresServer
    database_url: str
    base_url: str
    api: ServiceProcess
    workers: list[ServiceProcess]
    projector: ServiceProcess

    @property
    def processes(self) -> list[ServiceProcess]:
        return [self.api, *self.workers, self.projector]


@contextmanager
def running_service(workdir: Path, *, idempotent: bool) -> Iterator[Service]:
    """Redis, PostgreSQL and the service's processes, stopped afterwards whatever happened."""
    catalog = workdir / "clarion.toml"
    # Quick retries keep the drain short; the shipped rate limit stays in the path.
    catalog.write_text(
        catalog_text(
            base=0.2, max_delay=1.0, attempts=6, rate_limit=SHIPPED_RATE_LIMIT,
            idempotent=idempotent,
        )
    )  # fmt: skip
    (workdir / "redis").mkdir()
    redis = DurableRedis(workdir / "redis")
    redis.start()
    try:
        with postgres_server() as postgres:
            port = free_port()
            database_url = postgres.url.rsplit("/", 1)[0] + "/clarion"
            env = {k: v for k, v in os.environ.items() if not k.startswith("CLARION_")}
            env |= {
                "CLARION_REDIS_URL": redis.url,
                "CLARION_DATABASE_URL": database_url,
                "CLARION_KEY_PREFIX": PREFIX,
                "CLARION_CONFIG": str(catalog),
                "CLARION_API_KEYS": f"chaos:{API_SECRET}:send+read",
                "CLARION_PORT": str(port),
                "CLARION_LEASE_MS": str(LEASE_MS),
                "CLARION_MAX_DELIVERIES": str(MAX_DELIVERIES),
            }
            service = Service(
                redis,
                postgres,
                database_url,
                f"http://127.0.0.1:{port}",
                ServiceProcess("api", ("api", "--workers", "2"), env, workdir),
                [
                    ServiceProcess(f"worker-{slot}", ("worker", "--slot", str(slot)), env, workdir)
                    for slot in (0, 1)
                ],
                ServiceProcess("projector", ("projector",), env, workdir),
            )
            try:
                for process in service.processes:
                    process.start()
                wait_for_api(service.base_url, service.api)
                yield service
            finally:
                for process in service.processes:
                    process.stop()
    finally:
        redis.stop()


def settled(evidence: Evidence, expected_ids: set[str]) -> bool:
    """Every delivery final in Redis and the same in PostgreSQL; nothing pending anywhere."""
    for delivery_id in expected_ids:
        state = evidence.redis_states.get(delivery_id)
        if state is None or state.status not in FINAL:
            return False
        if evidence.pg_states.get(delivery_id) != state:
            return False
    return not any(evidence.pending.values()) and not evidence.delayed


async def drain(
    redis: Redis, keys: KeySpace, database_url: str, acknowledged: dict[str, Acknowledged]
) -> Evidence:
    """Wait for the service to settle (or the deadline); what it left behind."""
    expected_ids = set(expectations(acknowledged))
    deadline = time.monotonic() + DRAIN_TIMEOUT_S
    while True:
        evidence = await read_write_model(redis, keys)
        await read_read_model(database_url, evidence)
        if settled(evidence, expected_ids) or time.monotonic() > deadline:
            await read_sandbox(redis, keys, evidence)
            return evidence
        await asyncio.sleep(3)


@pytest.mark.parametrize("idempotent", [True, False], ids=["idempotent", "not-idempotent"])
async def test_faults_lose_and_double_nothing(
    idempotent: bool, tmp_path: Path, chaos_report: Callable[[str], None]
) -> None:
    plans = plan(NOTIFICATIONS, seed=7 if idempotent else 8)
    with running_service(tmp_path, idempotent=idempotent) as service:
        injector = FaultInjector(
            service.redis, service.postgres, service.workers, service.projector, service.api,
            lease_s=LEASE_MS / 1000,
        )  # fmt: skip
        respawner = asyncio.create_task(injector.respawn())
        producer = Producer(service.base_url, API_SECRET)
        started = time.time()
        try:
            sending = asyncio.create_task(producer.send_all(plans, SEND_SECONDS))
            await injector.run(lambda: producer.progress, sending)
            await sending
            sent = time.time()
            redis = Redis.from_url(service.redis.url)
            try:
                evidence = await drain(
                    redis, KeySpace(PREFIX), service.database_url, producer.acknowledged
                )
            finally:
                await redis.aclose()
        finally:
            respawner.cancel()
        drained = time.time()
        verdict = judge(
            producer.acknowledged,
            evidence,
            injector.faults,
            injector.crashes,
            producer.stats,
            idempotent=idempotent,
        )
        for process in service.processes:
            if CONTACT.search(process.log_path.read_text(errors="replace")):
                verdict.problem("contact address in a log", process.name)
        sandbox = "idempotent" if idempotent else "not idempotent"
        table = render(
            f"{len(plans)} notifications, {sandbox} sandbox",
            started,
            injector.faults,
            injector.crashes,
            injector.refused_starts,
            producer.stats,
            verdict,
            {"send": sent - started, "drain": drained - sent},
        )
        chaos_report(table)
        (tmp_path / "chaos-report.txt").write_text(table)
        failures = verdict.failures()
        if failures:
            tails = "\n".join(f"--- {p.name}\n{p.tail(15)}" for p in service.processes)
            crashes = "\n".join(f"--- crash {c.name}\n{c.log_tail}" for c in injector.crashes)
            pytest.fail(f"{table}\n{crashes}\n{tails}", pytrace=False)
