"""The figures ``clarion status`` prints, ending with the advisor's hints.

Two snapshots (``app.metrics.Snapshot``) taken some seconds apart give the rates: how fast
each queue drains, sends and failing attempts per second, new dead letters. The hints are
the advisor's (``app.operations.advisor``), on the later snapshot: the same as
``GET /v1/ops/lag`` and the dashboard show.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from app.metrics import ATTEMPT_FAILURES, OPT_OUTS, Snapshot
from app.operations.advice import advice
from app.operations.advisor import age as _age
from streams.core.vocabulary import DeliveryStatus


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


def render(snapshot: Snapshot, before: Snapshot) -> str:
    """The status table, the totals and the hints, as printed."""
    rates = Rates.between(before, snapshot)
    at = datetime.fromtimestamp(snapshot.backlog.now_ms / 1000, UTC).strftime(
        "%Y-%m-%d %H:%M:%S UTC"
    )
    lines = [f"Clarion status at {at} (rates over {rates.seconds:.1f} s)", ""]
    lines += _stream_table(snapshot, before, rates)
    lines += ["", *_totals(snapshot, rates), ""]
    for hint in advice(snapshot):
        lines += [f"hint: {hint.problem}: {hint.evidence}", f"      {hint.text}"]
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
        f"dead letters    {backlog.dlq_open:,} open of {backlog.dlq_size:,} "
        f"(+{rates.new_dead_letters})",
        f"delayed         {backlog.delayed_size:,}, earliest overdue by "
        f"{_age(backlog.delayed_overdue_ms)}",
        f"retries         {_retries(snapshot)}",
        f"workers         {_workers(snapshot)}",
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


def _queued(by_producer: dict[str, int]) -> str:
    """Producers' items waiting for their fair share, the largest queues first."""
    if not by_producer:
        return "0"
    largest = sorted(by_producer.items(), key=lambda pair: -pair[1])[:5]
    return f"{sum(by_producer.values()):,} (" + ", ".join(f"{p} {n:,}" for p, n in largest) + ")"


def _retries(snapshot: Snapshot) -> str:
    """Retries waiting in ``delayed`` per priority, and the oldest one's age."""
    retries = snapshot.retries
    counts = ", ".join(f"{p} {f.count:,}" for p, f in retries.by_priority.items())
    capped = " (counted among the earliest due only)" if retries.capped else ""
    return f"{retries.count:,} ({counts}), oldest {_age(retries.oldest_age_ms)}{capped}"


def _workers(snapshot: Snapshot) -> str:
    """How many delivery workers report, their CPU share and the provider waits they saw."""
    workers = snapshot.workers
    if not workers.reporting:
        return "none reporting"
    return (
        f"{workers.reporting} reporting, CPU {workers.cpu_share:.0%} on average, waits: "
        f"rate limit {workers.waits('rate_limited')}, in-flight bound "
        f"{workers.waits('bulkhead_full')}, circuit {workers.waits('circuit_open')}"
    )
