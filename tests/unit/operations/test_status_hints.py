"""The runbook hint of ``clarion status``: which problem the figures show."""

from __future__ import annotations

import dataclasses

from app.metrics import ATTEMPT_FAILURES, COUNTERS, DELIVERY_ATTEMPTS, HISTOGRAMS, Snapshot
from app.operations.status_hints import (
    DELAYED_OVERDUE_LIMIT_MS,
    OUTBOX_AGE_LIMIT_MS,
    PROJECTION_LAG_LIMIT_MS,
    QUEUE_AGE_LIMIT_MS,
    STATUS_WEBHOOK_LAG_LIMIT_MS,
    Problem,
    Rates,
    hints,
    render,
)
from streams.delivery.circuit_breaker import Circuit, CircuitState
from streams.metrics.backlog import Backlog, GroupBacklog, ShardBacklog
from streams.metrics.recorder import HistogramTotals
from streams.status_webhooks.store import OutboxFigures

NOW_MS = 1_800_000_000_000


def snapshot(
    *,
    high_age_ms: int = 0,
    low_age_ms: int = 0,
    projection_ms: int = 0,
    dlq: int = 0,
    overdue_ms: int = 0,
    at_ms: int = NOW_MS,
    sent: float = 0,
    attempt_failures: float = 0,
) -> Snapshot:
    def group(stream: str, name: str, age_ms: int) -> GroupBacklog:
        return GroupBacklog(stream, 0, name, 10, 0, 10 if age_ms else 0, 0, age_ms)

    groups = [
        group("events", "projector", projection_ms),
        group("work:high", "delivery", high_age_ms),
        group("work:normal", "delivery", 0),
        group("work:low", "delivery", low_age_ms),
    ]
    counters: dict[str, dict[tuple[str, ...], float]] = {c.name: {} for c in COUNTERS}
    counters[ATTEMPT_FAILURES.name] = {("SMS", "TRANSIENT"): attempt_failures}
    histograms: dict[str, dict[tuple[str, ...], HistogramTotals]] = {h.name: {} for h in HISTOGRAMS}
    histograms[DELIVERY_ATTEMPTS.name] = {("SMS", "SENT"): HistogramTotals([(1.0, sent)], sent)}
    return Snapshot(
        Backlog(at_ms, groups, [ShardBacklog(0, dlq, 5, overdue_ms)]), counters, histograms
    )


def problems(before: Snapshot, after: Snapshot) -> list[Problem]:
    return [hint.problem for hint in hints(after, Rates.between(before, after))]


def test_nothing_waiting_is_all_calm() -> None:
    quiet = snapshot()
    later = snapshot(at_ms=NOW_MS + 2000, sent=100, attempt_failures=1)
    assert problems(quiet, later) == [Problem.ALL_CALM]


def test_a_high_queue_older_than_its_limit_is_lag_high() -> None:
    limit = QUEUE_AGE_LIMIT_MS["work:high"]
    assert problems(snapshot(), snapshot(high_age_ms=limit)) == [Problem.ALL_CALM]
    assert problems(snapshot(), snapshot(high_age_ms=limit + 1)) == [Problem.LAG_HIGH]


def test_a_low_queue_may_wait_longer_than_a_high_one() -> None:
    age = QUEUE_AGE_LIMIT_MS["work:high"] * 10
    assert problems(snapshot(), snapshot(low_age_ms=age)) == [Problem.ALL_CALM]


def test_overdue_retries_and_a_lagging_projector_are_lag_high() -> None:
    overdue = snapshot(overdue_ms=DELAYED_OVERDUE_LIMIT_MS + 1)
    assert problems(snapshot(), overdue) == [Problem.LAG_HIGH]
    behind = snapshot(projection_ms=PROJECTION_LAG_LIMIT_MS + 1)
    assert problems(snapshot(), behind) == [Problem.LAG_HIGH]


def test_new_dead_letters_are_dlq_growing() -> None:
    assert problems(snapshot(dlq=3), snapshot(dlq=3, at_ms=NOW_MS + 2000)) == [Problem.ALL_CALM]
    assert problems(snapshot(dlq=3), snapshot(dlq=4, at_ms=NOW_MS + 2000)) == [Problem.DLQ_GROWING]


def test_many_failing_attempts_are_a_retry_storm() -> None:
    before = snapshot(sent=1000, attempt_failures=100)
    # 20 failures/s against 80 sends/s: a fifth of the attempts fail.
    storm = snapshot(at_ms=NOW_MS + 1000, sent=1080, attempt_failures=120)
    assert problems(before, storm) == [Problem.RETRY_STORM]
    # As many failures per second, but among many more sends: not a storm.
    busy = snapshot(at_ms=NOW_MS + 1000, sent=2000, attempt_failures=120)
    assert problems(before, busy) == [Problem.ALL_CALM]
    # A few failures, all of the attempts: too few to call it a storm.
    trickle = snapshot(at_ms=NOW_MS + 1000, sent=1000, attempt_failures=104)
    assert problems(before, trickle) == [Problem.ALL_CALM]


def test_the_most_urgent_problem_comes_first() -> None:
    before = snapshot(dlq=1, attempt_failures=0)
    after = snapshot(at_ms=NOW_MS + 1000, high_age_ms=60_000, dlq=5, attempt_failures=50, sent=0)
    assert problems(before, after) == [Problem.LAG_HIGH, Problem.DLQ_GROWING, Problem.RETRY_STORM]


def test_an_open_or_probing_circuit_names_its_provider_and_what_to_check() -> None:
    before = snapshot()
    after = with_circuits(
        snapshot(at_ms=NOW_MS + 2000),
        {
            "sms": Circuit(CircuitState.OPEN, until_ms=NOW_MS + 30_000, opened=3),
            "mail": Circuit(CircuitState.HALF_OPEN),
            "push": Circuit(),
        },
    )
    found = hints(after, Rates.between(before, after))
    assert [hint.problem for hint in found] == [Problem.CIRCUIT_OPEN, Problem.CIRCUIT_OPEN]
    mail, sms = found
    assert "provider mail's circuit is half-open" in mail.text
    assert "provider sms's circuit is open (opened 3 times), probes again at" in sms.text
    assert "status page" in sms.text
    assert "credentials" in sms.text
    table = render(after, before)
    assert "circuits        mail half-open, push closed, sms open" in table


def with_circuits(taken: Snapshot, circuits: dict[str, Circuit]) -> Snapshot:
    return dataclasses.replace(taken, circuits=circuits)


def test_status_webhooks_behind_or_a_failing_endpoint_are_lag_high() -> None:
    behind = snapshot()
    behind = dataclasses.replace(
        behind,
        backlog=dataclasses.replace(
            behind.backlog,
            groups=[
                *behind.backlog.groups,
                GroupBacklog("events", 0, "status-webhooks", 10, 0, 10, 0,
                             STATUS_WEBHOOK_LAG_LIMIT_MS + 1),
            ],
        ),
    )  # fmt: skip
    [lagging] = hints(behind, Rates.between(snapshot(), behind))
    assert lagging.problem is Problem.LAG_HIGH
    assert "status webhooks are 1.0 min behind" in lagging.text
    assert "`clarion status-webhooks` runs" in lagging.text

    outboxes = [
        OutboxFigures("shop", 120, OUTBOX_AGE_LIMIT_MS + 1, 3),
        OutboxFigures("billing", 4, 1_000, 0),
    ]
    failing = dataclasses.replace(snapshot(at_ms=NOW_MS + 2000), outboxes=outboxes)
    [stuck] = hints(failing, Rates.between(snapshot(), failing))
    assert stuck.problem is Problem.LAG_HIGH
    assert "producer shop's status webhook has held a status for 5.0 min, 120 waiting" in (
        stuck.text
    )
    table = render(failing, snapshot())
    assert (
        "status hooks    lag -, 124 waiting (oldest 5.0 min) for 2 producers, 3 dead letters"
        in (table)
    )


def test_the_table_shows_producers_queued_for_their_share_largest_first() -> None:
    waiting = snapshot()
    waiting.backlog.shards[0].queued.update({"small": 5, "flood": 200_000})
    assert "queued          200,005 (flood 200,000, small 5)" in render(waiting, snapshot())
    assert "queued          0\n" in render(snapshot(), snapshot())
