"""The whole service under faults: nothing acknowledged is lost, doubled or left unfinished.

The API (two uvicorn workers), two delivery workers and the projector run as real processes
against a private Redis (AOF, ``appendfsync always``) and a private PostgreSQL (``service``).
While the producer sends, workers are SIGKILLed and one is SIGSTOPped past its lease, Redis is
SIGKILLed and restarted from its AOF, PostgreSQL crashes and restarts, the projector is
SIGKILLed. EMAIL goes through a real SMTP relay (``relay``: STARTTLS, AUTH), which keeps taking
messages throughout, so a delivery cut off between the relay's 250 and its recorded outcome
leaves a duplicate there (at least once: SMTP has no idempotency key). Once the faults stop
and the service drains, ``verdict`` judges what is left, against the sandbox's record and the
relay's; the summary table is printed at the end of the session. Redis faults the service
must heal from without any restart are in ``test_redis_faults``.

The fourth run puts time into the traffic (``later``): notifications sent later, some
cancelled after their 202, a type capped per recipient; under the same faults nothing may
reach a provider before its time, after its cancellation was acknowledged or beyond its cap.

The third run does the same on a three-master Redis Cluster (AOF, ``appendfsync always``,
8 shards): the Redis crash SIGKILLs one master and restarts it from its AOF while the others
serve on. The service runs slower there on two cores (three Redis servers and 8 shards' loops
share them), so that run is sized by ``CLARION_CHAOS_CLUSTER_NOTIFICATIONS`` (default 10000).

``CLARION_CHAOS_NOTIFICATIONS`` (default 20000) and ``CLARION_CHAOS_SECONDS`` (the send
period, default 60) size a run.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.chaos.digests_steps import (
    DIGEST_RECIPIENTS,
    DigestStepsProducer,
    digest_recipient,
    plan_digests_and_steps,
    with_digests_and_steps,
)
from tests.chaos.digests_steps_evidence import drained as digests_drained
from tests.chaos.digests_steps_evidence import keep, read_inboxes
from tests.chaos.digests_steps_verdict import Tally, judge_digests, judge_rest
from tests.chaos.faults import FaultInjector
from tests.chaos.later import (
    LaterProducer,
    judge_later,
    plan_later,
    resolve,
    summary,
    with_throttle,
)
from tests.chaos.load import Producer, plan
from tests.chaos.report import render
from tests.chaos.service import (
    API_SECRET,
    LEASE_MS,
    check_logs,
    conclude,
    drained,
    running_service,
)
from tests.chaos.steps_verdict import judge_steps
from tests.chaos.verdict import Verdict, judge

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(1200)]

NOTIFICATIONS = int(os.environ.get("CLARION_CHAOS_NOTIFICATIONS", "20000"))
CLUSTER_NOTIFICATIONS = int(os.environ.get("CLARION_CHAOS_CLUSTER_NOTIFICATIONS", "10000"))
SEND_SECONDS = float(os.environ.get("CLARION_CHAOS_SECONDS", "60"))
DIGEST_STEPS_NOTIFICATIONS = int(os.environ.get("CLARION_CHAOS_DIGEST_NOTIFICATIONS", "1800"))
PROFILES_SECRET = "chaos-profiles-key"


@pytest.mark.parametrize(
    ("idempotent", "cluster"),
    [(True, False), (False, False), (True, True)],
    ids=["idempotent", "not-idempotent", "cluster-idempotent"],
)
async def test_faults_lose_and_double_nothing(
    idempotent: bool, cluster: bool, tmp_path: Path, chaos_report: Callable[[str], None]
) -> None:
    count = CLUSTER_NOTIFICATIONS if cluster else NOTIFICATIONS
    plans = plan(count, seed=(7 if idempotent else 8) + (2 if cluster else 0))
    with running_service(tmp_path, plans, idempotent=idempotent, cluster=cluster) as service:
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
            evidence = await drained(service, producer.acknowledged)
        finally:
            respawner.cancel()
        settled_at = time.time()
        verdict = judge(
            producer.acknowledged,
            evidence,
            injector.faults,
            injector.crashes,
            producer.stats,
            idempotent=idempotent,
        )
        check_logs(service, verdict)
        sandbox = "idempotent" if idempotent else "not idempotent"
        redis = "a three-master Redis Cluster" if cluster else "one Redis"
        table = render(
            f"{len(plans)} notifications, {sandbox} sandbox, EMAIL over SMTP, {redis}",
            started,
            injector.faults,
            injector.crashes,
            injector.refused_starts,
            producer.stats,
            verdict,
            {"send": sent - started, "drain": settled_at - sent},
        )
        conclude(service, verdict, table, injector.crashes, tmp_path, chaos_report)


async def test_time_under_faults_sends_nothing_early_cancelled_or_beyond_a_cap(
    tmp_path: Path, chaos_report: Callable[[str], None]
) -> None:
    """The same faults over traffic with time in it (``later``): a quarter sent later, some
    cancelled after their 202, marketing capped per recipient. Besides everything the other
    runs check: nothing reaches a provider before its time, after its cancellation was
    acknowledged, or beyond its cap."""
    planned = plan_later(NOTIFICATIONS // 2, seed=13)
    with running_service(
        tmp_path, planned.plans, idempotent=True, catalog_change=with_throttle
    ) as service:
        injector = FaultInjector(
            service.redis, service.postgres, service.workers, service.projector, service.api,
            lease_s=LEASE_MS / 1000,
        )  # fmt: skip
        respawner = asyncio.create_task(injector.respawn())
        producer = LaterProducer(service.base_url, API_SECRET, planned.cancel)
        started = time.time()
        try:
            sending = asyncio.create_task(producer.send_all(planned.plans, SEND_SECONDS))
            await injector.run(lambda: producer.progress, sending)
            await sending
            sent = time.time()
            evidence = await drained(service, producer.acknowledged)
        finally:
            respawner.cancel()
        settled_at = time.time()
        expected, answered = resolve(producer, evidence)
        verdict = judge(
            producer.acknowledged, evidence, injector.faults, injector.crashes, producer.stats,
            idempotent=True, expected=expected,
        )  # fmt: skip
        judge_later(verdict, producer, evidence, answered)
        check_logs(service, verdict)
        table = render(
            f"{len(planned.plans)} notifications with time "
            f"({summary(producer, answered, evidence)}), idempotent sandbox, one Redis",
            started,
            injector.faults,
            injector.crashes,
            injector.refused_starts,
            producer.stats,
            verdict,
            {"send": sent - started, "drain": settled_at - sent},
        )
        conclude(service, verdict, table, injector.crashes, tmp_path, chaos_report)


async def test_digests_and_steps_under_faults_make_each_once_and_nothing_after_a_read(
    tmp_path: Path, chaos_report: Callable[[str], None]
) -> None:
    """The same faults over digests and escalation steps (``digests_steps``): every digest
    made once with exactly its items, no step sent after its read was acknowledged, every
    unread step sent once, one SMS per notification whose pushes were refused."""
    planned = plan_digests_and_steps(DIGEST_STEPS_NOTIFICATIONS, seed=21)
    keys = f"chaos:{API_SECRET}:send+read,profiles:{PROFILES_SECRET}:recipients"
    with running_service(
        tmp_path, planned.plans, idempotent=True, catalog_change=with_digests_and_steps,
        api_keys=keys,
    ) as service:  # fmt: skip
        injector = FaultInjector(
            service.redis, service.postgres, service.workers, service.projector, service.api,
            lease_s=LEASE_MS / 1000,
        )  # fmt: skip
        respawner = asyncio.create_task(injector.respawn())
        producer = DigestStepsProducer(service.base_url, API_SECRET, PROFILES_SECRET, planned)
        started = time.time()
        try:
            sending = asyncio.create_task(producer.send_all(planned.plans, SEND_SECONDS))
            await injector.run(lambda: producer.progress, sending)
            await sending
            sent = time.time()
            acknowledged = {ack.notification_id for ack in producer.acknowledged.values()}
            found = await digests_drained(service, acknowledged, set(producer.digests.values()))
        finally:
            respawner.cancel()
        recipients = [digest_recipient(n)["id"] for n in range(DIGEST_RECIPIENTS)]
        await read_inboxes(service.base_url, PROFILES_SECRET, recipients, found)
        settled_at = time.time()
        verdict, tally = Verdict(True, acknowledged=len(producer.acknowledged)), Tally()
        judge_digests(verdict, tally, producer, found, injector.faults)
        dead_letters = judge_steps(verdict, tally, producer, found, injector.faults)
        judge_rest(verdict, producer, found, injector.crashes, dead_letters)
        answered = {d: s for c in producer.cancels.values() for d, s in c.statuses.items()}
        judge_later(verdict, producer, found.evidence, answered)
        check_logs(service, verdict)
        keep(tmp_path / "evidence.json", found, producer)
        table = render(
            f"{len(planned.plans)} notifications: digests and escalation steps, idempotent "
            "sandbox, one Redis",
            started, injector.faults, injector.crashes, injector.refused_starts,
            producer.stats, verdict, {"send": sent - started, "drain": settled_at - sent},
            tally.notes(),
        )  # fmt: skip
        conclude(service, verdict, table, injector.crashes, tmp_path, chaos_report)
