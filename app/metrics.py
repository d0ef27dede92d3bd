"""What Clarion measures, where it is recorded, and how an operator reads it.

Counters and histograms (``streams.metrics.recorder``) are recorded where things happen: a
delivery's outcome in the worker, opt-outs and replayed requests at ingest, every HTTP
request in ``app.api.http_metrics``, status webhooks in their sender, unsubscribes in the
link's route and the feedback processor. Gauges of the backlog (``streams.metrics.backlog``),
of the open dead letters by error class (``streams.dlq.scan``, the newest ``SUMMARY_SCAN``
entries), of the producers' status-webhook outboxes (``streams.status_webhooks.store``), of the
retries waiting in ``delayed`` (``streams.metrics.retries``) and the delivery workers'
heartbeats (``streams.metrics.heartbeats``) are read live from Redis when asked.
``read_snapshot`` gathers them all; ``/metrics``, ``GET /v1/ops/lag`` and ``clarion status``
all show one, and the advisor (``app.operations.advisor``) reads its signals from one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import Redis

from streams.core.consumer_groups import PROJECTOR_GROUP, STATUS_WEBHOOK_GROUP
from streams.core.keys import KeySpace
from streams.core.vocabulary import DeliveryStatus
from streams.delivery.circuit_breaker import Circuit, read_circuits
from streams.delivery.store import Outcome
from streams.delivery.work_items import WorkItem
from streams.dlq.scan import Selection, Summary, summarize
from streams.metrics.backlog import Backlog, read_backlog
from streams.metrics.heartbeats import PROVIDER_WAIT_REASONS, Workers, read_workers
from streams.metrics.recorder import (
    CounterSpec,
    HistogramSpec,
    HistogramTotals,
    Labels,
    MetricsRecorder,
    read_counters,
    read_histograms,
)
from streams.metrics.retries import Retries, read_retries
from streams.status_webhooks.store import OutboxFigures, read_outboxes

DELIVERY_LATENCY = HistogramSpec(
    "clarion_delivery_latency_seconds",
    "Time from a notification's acceptance to the provider accepting one of its deliveries "
    "(retries and quiet hours included)",
    ("channel", "priority"),
    (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 14400),
)
DELIVERY_ATTEMPTS = HistogramSpec(
    "clarion_delivery_attempts",
    "Provider attempts a delivery took, counted when it ends SENT or FAILED",
    ("channel", "status"),
    (1, 2, 3, 4, 5, 6, 8, 10, 15, 20),
)
DELIVERY_FAILURES = CounterSpec(
    "clarion_delivery_failures_total",
    "Deliveries that ended FAILED (and went to the dead-letter queue), by error class",
    ("channel", "error_class"),
)
ATTEMPT_FAILURES = CounterSpec(
    "clarion_delivery_attempt_failures_total",
    "Failed provider attempts, retried or final, by error class",
    ("channel", "error_class"),
)
OPT_OUTS = CounterSpec(
    "clarion_opt_outs_total",
    "Deliveries suppressed at ingest because the recipient switched the type off",
    ("type",),
)
SUPPRESSED = CounterSpec(
    "clarion_suppressed_deliveries_total",
    "Deliveries suppressed at ingest (opted out, no or a dead address, the suppression "
    "list's reasons, no provider), after waiting for an address, or by a recipient's throttle, "
    "by channel and reason",
    ("channel", "reason"),
)
FEEDBACK = CounterSpec(
    "clarion_feedback_applied_total",
    "Provider feedback applied to its delivery (delivered, bounced, complained, ...)",
    ("provider", "feedback"),
)
FEEDBACK_UNMATCHED = CounterSpec(
    "clarion_feedback_unmatched_total",
    "Provider feedback about a message no delivery was found for (dropped after a while)",
    ("provider",),
)
HTTP_REQUESTS = HistogramSpec(
    "clarion_http_request_duration_seconds",
    "HTTP requests and how long they took, by method, route template and status class",
    ("method", "route", "status"),
    (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
STATUS_WEBHOOKS = CounterSpec(
    "clarion_status_webhooks_total",
    "Status webhooks by outcome: sent (answered 2xx), failed_attempt (retried), "
    "dead_lettered (given up)",
    ("producer", "outcome"),
)
SENT_AFTER_RETRY = CounterSpec(
    "clarion_sent_after_retry_total",
    "Deliveries that ended SENT after more than one provider attempt (their share: this "
    'over clarion_delivery_attempts_count{status="SENT"})',
    ("channel",),
)
# Where a duplicate was found and left alone: a request replayed under its Idempotency-Key
# (ingest), a work item whose delivery ended already or another live lease holds (worker), a
# provider's feedback applied already (feedback).
DUPLICATE_LAYERS = ("ingest", "worker", "feedback")
DUPLICATES_SKIPPED = CounterSpec(
    "clarion_duplicates_skipped_total",
    "Duplicates found and skipped: replayed requests (ingest), work items already ended or "
    "leased elsewhere (worker), provider feedback already applied (feedback)",
    ("layer",),
)
# How a recipient unsubscribed: the one-click link, or a provider's feedback (an unsubscribe
# or a complaint about the message).
UNSUBSCRIBE_SOURCES = ("link", "feedback")
UNSUBSCRIBES = CounterSpec(
    "clarion_unsubscribes_total",
    "Recipients who unsubscribed, by the type and channel of the message they did it from "
    "and how: link (one-click unsubscribe) or feedback (a provider's unsubscribe or complaint)",
    ("type", "channel", "source"),
)
THROTTLED = CounterSpec(
    "clarion_throttled_total",
    "Deliveries a recipient's throttle refused (its type's, its category's or the default "
    "cap), by type and action: suppress (SUPPRESSED) or defer (SCHEDULED until it allows)",
    ("type", "action"),
)
COUNTERS = (
    DELIVERY_FAILURES, ATTEMPT_FAILURES, OPT_OUTS, SUPPRESSED, FEEDBACK, FEEDBACK_UNMATCHED,
    STATUS_WEBHOOKS, SENT_AFTER_RETRY, DUPLICATES_SKIPPED, UNSUBSCRIBES, THROTTLED,
)  # fmt: skip
HISTOGRAMS = (DELIVERY_LATENCY, DELIVERY_ATTEMPTS, HTTP_REQUESTS)
# Work entries dead-lettered as POISON cannot always be decoded: their channel is unknown.
UNKNOWN_CHANNEL = "UNKNOWN"
# Read off the enum once, not per delivery: on Python 3.11 each ``DeliveryStatus.SENT`` goes
# through the hook of ``EnumType.__getattr__``, about 1,000 instructions.
_SENT, _FAILED = DeliveryStatus.SENT, DeliveryStatus.FAILED
_SUPPRESSED = DeliveryStatus.SUPPRESSED


def record_outcome(recorder: MetricsRecorder, item: WorkItem, outcome: Outcome) -> None:
    """Count a delivery step's recorded outcome: a send, a failed attempt, a final failure,
    a suppression."""
    status = outcome.fields.get("status")
    error_class = outcome.fields.get("error_class")
    if status == _SENT:
        # The outcome was stamped when the provider answered, before it was recorded.
        accepted_ms = int(outcome.fields["last_attempt_ms"])
        latency = max(0, accepted_ms - item.created_ms) / 1000
        recorder.observe(DELIVERY_LATENCY, (item.channel, item.priority), latency)
    if error_class is not None:  # only a failed attempt names an error class
        recorder.inc(ATTEMPT_FAILURES, (item.channel, str(error_class)))
    if status == _FAILED:
        recorder.inc(DELIVERY_FAILURES, (item.channel, str(error_class)))
    if status == _SUPPRESSED:  # a delivery that waited for an address
        recorder.inc(SUPPRESSED, (item.channel, str(outcome.fields.get("reason", ""))))
    if status in (_SENT, _FAILED):
        attempts = outcome.fields.get("attempts", 0)
        recorder.observe(DELIVERY_ATTEMPTS, (item.channel, str(status)), float(attempts))
        if status == _SENT and int(attempts) > 1:
            recorder.inc(SENT_AFTER_RETRY, (item.channel,))


def record_throttled(recorder: MetricsRecorder, item: WorkItem, action: str) -> None:
    """Count a delivery its recipient's throttle refused (the outcome was recorded)."""
    recorder.inc(THROTTLED, (item.notification_type, action))


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Every figure at one moment: the live backlog and the counters summed so far."""

    backlog: Backlog
    counters: dict[str, dict[Labels, float]]
    histograms: dict[str, dict[Labels, HistogramTotals]]
    # Each provider's circuit breaker (providers with the breaker on), by name.
    circuits: dict[str, Circuit] = field(default_factory=dict)
    # Each producer's status-webhook outbox and dead letters.
    outboxes: list[OutboxFigures] = field(default_factory=list)
    # The open dead letters among the newest ``SUMMARY_SCAN`` entries, by error class.
    dead_letters: Summary = field(default_factory=Summary)
    # Retries waiting in ``delayed``, by priority; the delivery workers' fresh heartbeats.
    retries: Retries = field(default_factory=Retries)
    workers: Workers = field(default_factory=Workers)

    @property
    def projection_lag_ms(self) -> int:
        """Age of the oldest event the projector has not finished (as the status API says)."""
        return self._events_lag_ms(PROJECTOR_GROUP)

    @property
    def status_webhook_lag_ms(self) -> int:
        """Age of the oldest event the status-webhooks process has not read into outboxes."""
        return self._events_lag_ms(STATUS_WEBHOOK_GROUP)

    def _events_lag_ms(self, group_name: str) -> int:
        return max(
            (
                group.oldest_waiting_age_ms
                for group in self.backlog.groups
                if group.stream == "events" and group.group == group_name
            ),
            default=0,
        )

    def total(self, counter: CounterSpec) -> float:
        return sum(self.counters[counter.name].values())

    def ended(self, status: DeliveryStatus) -> float:
        """Deliveries that ended ``status`` (SENT or FAILED) so far."""
        label = DELIVERY_ATTEMPTS.labels.index("status")
        totals = self.histograms[DELIVERY_ATTEMPTS.name].items()
        return sum(h.count for labels, h in totals if labels[label] == status)

    def by_label(self, counter: CounterSpec, label: str) -> dict[str, float]:
        """``counter``'s totals summed per value of one of its labels."""
        index = counter.labels.index(label)
        sums: dict[str, float] = {}
        for labels, value in self.counters[counter.name].items():
            sums[labels[index]] = sums.get(labels[index], 0) + value
        return sums


async def read_snapshot(redis: Redis, keys: KeySpace, providers: Sequence[str] = ()) -> Snapshot:
    """Read every figure from Redis: works in any process, also while the API is down.
    ``providers``: those whose circuit breakers to read."""
    backlog, counters, histograms, circuits, outboxes, dead_letters = await asyncio.gather(
        read_backlog(redis, keys),
        read_counters(redis, keys, COUNTERS),
        read_histograms(redis, keys, HISTOGRAMS),
        read_circuits(redis, keys, providers),
        read_outboxes(redis, keys),
        summarize(redis, keys, Selection(), samples=0),
    )
    retries, workers = await asyncio.gather(
        read_retries(redis, keys, backlog.now_ms), read_workers(redis, keys, backlog.now_ms)
    )
    return Snapshot(
        backlog, counters, histograms, circuits, outboxes, dead_letters, retries, workers
    )


def lag_report(snapshot: Snapshot) -> dict[str, Any]:
    """The figures of ``GET /v1/ops/lag``: the backlog, plus delivery totals so far."""
    return {
        "at_ms": snapshot.backlog.now_ms,
        **_backlog_report(snapshot.backlog),
        "projection_lag_ms": snapshot.projection_lag_ms,
        "circuits": {
            provider: {
                "state": circuit.state,
                "until_ms": circuit.until_ms,
                "opened": circuit.opened,
            }
            for provider, circuit in sorted(snapshot.circuits.items())
        },
        "status_webhooks": status_webhook_report(snapshot),
        "deliveries": _delivery_report(snapshot),
        "retries": {
            "by_priority": {
                str(priority): {"count": figures.count, "oldest_age_ms": figures.oldest_age_ms}
                for priority, figures in snapshot.retries.by_priority.items()
            },
            "capped": snapshot.retries.capped,
        },
        "workers": {
            "reporting": snapshot.workers.reporting,
            "cpu_share": round(snapshot.workers.cpu_share, 3),
            "provider_waits": {r: snapshot.workers.waits(r) for r in PROVIDER_WAIT_REASONS},
        },
    }


def _backlog_report(backlog: Backlog) -> dict[str, object]:
    """Each stream and group's backlog, then the dead letters, delayed entries and queued
    items in all and per shard."""
    return {
        "streams": [
            {
                "stream": group.stream,
                "shard": group.shard,
                "group": group.group,
                "length": group.length,
                "pending": group.pending,
                "lag": group.lag,
                "oldest_pending_age_ms": group.oldest_pending_age_ms,
                "oldest_unread_age_ms": group.oldest_unread_age_ms,
            }
            for group in backlog.groups
        ],
        "dlq": {
            "size": backlog.dlq_size,
            "open": backlog.dlq_open,
            "shards": [{"shard": s.shard, "size": s.dlq_size} for s in backlog.shards],
        },
        "delayed": {
            "size": backlog.delayed_size,
            "overdue_ms": backlog.delayed_overdue_ms,
            "shards": [
                {"shard": s.shard, "size": s.delayed_size, "overdue_ms": s.delayed_overdue_ms}
                for s in backlog.shards
            ],
        },
        "queued": {
            "producers": backlog.queued,
            "shards": [{"shard": s.shard, "producers": s.queued} for s in backlog.shards],
        },
    }


def _delivery_report(snapshot: Snapshot) -> dict[str, object]:
    """Deliveries sent (after a retry too) and failed so far, failing attempts, open dead
    letters, opt-outs, suppressions, unsubscribes and duplicates skipped."""
    return {
        "sent": int(snapshot.ended(DeliveryStatus.SENT)),
        "sent_after_retry": int(snapshot.total(SENT_AFTER_RETRY)),
        "failed": int(snapshot.ended(DeliveryStatus.FAILED)),
        "failed_by_error_class": _ints(snapshot.by_label(DELIVERY_FAILURES, "error_class")),
        "attempt_failures": int(snapshot.total(ATTEMPT_FAILURES)),
        "opted_out_by_type": _ints(snapshot.by_label(OPT_OUTS, "type")),
        "suppressed_by_reason": _ints(snapshot.by_label(SUPPRESSED, "reason")),
        "dead_letters_open_by_error_class": _ints(dict(snapshot.dead_letters.by_error_class)),
        "unsubscribed_by_type": _ints(snapshot.by_label(UNSUBSCRIBES, "type")),
        "duplicates_skipped_by_layer": _ints(snapshot.by_label(DUPLICATES_SKIPPED, "layer")),
    }


def status_webhook_report(snapshot: Snapshot) -> dict[str, object]:
    """How far the status-webhooks process is behind, and each producer's outbox."""
    sent = _ints(_by_producer(snapshot, "sent"))
    dead = _ints(_by_producer(snapshot, "dead_lettered"))
    return {
        "lag_ms": snapshot.status_webhook_lag_ms,
        "producers": {
            outbox.producer: {
                "waiting": outbox.waiting,
                "oldest_age_ms": outbox.oldest_age_ms,
                "dead_letters": outbox.dead_letters,
                "sent": sent.get(outbox.producer, 0),
                "dead_lettered": dead.get(outbox.producer, 0),
            }
            for outbox in snapshot.outboxes
        },
    }


def _by_producer(snapshot: Snapshot, outcome: str) -> dict[str, float]:
    """Status webhooks of one outcome so far, per producer."""
    totals: dict[str, float] = {}
    for (producer, counted), value in snapshot.counters[STATUS_WEBHOOKS.name].items():
        if counted == outcome:
            totals[producer] = totals.get(producer, 0) + value
    return totals


def _ints(values: dict[str, float]) -> dict[str, int]:
    return {name: int(value) for name, value in sorted(values.items())}
