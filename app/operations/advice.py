"""The advisor's signals, gathered in one place from a metrics snapshot, and its advice as
``clarion status``, ``GET /v1/ops/lag`` and the dashboard show it (the same texts in all
three: ``app.operations.advisor``). The dashboard, which a producer reads, names no producer
in the evidence."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import msgspec
from redis.asyncio import Redis

from app.metrics import THROTTLED, Snapshot, read_snapshot
from app.operations.advisor import OUTBOX_AGE_LIMIT_MS, Hint, Signals, WorkLag, advise
from streams.core.consumer_groups import DELIVERY_GROUP
from streams.core.keys import KeySpace
from streams.core.vocabulary import Priority
from streams.delivery.circuit_breaker import CircuitState


class AdviceView(msgspec.Struct, frozen=True):
    """One hint: the problem, what to look at first and where (fixed per problem, as the
    runbooks quote it), and what was seen."""

    problem: str
    text: str
    evidence: str


def signals_of(snapshot: Snapshot) -> Signals:
    """What the advisor decides on, read off one snapshot."""
    backlog, workers = snapshot.backlog, snapshot.workers
    queued = backlog.queued
    largest = max(queued.items(), key=lambda pair: pair[1]) if queued else None
    return Signals(
        open_dead_letters=backlog.dlq_open,
        retries=snapshot.retries.count,
        oldest_retry_age_ms=snapshot.retries.oldest_age_ms,
        work=tuple(_work_lag(snapshot, priority) for priority in Priority),
        delayed_overdue_ms=backlog.delayed_overdue_ms,
        largest_queue=largest,
        projection_lag_ms=snapshot.projection_lag_ms,
        status_webhook_lag_ms=snapshot.status_webhook_lag_ms,
        stuck_outboxes=tuple(
            o.producer for o in snapshot.outboxes if o.oldest_age_ms > OUTBOX_AGE_LIMIT_MS
        ),
        workers_reporting=workers.reporting,
        worker_cpu_share=workers.cpu_share,
        rate_limit_waits=workers.waits("rate_limited"),
        bulkhead_waits=workers.waits("bulkhead_full"),
        circuits_not_closed=tuple(
            name
            for name, circuit in sorted(snapshot.circuits.items())
            if circuit.state is not CircuitState.CLOSED
        ),
        throttled=tuple(
            (name, int(count))
            for name, count in sorted(snapshot.by_label(THROTTLED, "type").items())
        ),
    )


def _work_lag(snapshot: Snapshot, priority: Priority) -> WorkLag:
    """One priority's work streams over all shards: entries waiting, the oldest's age and
    shard."""
    groups = [
        group
        for group in snapshot.backlog.groups
        if group.stream == f"work:{priority.stream_name}" and group.group == DELIVERY_GROUP
    ]
    oldest = max(groups, key=lambda group: group.oldest_waiting_age_ms, default=None)
    return WorkLag(
        str(priority),
        sum(group.lag + group.pending for group in groups),
        oldest.oldest_waiting_age_ms if oldest else 0,
        oldest.shard if oldest else 0,
    )


def without_producers(signals: Signals) -> Signals:
    """The signals with no producer named: what one producer's dashboard may show of the
    others (how many outboxes are stuck, not whose; no largest queue)."""
    stuck = signals.stuck_outboxes
    return dataclasses.replace(
        signals,
        largest_queue=None,
        stuck_outboxes=(f"{len(stuck)} producers",) if stuck else (),
    )


def advice(snapshot: Snapshot, *, name_producers: bool = True) -> list[Hint]:
    signals = signals_of(snapshot)
    return advise(signals if name_producers else without_producers(signals))


async def read_advice(
    redis: Redis, keys: KeySpace, providers: Sequence[str], *, name_producers: bool = True
) -> list[Hint]:
    """Read a snapshot and advise on it (``providers``: those whose circuits to read)."""
    snapshot = await read_snapshot(redis, keys, providers)
    return advice(snapshot, name_producers=name_producers)


def advice_view(hints: Sequence[Hint]) -> list[AdviceView]:
    return [AdviceView(str(hint.problem), hint.text, hint.evidence) for hint in hints]
