"""The dashboard's signals: figures of every producer since the counters began, read from
the metrics every process adds to in Redis (``app.metrics``) and from the dead-letter streams.

- sends that took a retry, per channel, and their share of all sent on it;
- unsubscribes per notification type, by the one-click link and by a provider's feedback
  (an unsubscribe or a complaint);
- duplicates found and skipped, per layer (ingest, worker, feedback);
- deliveries recipients' throttles refused, per notification type, suppressed and deferred
  (many: a producer may be looping);
- open dead letters per error class, among the newest ``SUMMARY_SCAN`` entries (the same
  figures as ``/metrics``' ``clarion_dead_letters_open``).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from redis.asyncio import Redis

from app.metrics import (
    DELIVERY_ATTEMPTS,
    DUPLICATE_LAYERS,
    DUPLICATES_SKIPPED,
    SENT_AFTER_RETRY,
    THROTTLED,
    UNSUBSCRIBES,
)
from streams.core.keys import KeySpace
from streams.core.vocabulary import ERROR_CLASSES, DeliveryStatus
from streams.dlq.scan import Selection, Summary, summarize
from streams.metrics.recorder import HistogramTotals, Labels, read_counters, read_histograms


@dataclass(frozen=True, slots=True)
class RetryShare:
    """One channel's deliveries that ended SENT, and how many of them after a retry."""

    channel: str
    sent: int
    after_retry: int


@dataclass(frozen=True, slots=True)
class Unsubscribes:
    """One notification type's unsubscribes, by the link and by provider feedback."""

    notification_type: str
    link: int
    feedback: int


@dataclass(frozen=True, slots=True)
class Signals:
    """What the dashboard's signals table shows."""

    retries: list[RetryShare]
    unsubscribes: list[Unsubscribes]
    duplicates: list[tuple[str, int]]  # every layer, 0 when none was skipped
    dead_letters: list[tuple[str, int]]  # every error class's open dead letters
    dead_letters_truncated: bool  # more entries than were counted
    # (type, suppressed, deferred): deliveries its recipients' throttles refused
    throttled: list[tuple[str, int, int]] = field(default_factory=list)


async def read_signals(redis: Redis, keys: KeySpace) -> Signals:
    """Read the counters and count the open dead letters (a bounded scan)."""
    counters, histograms, summary = await asyncio.gather(
        read_counters(redis, keys, (SENT_AFTER_RETRY, UNSUBSCRIBES, DUPLICATES_SKIPPED, THROTTLED)),
        read_histograms(redis, keys, (DELIVERY_ATTEMPTS,)),
        summarize(redis, keys, Selection(), samples=0),
    )
    return signals_of(counters, histograms[DELIVERY_ATTEMPTS.name], summary)


def signals_of(
    counters: dict[str, dict[Labels, float]],
    attempts: dict[Labels, HistogramTotals],
    summary: Summary,
) -> Signals:
    """The signals of the counters' totals, the attempts histogram's and a DLQ summary."""
    sent: dict[str, int] = {}
    for (channel, status), totals in attempts.items():
        if status == DeliveryStatus.SENT:
            sent[channel] = sent.get(channel, 0) + int(totals.count)
    after = {channel: int(n) for (channel,), n in counters[SENT_AFTER_RETRY.name].items()}
    by_type: dict[str, dict[str, int]] = {}
    for (type_name, _, source), n in counters[UNSUBSCRIBES.name].items():
        sources = by_type.setdefault(type_name, {})
        sources[source] = sources.get(source, 0) + int(n)
    skipped = {layer: int(n) for (layer,), n in counters[DUPLICATES_SKIPPED.name].items()}
    throttled: dict[str, dict[str, int]] = {}
    for (type_name, action), n in counters.get(THROTTLED.name, {}).items():
        throttled.setdefault(type_name, {})[action] = int(n)
    return Signals(
        retries=[RetryShare(c, sent.get(c, 0), after.get(c, 0)) for c in sorted({*sent, *after})],
        unsubscribes=[
            Unsubscribes(name, sources.get("link", 0), sources.get("feedback", 0))
            for name, sources in sorted(by_type.items())
        ],
        duplicates=[(layer, skipped.get(layer, 0)) for layer in DUPLICATE_LAYERS],
        dead_letters=[
            (str(error_class), summary.by_error_class.get(error_class, 0))
            for error_class in ERROR_CLASSES
        ],
        dead_letters_truncated=summary.truncated,
        throttled=[
            (name, actions.get("suppress", 0), actions.get("defer", 0))
            for name, actions in sorted(throttled.items())
        ],
    )
