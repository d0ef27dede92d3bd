"""The service under test as real processes, and what every chaos run does once its faults
are over: wait for the service to settle, then report and judge.

The API (two uvicorn workers), two delivery workers and the projector run as real processes
against a private Redis (AOF, ``appendfsync always``) and a private PostgreSQL. The catalog
is the shipped one with quick retries and time limits inside the lease, its EMAIL channel
sent through the SMTP relay (``relay``) this suite runs, the other channels on the sandbox.
"""

from __future__ import annotations

import asyncio
import os
import re
import secrets
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from redis.asyncio import Redis

from streams.core.connection import connect
from streams.core.keys import KeySpace
from streams.delivery.state_release import RELEASED_ONCE_PROJECTED
from tests.chaos.evidence import (
    FINAL,
    Evidence,
    read_read_model,
    read_sandbox,
    read_write_model,
)
from tests.chaos.faults import Crash
from tests.chaos.load import Acknowledged, Planned
from tests.chaos.processes import DurableCluster, DurableRedis, ServiceProcess, wait_for_api
from tests.chaos.relay import PASSWORD_ENV, RELAY, RELAY_CHANNEL, ChaosRelay
from tests.chaos.verdict import Verdict, expectations
from tests.integration.delivery_support import catalog_text
from tests.servers import PostgresServer, free_port, postgres_server

LEASE_MS = 5000
# On a cluster: shards enough for each master to hold some (CRC16 of each hash tag decides).
CLUSTER_SHARDS = 8
# A worker is killed every few seconds, so a healthy work entry may be handed out many times
# (each restart and takeover counts) before one worker gets to finish it; the default of 5
# would dead-letter such entries as poison.
MAX_DELIVERIES = 50
DRAIN_TIMEOUT_S = 300.0
PREFIX = "chaos"
API_SECRET = "chaos-secret-key"
SHIPPED_RATE_LIMIT = "rate_limit = { per_second = 5000, burst = 500 }"
SHIPPED_TIMEOUT = "timeout_seconds = 10"
SHIPPED_EMAIL = f'[channels.{RELAY_CHANNEL}]\nprovider = "sandbox"'
SHIPPED_IN_APP = '[channels.IN_APP]\nprovider = "inbox"'
# Every provider's time limit must end inside the lease (the worker refuses to start
# otherwise); what is left of it is for recording the outcome.
PROVIDER_TIMEOUT_S = 4.0
# What the producer's addresses look like: none may appear in any process's log.
CONTACT = re.compile(r"user\d+@example\.com|\+49151\d{8}")


@dataclass(slots=True)
class Service:
    redis: DurableRedis | DurableCluster
    postgres: PostgresServer
    relay: ChaosRelay
    database_url: str
    base_url: str
    shards: int
    api: ServiceProcess
    workers: list[ServiceProcess]
    projector: ServiceProcess

    @property
    def processes(self) -> list[ServiceProcess]:
        return [self.api, *self.workers, self.projector]


def chaos_catalog(relay: ChaosRelay, *, idempotent: bool) -> str:
    """The shipped catalog with quick retries (the drain stays short), the shipped rate
    limit, time limits inside the lease, EMAIL through ``relay``, and IN_APP on the sandbox:
    the faults a notification's directives inject and the exactly-once accounting are the
    sandbox's (the inbox calls no provider, so there is nothing of it to inject)."""
    text = catalog_text(
        base=0.2, max_delay=1.0, attempts=6, rate_limit=SHIPPED_RATE_LIMIT,
        idempotent=idempotent,
    )  # fmt: skip
    for shipped in (SHIPPED_TIMEOUT, SHIPPED_EMAIL, SHIPPED_IN_APP):
        assert text.count(shipped) == 1, f"clarion.toml changed: update {shipped!r} here"
    text = text.replace(SHIPPED_TIMEOUT, f"timeout_seconds = {PROVIDER_TIMEOUT_S:g}")
    text = text.replace(SHIPPED_IN_APP, '[channels.IN_APP]\nprovider = "sandbox"')
    text = text.replace(SHIPPED_EMAIL, f'[channels.{RELAY_CHANNEL}]\nprovider = "{RELAY}"')
    return text + relay.catalog_entry(PROVIDER_TIMEOUT_S)


@contextmanager
def running_service(
    workdir: Path,
    plans: list[Planned],
    *,
    idempotent: bool,
    max_deliveries: int = MAX_DELIVERIES,
    cluster: bool = False,
    catalog_change: Callable[[str], str] = lambda text: text,
    api_keys: str = f"chaos:{API_SECRET}:send+read",
) -> Iterator[Service]:
    """Redis (a three-master cluster with ``cluster``), PostgreSQL, the relay (set up for
    ``plans``) and the service's processes, stopped afterwards whatever happened;
    ``api_keys``: the API's keys (``CLARION_API_KEYS``)."""
    mailboxes = {p.email: p.mailbox for p in plans if p.mailbox is not None}
    # Made per run, known only to the relay and (through the environment) the workers.
    password = secrets.token_urlsafe(18)
    relay = ChaosRelay(password=password, mailboxes=mailboxes)
    with relay:
        catalog = workdir / "clarion.toml"
        catalog.write_text(catalog_change(chaos_catalog(relay, idempotent=idempotent)))
        (workdir / "redis").mkdir()
        shards = CLUSTER_SHARDS if cluster else 1
        redis: DurableRedis | DurableCluster = (
            DurableCluster(workdir / "redis") if cluster else DurableRedis(workdir / "redis")
        )
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
                    "CLARION_API_KEYS": api_keys,
                    "CLARION_DIGEST_SECRET": "chaos-digest-secret",
                    "CLARION_PORT": str(port),
                    "CLARION_LEASE_MS": str(LEASE_MS),
                    "CLARION_MAX_DELIVERIES": str(max_deliveries),
                    PASSWORD_ENV: password,
                    "CLARION_SHARDS": str(shards),
                    # Ended deliveries' states leave Redis as soon as they are projected:
                    # faults then meet deliveries whose state is gone (a worker back from a
                    # pause, a reclaimed entry), and nothing may be sent again for them.
                    "CLARION_PROJECTED_STATE_RETENTION": "0",
                }
                service = Service(
                    redis, postgres, relay, database_url, f"http://127.0.0.1:{port}",
                    shards, *_processes(env, workdir),
                )  # fmt: skip
                with _started(service):
                    yield service
        finally:
            redis.stop()


def _processes(
    env: dict[str, str], workdir: Path
) -> tuple[ServiceProcess, list[ServiceProcess], ServiceProcess]:
    """The API (two uvicorn workers), two delivery workers and the projector, not started."""
    return (
        ServiceProcess("api", ("api", "--workers", "2"), env, workdir),
        [
            ServiceProcess(f"worker-{slot}", ("worker", "--slot", str(slot)), env, workdir)
            for slot in (0, 1)
        ],
        ServiceProcess("projector", ("projector",), env, workdir),
    )


@contextmanager
def _started(service: Service) -> Iterator[None]:
    """Every process started and the API ready; every process stopped afterwards."""
    try:
        for process in service.processes:
            process.start()
        wait_for_api(service.base_url, service.api)
        yield
    finally:
        for process in service.processes:
            process.stop()


def settled(evidence: Evidence, expected_ids: set[str]) -> bool:
    """Every delivery final in Redis and the same in PostgreSQL (one whose state left Redis
    once projected: ended for good there); nothing pending anywhere."""
    for delivery_id in expected_ids:
        if delivery_id in evidence.released:
            projected = evidence.pg_states.get(delivery_id)
            if projected is None or projected.status not in RELEASED_ONCE_PROJECTED:
                return False
            continue
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


async def drained(service: Service, acknowledged: dict[str, Acknowledged]) -> Evidence:
    """``drain`` with a client of its own on the service's Redis."""
    redis = connect(service.redis.url)
    try:
        keys = KeySpace(PREFIX, service.shards)
        evidence = await drain(redis, keys, service.database_url, acknowledged)
    finally:
        await redis.aclose()
    evidence.relay = service.relay.record()
    return evidence


def conclude(
    service: Service,
    verdict: Verdict,
    table: str,
    crashes: list[Crash],
    workdir: Path,
    chaos_report: Callable[[str], None],
) -> None:
    """Keep the summary table for the session's end and in ``workdir``; fail the test with
    the table and every process's last words when the verdict found problems.

    Called before the service stops, so the tails show the processes as they were."""
    chaos_report(table)
    (workdir / "chaos-report.txt").write_text(table)
    if verdict.failures():
        tails = "\n".join(f"--- {p.name}\n{p.tail(15)}" for p in service.processes)
        died = "\n".join(f"--- crash {c.name}\n{c.log_tail}" for c in crashes)
        pytest.fail(f"{table}\n{died}\n{tails}", pytrace=False)


def check_logs(service: Service, verdict: Verdict) -> None:
    """No process may have logged a contact address or the relay's password."""
    for process in service.processes:
        text = process.log_path.read_text(errors="replace")
        if CONTACT.search(text):
            verdict.problem("contact address in a log", process.name)
        if service.relay.password in text:
            verdict.problem("the relay's password in a log", process.name)
