"""What the dashboard's charts are drawn from: per-minute series with gaps where nothing
ended, work waiting per priority, circuits, campaigns, and dead letters per hour from the
time in each ``dlq`` entry's id."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from redis.asyncio import Redis

from app.api.dashboard_charts import (
    DAY_MINUTES,
    REDIS_UNAVAILABLE,
    backlog_charts,
    campaign_chart,
    circuit_chart,
    dead_letter_chart,
    dead_letters_per_hour,
    minute_series,
    priority_bars,
    time_labels,
)
from app.campaigns.progress import Progress
from projections.dashboard.charts import MinuteCount
from streams.core.keys import KeySpace
from streams.delivery.circuit_breaker import Circuit, CircuitState
from streams.metrics.backlog import Backlog, GroupBacklog

SINCE = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def at(minutes: int) -> datetime:
    return SINCE + timedelta(minutes=minutes)


def test_minute_series_count_every_minute_and_leave_gaps_in_the_rate() -> None:
    rows = [
        MinuteCount("SMS", at(0), ended=4, failed=1),
        MinuteCount("SMS", at(2), ended=2, failed=2),
        MinuteCount("EMAIL", at(1), ended=3, failed=0),
        MinuteCount("EMAIL", at(DAY_MINUTES), ended=9, failed=9),  # past the window: left out
        MinuteCount("EMAIL", at(-1), ended=9, failed=9),  # before it: left out
    ]
    ended, rates = minute_series(rows, SINCE)
    assert [s.name for s in ended] == ["EMAIL", "SMS"]
    assert all(len(s.values) == DAY_MINUTES for s in ended + rates)
    assert list(ended[1].values[:4]) == [4, 0, 2, 0]
    assert list(rates[1].values[:4]) == [25.0, None, 100.0, None]
    assert list(ended[0].values[:3]) == [0, 3, 0]
    assert sum(v or 0 for v in ended[0].values) == 3
    # A channel keeps its colour in both charts.
    assert [s.color for s in ended] == [s.color for s in rates]
    assert ended[0].color != ended[1].color


def test_time_labels_fall_on_whole_hours() -> None:
    assert time_labels(SINCE, 360, timedelta(minutes=1), every=180) == [
        (0, "12:00"),
        (180, "15:00"),
    ]
    odd = SINCE + timedelta(minutes=31, seconds=20)  # 12:31:20
    assert time_labels(odd, 400, timedelta(minutes=1), every=180) == [
        (149, "15:00"),
        (329, "18:00"),
    ]


def group(
    stream: str, *, lag: int, pending: int, age_ms: int, group: str = "delivery"
) -> GroupBacklog:
    return GroupBacklog(stream, 0, group, lag + pending, pending, lag, 0, age_ms)


def test_work_waiting_and_the_oldest_wait_per_priority() -> None:
    backlog = Backlog(
        now_ms=0,
        groups=[
            group("work:high", lag=3, pending=1, age_ms=1500),
            group("work:high", lag=2, pending=0, age_ms=4000),  # another shard
            group("work:low", lag=7, pending=0, age_ms=60_000),
            group("events", lag=100, pending=0, age_ms=9, group="projector"),  # not work
        ],
        shards=[],
    )
    waiting, oldest = priority_bars(backlog)
    assert [(b.label, b.value) for b in waiting] == [("HIGH", 6), ("NORMAL", 0), ("LOW", 7)]
    assert [(b.label, b.value) for b in oldest] == [("HIGH", 4.0), ("NORMAL", 0), ("LOW", 60.0)]
    assert "Work waiting per priority" in backlog_charts(backlog)[0]
    assert all(REDIS_UNAVAILABLE in chart for chart in backlog_charts(None))


def test_circuits_are_coloured_by_their_state() -> None:
    chart = circuit_chart(
        {"twilio": Circuit(CircuitState.OPEN, opened=3), "ses": Circuit(opened=0)}
    )
    assert 'data-label="twilio"' in chart
    assert "3 (open now)" in chart
    assert "#b42318" in chart  # open: red
    assert "no provider has a circuit breaker" in circuit_chart({})
    assert REDIS_UNAVAILABLE in circuit_chart(None)


def progress(name: str, audience: int, generated: int, skipped: int) -> Progress:
    now = datetime.now(UTC)
    return Progress(
        id="c-1", name=name, type="marketing", state="running", audience=audience,
        generated=generated, skipped=skipped, repeated=0, remaining=0, deliveries=None,
        sent=5, delivered=0, failed=1, suppressed=0, cancelled=0, rate=0.0, eta_seconds=None,
        rate_limit=None, created_at=now, start_at=None, started_at=None, ended_at=None,
    )  # fmt: skip


def test_campaign_progress_is_the_share_of_the_audience_done() -> None:
    chart = campaign_chart([progress("<i>Spring</i>", 200, 40, 10), progress("", 0, 0, 0)])
    assert "25 %" in chart
    assert "running, 5 sent, 1 failed" in chart
    assert "&lt;i&gt;Spring&lt;/i&gt;" in chart
    assert 'data-label="marketing"' in chart  # no name: its type
    assert "nothing to show" in campaign_chart([])
    assert REDIS_UNAVAILABLE in campaign_chart(None)


async def test_dead_letters_are_counted_per_hour_from_their_entry_ids(fake: Redis) -> None:
    keys = KeySpace("charts", shards=2)
    until_ms = int(SINCE.timestamp() * 1000)  # an hour's end
    hour = 3_600_000
    for shard, age_ms in [
        (0, hour + 5), (0, 10), (0, -1),  # the last is after the end: left out
        (1, 25 * hour), (1, 24 * hour), (1, hour + 7),  # 24 h before the end: the first hour
    ]:  # fmt: skip
        await fake.xadd(keys.shard(shard).dlq, {"f": "v"}, id=f"{until_ms - age_ms}-0")
    counts, cut = await dead_letters_per_hour(fake, keys, until_ms)
    assert len(counts) == 24
    assert counts[-1] == 1  # the last hour
    assert counts[-2] == 2  # the one before, over both shards
    assert counts[0] == 1
    assert sum(counts) == 4  # 25 hours old: outside the day
    assert not cut
    chart = dead_letter_chart(counts, cut, SINCE - timedelta(days=1))
    assert "Dead letters per hour" in chart
    assert "newest" not in chart
    assert REDIS_UNAVAILABLE in dead_letter_chart(None, False, SINCE)
