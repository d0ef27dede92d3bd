"""Operational endpoints: liveness and readiness, ``GET /v1/ops/lag`` (with the advisor's
hints) and ``GET /metrics`` (Prometheus).

Lag and metrics read everything from Redis at request time: the counters every process adds
there and the live backlog. So each API process answers the same, whichever one a scrape
reaches. Both need a ``read`` key (Prometheus: ``authorization: {credentials: <key>}``),
because the API port is the one producers reach.
"""

from __future__ import annotations

import math
from typing import Any

import msgspec
import structlog
from litestar import Request, Response, get
from litestar.datastructures import State
from litestar.openapi.datastructures import ResponseSpec
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from app.api.auth import authorize
from app.api.errors import InvalidField
from app.api.read_model import ReadModel
from app.catalog import guarded_providers
from app.metrics import COUNTERS, HISTOGRAMS, Snapshot, lag_report, read_snapshot
from app.operations.advice import AdviceView, advice, advice_view
from app.operations.readiness import readiness
from streams.core.vocabulary import ERROR_CLASSES
from streams.delivery.circuit_breaker import CircuitState
from streams.dlq.scan import SUMMARY_SCAN
from streams.metrics.backlog import Backlog

log = structlog.get_logger(__name__)


@get("/v1/ops/health/live", raises=[InvalidField])
async def live() -> dict[str, str]:
    """Liveness: the process answers. No key needed."""
    return {"status": "ok"}


@get(
    ["/v1/ops/health/ready", "/v1/ops/health"],
    raises=[InvalidField],
    responses={503: ResponseSpec(dict[str, Any], description="Not ready: each check says why")},
)
async def ready(request: Request[Any, Any, State]) -> Response[dict[str, Any]]:
    """Readiness: Redis takes writes, every consumer group exists, PostgreSQL answers; 503
    naming what is wrong otherwise. No key needed, nothing sensitive in it."""
    read_model: ReadModel = request.app.state.read_model
    result = await readiness(request.app.state.redis, request.app.state.key_space, read_model.pool)
    body = {"status": "ready" if result.ready else "not ready", "checks": result.checks}
    return Response(body, status_code=200 if result.ready else 503)


@get("/metrics", media_type=CONTENT_TYPE_PLAIN_0_0_4, raises=[InvalidField])
async def metrics(request: Request[Any, Any, State]) -> Response[bytes]:
    """Every Clarion metric in the Prometheus text format."""
    authorize(request, "read")
    snapshot = await _snapshot(request)
    return Response(
        generate_latest(_Families(families(snapshot))), media_type=CONTENT_TYPE_PLAIN_0_0_4
    )


class LagReport(msgspec.Struct, frozen=True, kw_only=True):
    """The backlog and delivery figures (see the Operations page), and the advisor's hints:
    the first is the runbook's answer, the others further findings, in its order."""

    at_ms: int
    streams: list[dict[str, Any]]
    dlq: dict[str, Any]
    delayed: dict[str, Any]
    queued: dict[str, Any]
    projection_lag_ms: int
    circuits: dict[str, dict[str, Any]]
    status_webhooks: dict[str, Any]
    deliveries: dict[str, Any]
    # Retries waiting in ``delayed``: per priority their count and the oldest one's age.
    retries: dict[str, Any]
    # The delivery workers reporting: how many, their mean CPU share, the provider waits.
    workers: dict[str, Any]
    advice: list[AdviceView]


@get("/v1/ops/lag", raises=[InvalidField])
async def lag(request: Request[Any, Any, State]) -> LagReport:
    """Per stream and group: length, pending, lag and ages; DLQ, delayed, projection lag,
    retries, workers; the advisor's hints (``advice``: problem, text, evidence)."""
    authorize(request, "read")
    snapshot = await _snapshot(request)
    return LagReport(**lag_report(snapshot), advice=advice_view(advice(snapshot)))


async def _snapshot(request: Request[Any, Any, State]) -> Snapshot:
    state = request.app.state
    return await read_snapshot(state.redis, state.key_space, guarded_providers(state.catalog))


class _Families:
    """A prometheus-client collector of metric families built beforehand (reading Redis is
    asynchronous, a collector's ``collect`` is not)."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> list[Metric]:
        return self.families


def families(snapshot: Snapshot) -> list[Metric]:
    """The snapshot as Prometheus metric families: counters, histograms, backlog gauges."""
    out: list[Metric] = []
    for counter in COUNTERS:
        counts = CounterMetricFamily(counter.name, counter.help, labels=counter.labels)
        for labels, value in sorted(snapshot.counters[counter.name].items()):
            counts.add_metric(labels, value)
        out.append(counts)
    for histogram in HISTOGRAMS:
        family = HistogramMetricFamily(histogram.name, histogram.help, labels=histogram.labels)
        for labels, totals in sorted(snapshot.histograms[histogram.name].items()):
            buckets = [(_le(bound), count) for bound, count in totals.buckets]
            family.add_metric(labels, buckets, totals.sum)
        out.append(family)
    return (
        out
        + _backlog_families(snapshot)
        + [_circuit_family(snapshot)]
        + _status_webhook_families(snapshot)
        + _dead_letter_families(snapshot)
        + _retry_families(snapshot)
    )


def _dead_letter_families(snapshot: Snapshot) -> list[Metric]:
    """The open dead letters by error class (every class, 0 when none), among the newest
    ``SUMMARY_SCAN`` entries, and whether the queue holds more than that."""
    open_letters = _gauge(
        "clarion_dead_letters_open",
        f"Dead letters not yet replayed, by error class, among the newest {SUMMARY_SCAN:,} "
        "entries of the dead-letter streams",
        ("error_class",),
    )
    summary = snapshot.dead_letters
    for error_class in sorted({*ERROR_CLASSES, *summary.by_error_class}):
        open_letters.add_metric((error_class,), summary.by_error_class.get(error_class, 0))
    truncated = GaugeMetricFamily(
        "clarion_dead_letters_open_truncated",
        f"1 when the dead-letter streams hold more than {SUMMARY_SCAN:,} entries: "
        "clarion_dead_letters_open counts only the newest of them",
        value=int(summary.truncated),
    )
    return [open_letters, truncated]


def _retry_families(snapshot: Snapshot) -> list[Metric]:
    """Retries waiting in ``delayed``, per priority (``streams.metrics.retries``)."""
    count = _gauge(
        "clarion_due_retries",
        "Retries waiting in the delayed sets for their due time (deliveries with a failed "
        "attempt), by the priority they return to; counted among each shard's earliest-due "
        "members",
        ("priority",),
    )
    oldest = _gauge(
        "clarion_oldest_due_retry_age_seconds",
        "How long ago the notification of the oldest waiting retry was accepted (0: none waits)",
        ("priority",),
    )
    for priority, figures in snapshot.retries.by_priority.items():
        count.add_metric((str(priority),), figures.count)
        oldest.add_metric((str(priority),), figures.oldest_age_ms / 1000)
    return [count, oldest]


def _status_webhook_families(snapshot: Snapshot) -> list[Metric]:
    lag = GaugeMetricFamily(
        "clarion_status_webhook_lag_seconds",
        "Age of the oldest event the status-webhooks process has not read into outboxes",
        value=snapshot.status_webhook_lag_ms / 1000,
    )
    waiting = _gauge(
        "clarion_status_webhook_outbox_size",
        "Statuses waiting in a producer's outbox (being sent or not yet)",
        ("producer",),
    )
    oldest = _gauge(
        "clarion_status_webhook_outbox_oldest_age_seconds",
        "How long the oldest status in a producer's outbox has waited (0: none waits)",
        ("producer",),
    )
    dead = _gauge(
        "clarion_status_webhook_dead_letters",
        "Statuses given up for a producer, kept for CLARION_DLQ_RETENTION",
        ("producer",),
    )
    for outbox in snapshot.outboxes:
        waiting.add_metric((outbox.producer,), outbox.waiting)
        oldest.add_metric((outbox.producer,), outbox.oldest_age_ms / 1000)
        dead.add_metric((outbox.producer,), outbox.dead_letters)
    return [lag, waiting, oldest, dead]


# A circuit's state as a number: 0 closed, 1 half-open, 2 open.
_CIRCUIT_LEVEL = {CircuitState.CLOSED: 0, CircuitState.HALF_OPEN: 1, CircuitState.OPEN: 2}


def _circuit_family(snapshot: Snapshot) -> Metric:
    family = _gauge(
        "clarion_provider_circuit_state",
        "A provider's circuit breaker: 0 closed, 1 half-open (probing), 2 open",
        ("provider",),
    )
    for provider, circuit in sorted(snapshot.circuits.items()):
        family.add_metric((provider,), _CIRCUIT_LEVEL[circuit.state])
    return family


def _le(bound: float) -> str:
    return "+Inf" if math.isinf(bound) else repr(float(bound))


def _gauge(name: str, help_text: str, labels: tuple[str, ...]) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, help_text, labels=labels)


def _backlog_families(snapshot: Snapshot) -> list[Metric]:
    """The backlog's gauges: streams and their groups, shards, and the projection's lag."""
    projection = GaugeMetricFamily(
        "clarion_projection_lag_seconds",
        "Age of the oldest event the projector has not written to PostgreSQL",
        value=snapshot.projection_lag_ms / 1000,
    )
    return [
        *_stream_families(snapshot.backlog), *_shard_families(snapshot.backlog), projection,
    ]  # fmt: skip


def _stream_families(backlog: Backlog) -> list[Metric]:
    """Each stream's length, and each consumer group's pending entries, lag and ages."""
    per_group = ("stream", "shard", "group")
    length = _gauge("clarion_stream_length", "Entries in the stream", ("stream", "shard"))
    pending = _gauge("clarion_stream_pending", "Entries read, not yet acknowledged", per_group)
    lag = _gauge("clarion_stream_lag", "Entries the group has not read yet", per_group)
    oldest_pending = _gauge(
        "clarion_stream_oldest_pending_age_seconds",
        "Age of the group's oldest pending entry (0: none pending)",
        per_group,
    )
    oldest_unread = _gauge(
        "clarion_stream_oldest_unread_age_seconds",
        "Age of the oldest entry the group has not read yet (0: none)",
        per_group,
    )
    seen: set[tuple[str, str]] = set()
    for group in backlog.groups:
        stream = (group.stream, str(group.shard))
        if stream not in seen:  # a stream with several groups has one length
            seen.add(stream)
            length.add_metric(stream, group.length)
        labels = (*stream, group.group)
        pending.add_metric(labels, group.pending)
        lag.add_metric(labels, group.lag)
        oldest_pending.add_metric(labels, group.oldest_pending_age_ms / 1000)
        oldest_unread.add_metric(labels, group.oldest_unread_age_ms / 1000)
    return [length, pending, lag, oldest_pending, oldest_unread]


def _shard_families(backlog: Backlog) -> list[Metric]:
    """Each shard's dead letters, delayed entries and producers' fair-share queues."""
    dlq = _gauge("clarion_dlq_size", "Entries in the dead-letter stream", ("shard",))
    delayed = _gauge(
        "clarion_delayed_size", "Retries and deferrals waiting in the delayed set", ("shard",)
    )
    overdue = _gauge(
        "clarion_delayed_overdue_seconds",
        "How long ago the earliest delayed entry was due (0: none is due)",
        ("shard",),
    )
    queued = _gauge(
        "clarion_queued_size",
        "NORMAL and LOW work items waiting in a producer's queue for its fair share",
        ("shard", "producer"),
    )
    for shard in backlog.shards:
        dlq.add_metric((str(shard.shard),), shard.dlq_size)
        delayed.add_metric((str(shard.shard),), shard.delayed_size)
        overdue.add_metric((str(shard.shard),), shard.delayed_overdue_ms / 1000)
        for producer, count in shard.queued.items():
            queued.add_metric((str(shard.shard), producer), count)
    return [dlq, delayed, overdue, queued]
