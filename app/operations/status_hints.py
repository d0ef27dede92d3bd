"""The figures ``clarion status`` prints, and the runbook hints it ends with.

Two snapshots (``app.metrics.Snapshot``) taken some seconds apart give the rates: how fast
each queue drains, sends and failing attempts per second, new dead letters. The hints name
the most urgent problems, checked against these limits:

- lag high: a work stream's oldest unfinished entry has waited longer than
  ``QUEUE_AGE_LIMIT_MS`` for its priority, due retries wait in ``delayed`` longer than
  ``DELAYED_OVERDUE_LIMIT_MS`` (no worker moves them), the projection lags more than
  ``PROJECTION_LAG_LIMIT_MS``, the status webhooks more than ``STATUS_WEBHOOK_LAG_LIMIT_MS``,
  or a producer's status-webhook outbox holds a status older than ``OUTBOX_AGE_LIMIT_MS``
  (its endpoint fails);
- DLQ growing: any new dead letter during the interval;
- retry storm: at least ``RETRY_STORM_FAILURES_PER_S`` failing attempts per second, and at
  least ``RETRY_STORM_FAILED_SHARE`` of all attempts failing;
- circuit open: a provider's circuit breaker is open or probing;
- otherwise all calm.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum

from app.metrics import ATTEMPT_FAILURES, OPT_OUTS, Snapshot
from streams.core.vocabulary import DeliveryStatus
from streams.delivery.circuit_breaker import CircuitState

QUEUE_AGE_LIMIT_MS = {"work:high": 5_000, "work:normal": 60_000, "work:low": 600_000}
DELAYED_OVERDUE_LIMIT_MS = 10_000
PROJECTION_LAG_LIMIT_MS = 60_000
STATUS_WEBHOOK_LAG_LIMIT_MS = 60_000
OUTBOX_AGE_LIMIT_MS = 300_000
RETRY_STORM_FAILURES_PER_S = 5.0
RETRY_STORM_FAILED_SHARE = 0.2


class Problem(StrEnum):
    LAG_HIGH = "lag high"
    DLQ_GROWING = "DLQ growing"
    RETRY_STORM = "retry storm"
    CIRCUIT_OPEN = "circuit open"
    ALL_CALM = "all calm"


@dataclass(frozen=True, slots=True)
class Hint:
    problem: Problem
    text: str  # what was seen and what to do


@dataclass(frozen=True, slots=True)
class Rates:
    """What changed between two snapshots, per second (dead letters: in all)."""

    seconds: float
    sent: float
    attempt_failures: float
    new_dead_letters: int

    @classmethod
    def between(cls, before: Snapshot, after: Snapshot) -> Rates:
        seconds = max(0.001, (after.backlog.now_ms - before.backlog.now_ms) / 1000)
        return cls(
            seconds=seconds,
            sent=(after.ended(DeliveryStatus.SENT) - before.ended(DeliveryStatus.SENT)) / seconds,
            attempt_failures=(after.total(ATTEMPT_FAILURES) - before.total(ATTEMPT_FAILURES))
            / seconds,
            new_dead_letters=max(0, after.backlog.dlq_size - before.backlog.dlq_size),
        )


def hints(snapshot: Snapshot, rates: Rates) -> list[Hint]:
    """The problems the figures show, most urgent first; ``all calm`` when there are none."""
    found = _lag_hints(snapshot)
    if rates.new_dead_letters:
        found.append(
            Hint(
                Problem.DLQ_GROWING,
                f"{rates.new_dead_letters} new dead letters in {rates.seconds:.1f} s "
                f"({snapshot.backlog.dlq_size} in all). Inspect them with `clarion dlq list`, "
                "fix the cause, then `clarion dlq replay`.",
            )
        )
    attempts = rates.sent + rates.attempt_failures
    if (
        rates.attempt_failures >= RETRY_STORM_FAILURES_PER_S
        and rates.attempt_failures >= RETRY_STORM_FAILED_SHARE * attempts
    ):
        found.append(
            Hint(
                Problem.RETRY_STORM,
                f"{rates.attempt_failures:.1f} attempts/s failing "
                f"({rates.attempt_failures / attempts:.0%} of attempts), "
                f"{snapshot.backlog.delayed_size} deliveries waiting in delayed. Check the "
                "provider (its status page, credentials, rate limits) and the error classes "
                "in clarion_delivery_attempt_failures_total; retries back off on their own.",
            )
        )
    found += _circuit_hints(snapshot)
    return found or [
        Hint(Problem.ALL_CALM, "no queue over its age limit, no new dead letters, few failures.")
    ]


def _circuit_hints(snapshot: Snapshot) -> list[Hint]:
    found = []
    for provider, circuit in sorted(snapshot.circuits.items()):
        if circuit.state is CircuitState.CLOSED:
            continue
        when = (
            f"probes again at {_clock(circuit.until_ms)}"
            if circuit.state is CircuitState.OPEN
            else "the next delivery probes it"
        )
        found.append(
            Hint(
                Problem.CIRCUIT_OPEN,
                f"provider {provider}'s circuit is {circuit.state.replace('_', '-')} "
                f"(opened {circuit.opened} times), {when}: its deliveries wait in delayed "
                "without using attempts, or go to the channel's next provider. Check the "
                "provider's status page, that the workers reach it (DNS, firewall, TLS), its "
                "credentials and quota, and the last errors (`clarion dlq list`, "
                "clarion_delivery_attempt_failures_total).",
            )
        )
    return found


def _clock(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%H:%M:%S UTC")


def _lag_hints(snapshot: Snapshot) -> list[Hint]:
    backlog = snapshot.backlog
    found = []
    for group in backlog.groups:
        limit = QUEUE_AGE_LIMIT_MS.get(group.stream)
        if limit is not None and group.oldest_waiting_age_ms > limit:
            found.append(
                Hint(
                    Problem.LAG_HIGH,
                    f"{group.stream} (shard {group.shard}) has waited "
                    f"{_age(group.oldest_waiting_age_ms)} (limit {_age(limit)}), "
                    f"{group.lag + group.pending} entries unfinished. Add delivery workers "
                    "(`clarion worker --processes N`) or check the provider: slow answers "
                    "and rate limits hold work back.",
                )
            )
    if backlog.delayed_overdue_ms > DELAYED_OVERDUE_LIMIT_MS:
        found.append(
            Hint(
                Problem.LAG_HIGH,
                f"due retries have waited {_age(backlog.delayed_overdue_ms)} in delayed: "
                "no delivery worker is moving them. Start one (`clarion worker`).",
            )
        )
    if snapshot.projection_lag_ms > PROJECTION_LAG_LIMIT_MS:
        found.append(
            Hint(
                Problem.LAG_HIGH,
                f"the read model is {_age(snapshot.projection_lag_ms)} behind. Check that "
                "`clarion projector` runs and PostgreSQL is reachable.",
            )
        )
    return found + _status_webhook_hints(snapshot)


def _status_webhook_hints(snapshot: Snapshot) -> list[Hint]:
    found = []
    if snapshot.status_webhook_lag_ms > STATUS_WEBHOOK_LAG_LIMIT_MS:
        found.append(
            Hint(
                Problem.LAG_HIGH,
                f"status webhooks are {_age(snapshot.status_webhook_lag_ms)} behind the events "
                "(and keep them from being trimmed). Check that `clarion status-webhooks` runs "
                "(`clarion run` starts it; one process is active at a time).",
            )
        )
    for outbox in snapshot.outboxes:
        if outbox.oldest_age_ms > OUTBOX_AGE_LIMIT_MS:
            found.append(
                Hint(
                    Problem.LAG_HIGH,
                    f"producer {outbox.producer}'s status webhook has held a status for "
                    f"{_age(outbox.oldest_age_ms)}, {outbox.waiting:,} waiting: its endpoint "
                    "fails (status_webhooks.endpoint_failing in the logs says how). Statuses "
                    "are retried until give_up_seconds, then dead-lettered; other producers' "
                    "are not held back.",
                )
            )
    return found


def render(snapshot: Snapshot, before: Snapshot) -> str:
    """The status table, the totals and the hints, as printed."""
    rates = Rates.between(before, snapshot)
    at = datetime.fromtimestamp(snapshot.backlog.now_ms / 1000, UTC).strftime(
        "%Y-%m-%d %H:%M:%S UTC"
    )
    lines = [f"Clarion status at {at} (rates over {rates.seconds:.1f} s)", ""]
    lines += _stream_table(snapshot, before, rates)
    lines += ["", *_totals(snapshot, rates), ""]
    lines += [f"hint: {hint.problem}: {hint.text}" for hint in hints(snapshot, rates)]
    return "\n".join(lines)


def _stream_table(snapshot: Snapshot, before: Snapshot, rates: Rates) -> list[str]:
    """One line per stream and group, in aligned columns, with how fast its wait changes."""
    waiting_before = {
        (g.stream, g.shard, g.group): g.lag + g.pending for g in before.backlog.groups
    }
    rows = [("stream", "shard", "group", "length", "pending", "lag", "oldest", "change/s")]
    for group in snapshot.backlog.groups:
        waiting = group.lag + group.pending
        earlier = waiting_before.get((group.stream, group.shard, group.group), waiting)
        rows.append(
            (
                group.stream, str(group.shard), group.group, f"{group.length:,}",
                f"{group.pending:,}", f"{group.lag:,}", _age(group.oldest_waiting_age_ms),
                f"{(waiting - earlier) / rates.seconds:+,.1f}",
            )
        )  # fmt: skip
    widths = [max(len(row[n]) for row in rows) for n in range(len(rows[0]))]
    return [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]


def _totals(snapshot: Snapshot, rates: Rates) -> list[str]:
    """The lines under the table: dead letters, delayed, queued, the projection, the totals
    so far, and the status webhooks and circuits when there are any."""
    backlog = snapshot.backlog
    lines = [
        f"dead letters    {backlog.dlq_size:,} (+{rates.new_dead_letters})",
        f"delayed         {backlog.delayed_size:,}, earliest overdue by "
        f"{_age(backlog.delayed_overdue_ms)}",
        f"queued          {_queued(backlog.queued)}",
        f"projection lag  {_age(snapshot.projection_lag_ms)}",
        f"sent            {snapshot.ended(DeliveryStatus.SENT):,.0f} ({rates.sent:,.1f}/s), "
        f"failed {snapshot.ended(DeliveryStatus.FAILED):,.0f}, "
        f"failing attempts {rates.attempt_failures:,.1f}/s",
        f"opted out       {snapshot.total(OPT_OUTS):,.0f}",
    ]
    if snapshot.outboxes:
        outboxes = snapshot.outboxes
        lines.append(
            f"status hooks    lag {_age(snapshot.status_webhook_lag_ms)}, "
            f"{sum(o.waiting for o in outboxes):,} waiting (oldest "
            f"{_age(max(o.oldest_age_ms for o in outboxes))}) for {len(outboxes)} producers, "
            f"{sum(o.dead_letters for o in outboxes):,} dead letters"
        )
    if snapshot.circuits:
        lines.append(
            "circuits        "
            + ", ".join(
                f"{provider} {circuit.state.replace('_', '-')}"
                for provider, circuit in sorted(snapshot.circuits.items())
            )
        )
    return lines


def _age(ms: int) -> str:
    """``-`` for nothing waiting, else seconds, minutes or hours."""
    if ms <= 0:
        return "-"
    if ms < 60_000:
        return f"{ms / 1000:.1f} s"
    if ms < 3_600_000:
        return f"{ms / 60_000:.1f} min"
    return f"{ms / 3_600_000:.1f} h"


def _queued(by_producer: dict[str, int]) -> str:
    """Producers' items waiting for their fair share, the largest queues first."""
    if not by_producer:
        return "0"
    largest = sorted(by_producer.items(), key=lambda pair: -pair[1])[:5]
    return f"{sum(by_producer.values()):,} (" + ", ".join(f"{p} {n:,}" for p, n in largest) + ")"
