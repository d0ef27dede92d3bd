"""The dashboard's charts: what each one reads, and how its numbers become ``charts`` input.

- deliveries that ended and the failure rate, per channel and minute over the last 24 hours
  (the read model, ``projections.dashboard.charts``: one bounded, indexed query);
- work waiting and the oldest wait, per priority (the work streams, ``streams.metrics.backlog``);
- dead letters per hour over the last 24 hours, all producers (the ``dlq`` streams, whose
  entry ids carry the time; at most ``DEAD_LETTERS_READ`` entries a shard are read);
- the providers' circuits (``streams.delivery.circuit_breaker``) and the campaigns' progress.

Each chart that cannot be read says so in its place; the rest of the page still shows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import structlog
from redis.asyncio import Redis
from redis.exceptions import RedisError

from app.api.charts import PALETTE, Bar, Series, bar_chart, empty_chart, line_chart
from app.campaigns.progress import Progress
from app.catalog import guarded_providers
from projections.dashboard.charts import MinuteCount, ended_per_minute
from streams.core.codec import as_text
from streams.core.consumer_groups import DELIVERY_GROUP
from streams.core.keys import KeySpace
from streams.core.vocabulary import Priority
from streams.delivery.circuit_breaker import Circuit, CircuitState, read_circuits
from streams.metrics.backlog import Backlog, read_backlog

log = structlog.get_logger(__name__)

DAY_MINUTES = 24 * 60
DAY = timedelta(days=1)
HOUR_MS = 3_600_000
DEAD_LETTERS_READ = 10_000
REDIS_UNAVAILABLE = "the event log (Redis) is unavailable"
_STATE_COLORS = {
    CircuitState.CLOSED: "#1a7f37",
    CircuitState.HALF_OPEN: "#bc4c00",
    CircuitState.OPEN: "#b42318",
}


def time_labels(since: datetime, steps: int, step: timedelta, every: int) -> list[tuple[int, str]]:
    """An ``HH:MM`` (UTC) label on each step that falls on a whole multiple of ``every``
    steps since midnight (every 3 hours: 00:00, 03:00, ...), over ``steps`` steps from
    ``since``."""
    period = (step * every).total_seconds()
    start = since.timestamp()
    first = math.ceil(start / period) * period
    offset = round((first - start) / step.total_seconds())
    return [(n, (since + n * step).strftime("%H:%M")) for n in range(offset, steps, every)]


def minute_series(
    rows: Sequence[MinuteCount], since: datetime, minutes: int = DAY_MINUTES
) -> tuple[list[Series], list[Series]]:
    """Per channel, one value a minute from ``since``: deliveries that ended (0 in a minute
    without any) and the percentage FAILED among them (a gap in a minute without any)."""
    ended: dict[str, list[float | None]] = {}
    failed: dict[str, list[float | None]] = {}
    for row in rows:
        index = int((row.minute - since).total_seconds() // 60)
        if not 0 <= index < minutes:
            continue
        counts = ended.setdefault(row.channel, [0.0] * minutes)
        rates = failed.setdefault(row.channel, [None] * minutes)
        counts[index] = float(row.ended)
        rates[index] = 100 * row.failed / row.ended if row.ended else None
    colors = {name: PALETTE[n % len(PALETTE)] for n, name in enumerate(sorted(ended))}
    return (
        [Series(name, ended[name], colors[name]) for name in sorted(ended)],
        [Series(name, failed[name], colors[name]) for name in sorted(failed)],
    )


def delivery_charts(rows: Sequence[MinuteCount], since: datetime) -> tuple[str, str]:
    """The two per-minute charts: deliveries that ended, and the failure rate."""
    ended, rates = minute_series(rows, since)
    labels = time_labels(since, DAY_MINUTES, timedelta(minutes=1), every=180)
    return (
        line_chart("Deliveries ended per minute, last 24 h (UTC)", ended, labels),
        line_chart("Failure rate per minute, last 24 h (UTC)", rates, labels, unit=" %", y_max=100),
    )


def priority_bars(backlog: Backlog) -> tuple[list[Bar], list[Bar]]:
    """Per priority, over every shard's work stream: entries waiting (unread or unfinished),
    and how long the oldest of them has waited, in seconds."""
    waiting, oldest = [], []
    for priority in Priority:
        groups = [
            g
            for g in backlog.groups
            if g.stream == f"work:{priority.stream_name}" and g.group == DELIVERY_GROUP
        ]
        count = sum(g.lag + g.pending for g in groups)
        age_ms = max((g.oldest_waiting_age_ms for g in groups), default=0)
        waiting.append(Bar(priority.value, count))
        oldest.append(Bar(priority.value, round(age_ms / 1000, 1), color=PALETTE[1]))
    return waiting, oldest


def backlog_charts(backlog: Backlog | None) -> tuple[str, str]:
    """The two per-priority charts: work waiting, and the oldest wait."""
    if backlog is None:
        return (
            empty_chart("Work waiting per priority", REDIS_UNAVAILABLE, 480, 80),
            empty_chart("Oldest wait per priority", REDIS_UNAVAILABLE, 480, 80),
        )
    waiting, oldest = priority_bars(backlog)
    return (
        bar_chart("Work waiting per priority (entries)", waiting),
        bar_chart("Oldest wait per priority", oldest, unit=" s"),
    )


def circuit_chart(circuits: dict[str, Circuit] | None) -> str:
    """The providers' circuits: how often each opened, coloured by its state now."""
    title = "Circuits per provider (times opened; colour: state now)"
    if circuits is None:
        return empty_chart(title, REDIS_UNAVAILABLE, 480, 80)
    if not circuits:
        return empty_chart(title, "no provider has a circuit breaker", 480, 80)
    bars = [
        Bar(
            name,
            circuit.opened,
            note=f"({circuit.state.value} now)",
            color=_STATE_COLORS[circuit.state],
        )
        for name, circuit in circuits.items()
    ]
    return bar_chart(title, bars)


def campaign_chart(campaigns: Sequence[Progress] | None) -> str:
    """The newest campaigns: the share of their audience generated (or skipped) so far."""
    title = "Campaign progress (% of the audience)"
    if campaigns is None:
        return empty_chart(title, REDIS_UNAVAILABLE, 480, 80)
    bars = [
        Bar(
            campaign.name or campaign.type,
            round(100 * (campaign.generated + campaign.skipped) / (campaign.audience or 1), 1),
            note=f"{campaign.state}, {campaign.sent} sent, {campaign.failed} failed",
            color=PALETTE[2],
        )
        for campaign in campaigns
    ]
    return bar_chart(title, bars, unit=" %", width=640, full=100)


async def dead_letters_per_hour(
    redis: Redis, keys: KeySpace, until_ms: int, hours: int = 24
) -> tuple[list[float], bool]:
    """Dead letters per hour over the ``hours`` before ``until_ms`` (oldest first), from the
    time in each ``dlq`` entry's id; and whether a shard had more than ``DEAD_LETTERS_READ``
    to read (the oldest hours then show fewer than there were)."""
    since_ms = until_ms - hours * HOUR_MS
    async with redis.pipeline(transaction=False) as pipe:
        for shard in keys.all_shards():
            # Newest first, so a cut keeps the recent hours whole.
            pipe.xrevrange(
                shard.dlq, max=f"({until_ms}", min=str(since_ms), count=DEAD_LETTERS_READ
            )
        replies: list[Any] = await pipe.execute()
    counts = [0.0] * hours
    for entries in replies:
        for entry_id, _ in entries:
            at_ms = int(as_text(entry_id).partition("-")[0])
            counts[(at_ms - since_ms) // HOUR_MS] += 1
    return counts, any(len(entries) >= DEAD_LETTERS_READ for entries in replies)


def dead_letter_chart(counts: list[float] | None, cut: bool, since: datetime) -> str:
    """Dead letters per hour; the title says when the oldest hours may be short."""
    title = "Dead letters per hour, last 24 h (UTC, all producers)"
    if counts is None:
        return empty_chart(title, REDIS_UNAVAILABLE)
    if cut:
        title += f", newest {DEAD_LETTERS_READ} a shard"
    labels = time_labels(since, len(counts), timedelta(hours=1), every=3)
    return line_chart(title, [Series("dead letters", counts, PALETTE[1])], labels)


async def read_charts(
    state: Any, pool: asyncpg.Pool, producer: str, campaigns: Sequence[Progress] | None, now: float
) -> dict[str, str]:
    """Every chart of the dashboard, by name, as SVG markup for the page. PostgreSQL's errors
    propagate (the page is then a 503, as for its tables); Redis's leave their charts saying
    the event log is unavailable."""
    until = datetime.fromtimestamp(now - now % 60 + 60, UTC)  # the end of the current minute
    since = until - timedelta(minutes=DAY_MINUTES)
    hour_end = (int(now * 1000) // HOUR_MS + 1) * HOUR_MS  # the end of the current hour
    ended, rates = delivery_charts(await ended_per_minute(pool, producer, since, until), since)
    redis: Redis = state.redis
    keys: KeySpace = state.key_space
    try:
        backlog: Backlog | None = await read_backlog(redis, keys)
        circuits: dict[str, Circuit] | None = await read_circuits(
            redis, keys, guarded_providers(state.catalog)
        )
        dead: list[float] | None
        dead, cut = await dead_letters_per_hour(redis, keys, hour_end)
    except (RedisError, OSError) as error:
        log.warning("dashboard.redis_unavailable", error=type(error).__name__)
        backlog, circuits, dead, cut = None, None, None, False
    waiting, oldest = backlog_charts(backlog)
    return {
        "ended": ended,
        "rates": rates,
        "waiting": waiting,
        "oldest": oldest,
        "dead_letters": dead_letter_chart(
            dead, cut, datetime.fromtimestamp(hour_end / 1000, UTC) - DAY
        ),
        "circuits": circuit_chart(circuits),
        "campaigns": campaign_chart(campaigns),
    }
