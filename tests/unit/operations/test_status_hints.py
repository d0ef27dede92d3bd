"""What ``clarion status`` prints: the table, the totals and the advisor's hints."""

from __future__ import annotations

import dataclasses

from app.metrics import ATTEMPT_FAILURES, COUNTERS, DELIVERY_ATTEMPTS, HISTOGRAMS, Snapshot
from app.operations.advisor import (
    DEAD_LETTERS_TEXT,
    NO_WORKER_TEXT,
    QUEUE_AGE_LIMIT_MS,
    STABLE_TEXT,
)
from app.operations.status_hints import Rates, render
from streams.core.vocabulary import Priority
from streams.delivery.circuit_breaker import Circuit, CircuitState
from streams.metrics.backlog import Backlog, GroupBacklog, ShardBacklog
from streams.metrics.heartbeats import Heartbeat, Workers
from streams.metrics.recorder import HistogramTotals
from streams.metrics.retries import PriorityRetries, Retries
from streams.status_webhooks.store import OutboxFigures

NOW_MS = 1_800_000_000_000
WORKING = Workers({"host-0": Heartbeat(at_ms=NOW_MS, window_ms=5000, cpu_share=0.25)})


def snapshot(
    *,
    high_age_ms: int = 0,
    dlq: int = 0,
    resolved: int = 0,
    at_ms: int = NOW_MS,
    sent: float = 0,
    attempt_failures: float = 0,
    workers: Workers = WORKING,
) -> Snapshot:
    def group(stream: str, name: str, age_ms: int) -> GroupBacklog:
        return GroupBacklog(stream, 0, name, 10, 0, 10 if age_ms else 0, 0, age_ms)

    groups = [
        group("events", "projector", 0),
        group("work:high", "delivery", high_age_ms),
        group("work:normal", "delivery", 0),
        group("work:low", "delivery", 0),
    ]
    counters: dict[str, dict[tuple[str, ...], float]] = {c.name: {} for c in COUNTERS}
    counters[ATTEMPT_FAILURES.name] = {("SMS", "TRANSIENT"): attempt_failures}
    histograms: dict[str, dict[tuple[str, ...], HistogramTotals]] = {h.name: {} for h in HISTOGRAMS}
    histograms[DELIVERY_ATTEMPTS.name] = {("SMS", "SENT"): HistogramTotals([(1.0, sent)], sent)}
    shards = [ShardBacklog(0, dlq, 5, 0, {}, resolved)]
    return Snapshot(Backlog(at_ms, groups, shards), counters, histograms, workers=workers)


def hint_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("hint: ")]


def test_a_quiet_service_is_stable() -> None:
    output = render(snapshot(at_ms=NOW_MS + 2000, sent=100), snapshot())
    assert hint_lines(output) == ["hint: stable: nothing over its limit"]
    assert f"      {STABLE_TEXT}" in output.splitlines()


def test_open_dead_letters_are_never_stable_and_settled_ones_do_not_count() -> None:
    open_letters = render(snapshot(dlq=4, resolved=1), snapshot(dlq=4, resolved=1))
    assert hint_lines(open_letters) == ["hint: dead letters: 3 open"]
    assert DEAD_LETTERS_TEXT in open_letters
    assert "dead letters    3 open of 4 (+0)" in open_letters
    settled = render(snapshot(dlq=4, resolved=4), snapshot(dlq=4, resolved=4))
    assert hint_lines(settled) == ["hint: stable: nothing over its limit"]


def test_the_hints_are_the_advisors_on_the_later_snapshot() -> None:
    late = snapshot(high_age_ms=QUEUE_AGE_LIMIT_MS["HIGH"] + 1000, workers=Workers())
    output = render(late, snapshot())
    [lag] = hint_lines(output)
    assert lag.startswith("hint: lag high: HIGH: 10 waiting, the oldest 6.0 s (shard 0)")
    assert f"      {NO_WORKER_TEXT}" in output.splitlines()
    assert "workers         none reporting" in output


def test_rates_between_two_snapshots() -> None:
    before = snapshot(sent=1000, attempt_failures=100, dlq=1)
    after = snapshot(at_ms=NOW_MS + 2000, sent=1080, attempt_failures=120, dlq=3)
    rates = Rates.between(before, after)
    assert (rates.seconds, rates.sent, rates.attempt_failures) == (2.0, 40.0, 10.0)
    assert rates.new_dead_letters == 2
    assert "failing attempts 10.0/s" in render(after, before)


def test_the_totals_show_retries_workers_and_circuits() -> None:
    retries = Retries(
        {
            Priority.HIGH: PriorityRetries(3, 61_000),
            Priority.NORMAL: PriorityRetries(1, 2_000),
            Priority.LOW: PriorityRetries(),
        },
        capped=True,
    )
    taken = dataclasses.replace(
        snapshot(),
        retries=retries,
        circuits={"sms": Circuit(CircuitState.OPEN, until_ms=NOW_MS + 1), "mail": Circuit()},
    )
    output = render(taken, snapshot())
    assert (
        "retries         4 (HIGH 3, NORMAL 1, LOW 0), oldest 1.0 min "
        "(counted among the earliest due only)"
    ) in output
    assert "workers         1 reporting, CPU 25% on average, waits: rate limit 0" in output
    assert "circuits        mail closed, sms open" in output
    assert "hint: provider waits: circuit of sms not closed" in output


def test_the_table_shows_status_webhooks_and_producers_queued() -> None:
    outboxes = [OutboxFigures("shop", 120, 400_000, 3), OutboxFigures("billing", 4, 1_000, 0)]
    failing = dataclasses.replace(snapshot(), outboxes=outboxes)
    output = render(failing, snapshot())
    assert (
        "status hooks    lag -, 124 waiting (oldest 6.7 min) for 2 producers, 3 dead letters"
        in (output)
    )
    assert "hint: status webhooks lag: events unread for -; stuck outboxes: shop" in output
    waiting = snapshot()
    waiting.backlog.shards[0].queued.update({"small": 5, "flood": 200_000})
    assert "queued          200,005 (flood 200,000, small 5)" in render(waiting, snapshot())
    assert "queued          0\n" in render(snapshot(), snapshot())
