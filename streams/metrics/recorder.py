"""Counters and histograms that every Clarion process adds to, kept in Redis.

The API runs as several processes, and workers and the projector run elsewhere, so a
process-local Prometheus registry would answer differently on every scrape. Instead each
process sums what it records in memory, and ``MetricsRecorder.run`` adds those sums to one
Redis hash per metric about once a second, in one pipeline of HINCRBY/HINCRBYFLOAT. Recording
is a dict update, never an await; while Redis is unreachable the sums stay in memory and go
out with the next flush that succeeds. ``read_counters`` and ``read_histograms`` read the
totals back for ``/metrics``.

A hash field names a label set, its values joined by ``|`` in the order of the metric's
label names; a histogram field adds ``|<upper bound>`` (the count of observations in that
bucket alone, not cumulative) or ``|sum``.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import math
from collections import defaultdict
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import structlog
from redis.asyncio import Redis

from streams.core.codec import as_text
from streams.core.connection import being_cancelled
from streams.core.keys import KeySpace

log = structlog.get_logger(__name__)

FLUSH_INTERVAL_S = 1.0
FINAL_FLUSH_TIMEOUT_S = 2.0
_SEPARATOR = "|"
_SUM = "sum"
_INF = "+Inf"

Labels = tuple[str, ...]


@dataclass(frozen=True, slots=True)
class CounterSpec:
    """A counter: its name (as exported), what it counts and its label names."""

    name: str
    help: str
    labels: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class HistogramSpec:
    """A histogram: name, help, label names and the upper bounds of its buckets."""

    name: str
    help: str
    labels: tuple[str, ...]
    buckets: tuple[float, ...]

    def __post_init__(self) -> None:
        if list(self.buckets) != sorted(set(self.buckets)):
            raise ValueError(f"{self.name}: bucket bounds must be strictly increasing")


@dataclass(frozen=True, slots=True)
class HistogramTotals:
    """One label set of a histogram: cumulative counts per upper bound, the sum, the count."""

    buckets: list[tuple[float, float]]  # (upper bound, observations <= bound), +Inf last
    sum: float

    @property
    def count(self) -> float:
        return self.buckets[-1][1]


def _bound_text(bound: float) -> str:
    return _INF if math.isinf(bound) else repr(float(bound))


class MetricsRecorder:
    """Sums one process's counts in memory and adds them to Redis once a second."""

    def __init__(
        self, redis: Redis, keys: KeySpace, *, interval_s: float = FLUSH_INTERVAL_S
    ) -> None:
        self.redis = redis
        self.keys = keys
        self.interval_s = interval_s
        self._counts: defaultdict[tuple[str, str], int] = defaultdict(int)
        self._sums: defaultdict[tuple[str, str], float] = defaultdict(float)
        # Bucket fields of every histogram, by the index bisect finds (the last is +Inf).
        self._bucket_fields: dict[str, list[str]] = {}

    def inc(self, counter: CounterSpec, labels: Labels, amount: int = 1) -> None:
        """Add ``amount`` to ``counter`` for ``labels`` (values in the order of its labels)."""
        self._counts[(counter.name, _SEPARATOR.join(labels))] += amount

    def observe(self, histogram: HistogramSpec, labels: Labels, value: float) -> None:
        """Record one observation of ``histogram`` for ``labels``."""
        fields = self._bucket_fields.get(histogram.name)
        if fields is None:
            bounds = [*histogram.buckets, math.inf]
            fields = self._bucket_fields[histogram.name] = [_bound_text(b) for b in bounds]
        prefix = _SEPARATOR.join(labels) + _SEPARATOR
        bucket = fields[bisect.bisect_left(histogram.buckets, value)]
        self._counts[(histogram.name, prefix + bucket)] += 1
        self._sums[(histogram.name, prefix + _SUM)] += value

    async def run(self) -> None:
        """Flush once per interval until cancelled; then flush what is left, briefly."""
        failing = False
        try:
            while True:
                await asyncio.sleep(self.interval_s)
                try:
                    await self.flush()
                except Exception as error:
                    if being_cancelled():
                        # The client turned our cancellation into an error of its own:
                        # looping on would keep a stopping process alive for ever.
                        raise asyncio.CancelledError from error
                    # Keep the sums (flush put them back) and try again next interval: a
                    # Redis outage must never end the process that is recording.
                    if not failing:
                        log.warning("metrics.flush_failed", error=type(error).__name__)
                    failing = True
                else:
                    if failing:
                        log.info("metrics.flush_recovered")
                    failing = False
                if being_cancelled():
                    # The client swallowed our cancellation and the flush went on to the
                    # end: the next sleep would not be interrupted, and a stopping worker
                    # would wait for this loop for ever.
                    raise asyncio.CancelledError
        finally:
            try:
                async with asyncio.timeout(FINAL_FLUSH_TIMEOUT_S):
                    await self.flush()
            except (Exception, asyncio.CancelledError) as error:
                # The process is ending either way; say that its last counts are lost.
                log.warning("metrics.unflushed_at_exit", error=type(error).__name__)

    @contextlib.asynccontextmanager
    async def flushing(self) -> AsyncIterator[None]:
        """Flush in the background while the block runs, and once more when it ends."""
        task = asyncio.create_task(self.run())
        try:
            yield
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def flush(self) -> None:
        """Add everything recorded since the last flush to Redis; on failure keep it."""
        counts, sums = self._counts, self._sums
        if not counts and not sums:
            return
        self._counts, self._sums = defaultdict(int), defaultdict(float)
        pipe = self.redis.pipeline(transaction=False)
        for (name, field), amount in counts.items():
            pipe.hincrby(self.keys.metric(name), field, amount)
        for (name, field), total in sums.items():
            pipe.hincrbyfloat(self.keys.metric(name), field, total)
        try:
            await pipe.execute()
        except BaseException:
            # Nothing of a failed pipeline is known to be written; keep it for the next
            # flush. (A pipeline that failed half-way may count a little twice: metrics
            # prefer that to losing counts.)
            for key, amount in counts.items():
                self._counts[key] += amount
            for key, total in sums.items():
                self._sums[key] += total
            raise


async def read_counters(
    redis: Redis, keys: KeySpace, counters: Sequence[CounterSpec]
) -> dict[str, dict[Labels, float]]:
    """Every counter's totals by label set (a counter nobody recorded yet has none)."""
    raw = await _read(redis, keys, [c.name for c in counters])
    totals: dict[str, dict[Labels, float]] = {}
    for counter, fields in zip(counters, raw, strict=True):
        by_labels = {_labels(field): float(value) for field, value in fields.items()}
        totals[counter.name] = _current(counter.labels, by_labels)
    return totals


async def read_histograms(
    redis: Redis, keys: KeySpace, histograms: Sequence[HistogramSpec]
) -> dict[str, dict[Labels, HistogramTotals]]:
    """Every histogram's totals by label set, with cumulative buckets."""
    raw = await _read(redis, keys, [h.name for h in histograms])
    return {
        histogram.name: _current(histogram.labels, _histogram_totals(histogram, fields))
        for histogram, fields in zip(histograms, raw, strict=True)
    }


def _histogram_totals(
    histogram: HistogramSpec, fields: dict[str, str]
) -> dict[Labels, HistogramTotals]:
    bounds = [*histogram.buckets, math.inf]
    index = {_bound_text(bound): n for n, bound in enumerate(bounds)}
    counts: dict[Labels, list[float]] = {}
    sums: defaultdict[Labels, float] = defaultdict(float)
    for field, value in fields.items():
        labels_text, _, last = field.rpartition(_SEPARATOR)
        labels = _labels(labels_text)
        if last == _SUM:
            sums[labels] = float(value)
        elif last in index:  # a bound this version no longer has is left out
            counts.setdefault(labels, [0.0] * len(bounds))[index[last]] += float(value)
    return {
        labels: HistogramTotals(
            list(zip(bounds, _cumulative(per_bucket), strict=True)), sums[labels]
        )
        for labels, per_bucket in counts.items()
    }


async def _read(redis: Redis, keys: KeySpace, names: Sequence[str]) -> list[dict[str, str]]:
    pipe = redis.pipeline(transaction=False)
    for name in names:
        pipe.hgetall(keys.metric(name))
    replies: list[Any] = await pipe.execute()
    return [{as_text(k): as_text(v) for k, v in reply.items()} for reply in replies]


T = TypeVar("T")


def _current(names: tuple[str, ...], by_labels: dict[Labels, T]) -> dict[Labels, T]:
    """Leave out label sets of another shape (recorded by a version with other labels)."""
    return {labels: value for labels, value in by_labels.items() if len(labels) == len(names)}


def _cumulative(counts: list[float]) -> list[float]:
    running, out = 0.0, []
    for count in counts:
        running += count
        out.append(running)
    return out


def _labels(field: str) -> Labels:
    return tuple(field.split(_SEPARATOR)) if field else ()
