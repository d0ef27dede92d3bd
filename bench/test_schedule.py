"""The arithmetic of bench/schedule.py: due times, lateness and the memory budget.

Not a benchmark and no Redis: the parts of ``bench/schedule.py`` whose mistakes would
change its figures without failing it. It belongs to the benchmarks (``make bench-check``
runs it; ``make test`` does not collect it)::

    .venv/bin/pytest bench/test_schedule.py
"""

from __future__ import annotations

import pytest

from bench.schedule import (
    DAILY_VOLUME,
    DAY_S,
    IDEMPOTENCY_TTL_S,
    Held,
    budget,
    due_times,
    held_bytes,
    kind_of,
    lateness,
    parse_args,
    request,
    sends_by_second,
)
from streams.ingest.writer import SHARED_DATA_SLACK_MS


def test_due_times_come_at_the_rate_spread_or_at_each_second_s_start() -> None:
    spread = due_times(1_000, 25, 10, "spread")
    assert spread[:3] == [1_000, 1_100, 1_200]
    assert sum(1 for due in spread if due < 2_000) == 10  # ten in the first second
    second = due_times(1_000, 25, 10, "second")
    assert second[:10] == [1_000] * 10
    assert second[10:20] == [2_000] * 10
    assert second[-1] == 3_000


def test_lateness_is_per_delivery_known_and_sends_are_counted_by_second() -> None:
    assert lateness({"a": 1_005, "b": 2_000, "x": 9}, {"a": 1_000, "b": 2_100}) == [5.0, -100.0]
    assert sends_by_second({"a": 1_000, "b": 1_999, "c": 3_500}, 1_000) == [2, 0, 1]


def test_a_notification_is_sent_later_only_with_a_due_time() -> None:
    assert request(1, 1_800_000_000_000).send_at is not None
    assert request(1, 0).send_at is None
    assert request(1, 0, cancellation_key="k").cancellation_key == "k"


def test_keys_are_sorted_by_the_kind_after_the_shard_tag() -> None:
    assert kind_of("bench-1:{s0}:ntf:0190-abcd", "bench-1") == "ntf"
    assert kind_of("bench-1:{s0}:cancel:bench:key-7", "bench-1") == "cancel"
    assert kind_of("bench-1:{s0}:delayed", "bench-1") == "delayed"
    assert kind_of("bench-1:sandbox:sent", "bench-1") == "sandbox"


def test_what_waits_is_held_for_the_horizon_and_the_record_until_its_ttl_has_run() -> None:
    held = Held(delayed=500.0, record=700.0, ttl_s=2 * DAY_S)
    figures = held_bytes(held, share=0.1, horizon_days=1.0)
    per_s = DAILY_VOLUME * 0.1 / DAY_S
    record_s = DAY_S + 2 * DAY_S + SHARED_DATA_SLACK_MS / 1000
    assert figures["total"] == pytest.approx(per_s * (500.0 * DAY_S + 700.0 * record_s))
    at_once = per_s * 700.0 * IDEMPOTENCY_TTL_S
    assert figures["beyond_sent_at_once"] == pytest.approx(figures["total"] - at_once)


def test_the_budget_says_whether_each_scenario_fits_the_outage_headroom() -> None:
    memory = {"bytes_per_notification_by_kind": {"delayed": 500.0, "ntf": 600.0, "cancel": 100.0}}
    plan = budget(memory, ttl_s=2 * DAY_S)
    assert plan["outage_headroom_gb"] == 117.0
    rows = {(row["scheduled_share"], row["horizon_days"]): row for row in plan["scenarios"]}
    assert rows[(0.1, 1.0)]["fits"] is True
    assert rows[(1.0, 30.0)]["fits"] is False
    assert (
        rows[(0.1, 1.0)]["beyond_sent_at_once_gb_without_cancellation_key"]
        < rows[(0.1, 1.0)]["beyond_sent_at_once_gb"]
    )


def test_quick_makes_the_runs_smaller() -> None:
    args = parse_args(["--quick"])
    assert (args.count, args.memory_count) == (20_000, 20_000)
    with pytest.raises(SystemExit):
        parse_args(["--rate", "0"])
