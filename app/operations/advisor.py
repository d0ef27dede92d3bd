"""The advisor: which runbook step the signals call for, following one decision tree.

``advise`` is a pure function of ``Signals`` (gathered by ``app.operations.advice``). It
walks the tree in this order, and each branch that applies adds one hint:

1. open dead letters and retries at once: ``DLQ_AND_RETRIES_TEXT``;
2. lag high: a work stream's oldest unfinished entry older than ``QUEUE_AGE_LIMIT_MS`` for
   its priority, more than ``WAITING_ENTRIES_LIMIT`` entries of a priority waiting, or due
   ``delayed`` members not moved for ``DELAYED_OVERDUE_LIMIT_MS``: ``LAG_TEXT``, or
   ``NO_WORKER_TEXT`` when no delivery worker reports, or ``ADD_WORKERS_TEXT`` only when the
   workers are the bottleneck (their mean CPU share at least ``WORKER_CPU_BUSY_SHARE``, no
   provider waits, no dead letters with retries, no retry storm). Then, separately, the
   projection (``PROJECTION_LAG_LIMIT_MS``) and the status webhooks
   (``STATUS_WEBHOOK_LAG_LIMIT_MS``, an outbox older than ``OUTBOX_AGE_LIMIT_MS``);
3. open dead letters (without retries: those are branch 1): ``DEAD_LETTERS_TEXT``;
4. at least ``RETRY_STORM_RETRIES`` retries waiting (without dead letters: branch 1):
   ``RETRY_STORM_TEXT``;
5. a provider waiting (a circuit not closed, rate-limit waits), unless the lag hint names it
   already: ``PROVIDER_WAITS_TEXT``;
6. a type whose deliveries recipients' throttles refused at least ``THROTTLED_A_LOT`` times
   (``clarion_throttled_total``): ``THROTTLING_TEXT``, naming the types;
7. none of these: ``STABLE_TEXT``. Never while a dead letter is open (branch 1 or 3 applies).

The first hint is the tree's answer; the others are further findings, in the tree's order.
A hint's ``text`` is fixed per branch (the runbooks quote it); its ``evidence`` says what
was seen.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

QUEUE_AGE_LIMIT_MS = {"HIGH": 5_000, "NORMAL": 60_000, "LOW": 600_000}
WAITING_ENTRIES_LIMIT = 10_000  # work entries of one priority waiting, all shards
DELAYED_OVERDUE_LIMIT_MS = 10_000
PROJECTION_LAG_LIMIT_MS = 60_000
STATUS_WEBHOOK_LAG_LIMIT_MS = 60_000
OUTBOX_AGE_LIMIT_MS = 300_000
RETRIES_PRESENT = 1  # retries waiting that count as "retries happening"
RETRY_STORM_RETRIES = 100  # retries waiting, all priorities
WORKER_CPU_BUSY_SHARE = 0.8  # mean share of one CPU over the reporting workers
THROTTLED_A_LOT = 100  # deliveries of one type a throttle refused, since the counts began

DLQ_AND_RETRIES_TEXT = (
    "Dead letters and retries at once: check the error classification first (dead letters "
    "by error class: `clarion dlq list`, then `clarion dlq list --error-class <class> "
    "--samples 20`; failing attempts by class: clarion_delivery_attempt_failures_total). "
    "Do not scale blindly: more workers make more failing attempts."
)
LAG_TEXT = (
    "Find the cause before scaling. Check downstream latency first: provider call "
    "latency (the `<provider> send` spans, clarion_delivery_latency_seconds), circuits "
    "(clarion_provider_circuit_state) and rate-limit waits (`GET /v1/ops/lag`: "
    "workers.provider_waits). Then hot spots: one shard, priority or producer (the "
    "`clarion status` table, clarion_queued_size). Then consumer rebalancing: pending "
    "entries per consumer (`XINFO CONSUMERS clarion:{s<N>}:work:<priority> delivery`); a "
    "dead worker's entries wait out their lease before XAUTOCLAIM hands them over."
)
ADD_WORKERS_TEXT = (
    "The delivery workers are the bottleneck (CPU busy, providers with room, no retry "
    "storm): add workers (`clarion worker --processes N`, or more hosts), then watch the "
    "oldest wait fall in `clarion status`."
)
NO_WORKER_TEXT = (
    "No delivery worker reports: start one (`clarion worker`, or `clarion run`) and check "
    "why it stopped (the supervisor's supervisor.child_died, a missing provider secret)."
)
PROJECTION_LAG_TEXT = (
    "The read model is behind: check that `clarion projector` runs and PostgreSQL answers "
    "(`GET /v1/ops/health/ready`, the projector's logs)."
)
STATUS_WEBHOOK_LAG_TEXT = (
    "Status webhooks are behind: check that `clarion status-webhooks` runs (one process is "
    "active at a time), and for a stuck outbox the producer's endpoint "
    "(status_webhooks.endpoint_failing in the logs)."
)
DEAD_LETTERS_TEXT = (
    "Dead letters are open: read samples (`clarion dlq list`), determine the error class, "
    "fix the cause, and replay only after the fix (`clarion dlq replay … --dry-run` first)."
)
RETRY_STORM_TEXT = (
    "Retry storm: increase the backoff (the channel's `retry`), limit the rate (the "
    "provider's `rate_limit`) and check the circuit breaker (the provider's `circuit`, "
    "clarion_provider_circuit_state); retries waiting per priority: clarion_due_retries."
)
PROVIDER_WAITS_TEXT = (
    "A provider has no room (circuit open or rate limit reached): its deliveries wait "
    "without spending attempts. Check its status page, credentials and quota, and the last "
    "errors (`clarion dlq list`, the worker logs)."
)
THROTTLING_TEXT = (
    "Recipients keep hitting a type's throttle: a producer may be looping, sending one person "
    "the same notification again and again. Find who sends it (clarion_throttled_total by "
    "type; the deliveries of one recipient, `GET /v1/recipients/<id>/deliveries`) "
    "before raising the type's `throttle` in the catalog."
)
STABLE_TEXT = (
    "Stable: keep watching SLOs, lag and dead letters (`clarion status --watch`, the "
    "Grafana dashboard)."
)


class Problem(StrEnum):
    DLQ_AND_RETRIES = "dead letters and retries"
    LAG_HIGH = "lag high"
    PROJECTION_LAG = "projection lag"
    STATUS_WEBHOOKS_LAG = "status webhooks lag"
    DEAD_LETTERS = "dead letters"
    RETRY_STORM = "retry storm"
    PROVIDER_WAITS = "provider waits"
    THROTTLING = "throttling"
    STABLE = "stable"


@dataclass(frozen=True, slots=True)
class Hint:
    problem: Problem
    text: str  # what to look at first, and where: fixed per branch
    evidence: str  # what was seen


@dataclass(frozen=True, slots=True)
class WorkLag:
    """One priority's work streams over all shards."""

    priority: str  # HIGH, NORMAL or LOW
    waiting: int  # entries not finished (unread and pending)
    oldest_age_ms: int
    shard: int = 0  # where the oldest waits


@dataclass(frozen=True, slots=True)
class Signals:
    """What the advisor decides on; every field's zero means nothing to see."""

    open_dead_letters: int = 0
    retries: int = 0  # waiting in ``delayed``, all priorities
    oldest_retry_age_ms: int = 0
    work: tuple[WorkLag, ...] = ()
    delayed_overdue_ms: int = 0
    largest_queue: tuple[str, int] | None = None  # (producer, items) waiting for fair share
    projection_lag_ms: int = 0
    status_webhook_lag_ms: int = 0
    stuck_outboxes: tuple[str, ...] = ()  # producers with a status older than the limit
    workers_reporting: int = 0
    worker_cpu_share: float = 0.0
    rate_limit_waits: int = 0  # in the workers' last reports
    bulkhead_waits: int = 0
    circuits_not_closed: tuple[str, ...] = ()  # providers
    throttled: tuple[tuple[str, int], ...] = ()  # (type, deliveries refused), by type


def advise(signals: Signals) -> list[Hint]:
    """The hints that apply, in the tree's order; ``stable`` when none does."""
    dlq_and_retries = _dlq_and_retries(signals)
    found = [dlq_and_retries] if dlq_and_retries else []
    found += _lag(signals, storm_or_dlq=bool(dlq_and_retries) or _storm(signals))
    if signals.open_dead_letters and not dlq_and_retries:
        found.append(
            Hint(Problem.DEAD_LETTERS, DEAD_LETTERS_TEXT, f"{signals.open_dead_letters} open")
        )
    if _storm(signals) and not dlq_and_retries:
        found.append(Hint(Problem.RETRY_STORM, RETRY_STORM_TEXT, _retries_seen(signals)))
    if _provider_waits(signals) and not any(h.problem is Problem.LAG_HIGH for h in found):
        found.append(Hint(Problem.PROVIDER_WAITS, PROVIDER_WAITS_TEXT, _provider_waits(signals)))
    looping = [
        f"{name}: {count} refused" for name, count in signals.throttled if count >= THROTTLED_A_LOT
    ]
    if looping:
        found.append(Hint(Problem.THROTTLING, THROTTLING_TEXT, ", ".join(looping)))
    return found or [Hint(Problem.STABLE, STABLE_TEXT, "nothing over its limit")]


def _dlq_and_retries(signals: Signals) -> Hint | None:
    if signals.open_dead_letters and signals.retries >= RETRIES_PRESENT:
        seen = f"{signals.open_dead_letters} open dead letters, {_retries_seen(signals)}"
        return Hint(Problem.DLQ_AND_RETRIES, DLQ_AND_RETRIES_TEXT, seen)
    return None


def _storm(signals: Signals) -> bool:
    return signals.retries >= RETRY_STORM_RETRIES


def _retries_seen(signals: Signals) -> str:
    return (
        f"{signals.retries} retries waiting, the oldest accepted "
        f"{age(signals.oldest_retry_age_ms)} ago"
    )


def _provider_waits(signals: Signals) -> str:
    """What says a provider has no room ("" for nothing)."""
    seen = [f"circuit of {name} not closed" for name in signals.circuits_not_closed]
    if signals.rate_limit_waits:
        seen.append(f"{signals.rate_limit_waits} rate-limit waits")
    if signals.bulkhead_waits:
        seen.append(f"{signals.bulkhead_waits} waits for a provider's in-flight bound")
    return ", ".join(seen)


def _lag(signals: Signals, *, storm_or_dlq: bool) -> list[Hint]:
    """Branch 2: the work streams (one hint), then the projection and the status webhooks."""
    found = []
    lagging = [
        f"{lane.priority}: {lane.waiting} waiting, the oldest {age(lane.oldest_age_ms)} "
        f"(shard {lane.shard})"
        for lane in signals.work
        if lane.oldest_age_ms > QUEUE_AGE_LIMIT_MS.get(lane.priority, 0)
        or lane.waiting > WAITING_ENTRIES_LIMIT
    ]
    if signals.delayed_overdue_ms > DELAYED_OVERDUE_LIMIT_MS:
        lagging.append(f"due delayed entries not moved for {age(signals.delayed_overdue_ms)}")
    if lagging:
        found.append(_work_lag(signals, "; ".join(lagging), storm_or_dlq=storm_or_dlq))
    if signals.projection_lag_ms > PROJECTION_LAG_LIMIT_MS:
        seen = f"the oldest event not projected waited {age(signals.projection_lag_ms)}"
        found.append(Hint(Problem.PROJECTION_LAG, PROJECTION_LAG_TEXT, seen))
    if signals.status_webhook_lag_ms > STATUS_WEBHOOK_LAG_LIMIT_MS or signals.stuck_outboxes:
        seen = f"events unread for {age(signals.status_webhook_lag_ms)}"
        if signals.stuck_outboxes:
            seen += f"; stuck outboxes: {', '.join(signals.stuck_outboxes)}"
        found.append(Hint(Problem.STATUS_WEBHOOKS_LAG, STATUS_WEBHOOK_LAG_TEXT, seen))
    return found


def _work_lag(signals: Signals, seen: str, *, storm_or_dlq: bool) -> Hint:
    """The work streams' hint: which text the evidence about the workers allows."""
    if not signals.workers_reporting:
        return Hint(Problem.LAG_HIGH, NO_WORKER_TEXT, seen + "; no worker reports")
    workers = (
        f"{signals.workers_reporting} workers at {signals.worker_cpu_share:.0%} CPU on average"
    )
    if signals.largest_queue:
        producer, items = signals.largest_queue
        seen += f"; largest producer queue: {producer} ({items})"
    waits = _provider_waits(signals)
    if waits or storm_or_dlq or signals.worker_cpu_share < WORKER_CPU_BUSY_SHARE:
        why = waits or ("failures" if storm_or_dlq else "CPU has room")
        return Hint(Problem.LAG_HIGH, LAG_TEXT, f"{seen}; {workers}; not the workers: {why}")
    return Hint(Problem.LAG_HIGH, f"{LAG_TEXT} {ADD_WORKERS_TEXT}", f"{seen}; {workers}")


def age(ms: int) -> str:
    """``-`` for nothing waiting, else seconds, minutes or hours."""
    if ms <= 0:
        return "-"
    if ms < 60_000:
        return f"{ms / 1000:.1f} s"
    if ms < 3_600_000:
        return f"{ms / 60_000:.1f} min"
    return f"{ms / 3_600_000:.1f} h"
