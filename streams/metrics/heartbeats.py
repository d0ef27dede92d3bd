"""The delivery workers' heartbeats: what each worker process last said about itself.

Every few seconds a worker (``app.delivery.heartbeat``) writes one field of the hash
``KeySpace.worker_heartbeats``, named after its consumer: when, over how long a window, the
share of one CPU its process used in that window, and how many deliveries it deferred
because a provider could not take them (its rate limit, its in-flight bound, an open
circuit). Readers keep the reports younger than ``FRESH_MS``; a writer deletes the fields
older than ``FORGET_MS`` (workers that stopped, hosts that went), so the hash holds the
workers of the last minutes only. A stopping worker deletes its own field.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec
from redis.asyncio import Redis

from streams.core.keys import KeySpace

HEARTBEAT_INTERVAL_S = 5.0
# A report is fresh for three intervals: one missed write is not a dead worker.
FRESH_MS = 15_000
FORGET_MS = 600_000
# The deferral reasons that mean a provider had no room (``DeferReason``).
PROVIDER_WAIT_REASONS = ("rate_limited", "bulkhead_full", "circuit_open")


class Heartbeat(msgspec.Struct, frozen=True, kw_only=True):
    """One worker's report, as stored (JSON)."""

    at_ms: int
    window_ms: int
    cpu_share: float  # process CPU time / wall time over the window (1.0: one core busy)
    waits: dict[str, int] = {}  # deferrals in the window, by reason


_decoder = msgspec.json.Decoder(Heartbeat)


@dataclass(frozen=True, slots=True)
class Workers:
    """The fresh reports, by consumer."""

    reports: dict[str, Heartbeat] = field(default_factory=dict)

    @property
    def reporting(self) -> int:
        return len(self.reports)

    @property
    def cpu_share(self) -> float:
        """The mean CPU share of the reporting workers (0.0: none reports)."""
        if not self.reports:
            return 0.0
        return sum(report.cpu_share for report in self.reports.values()) / len(self.reports)

    def waits(self, reason: str) -> int:
        """Deferrals for ``reason`` in the reporting workers' last windows."""
        return sum(report.waits.get(reason, 0) for report in self.reports.values())


async def write_heartbeat(redis: Redis, keys: KeySpace, consumer: str, beat: Heartbeat) -> None:
    """Store ``consumer``'s report and forget the reports nobody renewed for ``FORGET_MS``."""
    key = keys.worker_heartbeats
    await redis.hset(key, consumer, msgspec.json.encode(beat))
    stale = [
        name
        for name, report in (await _all(redis, key)).items()
        if report is None or report.at_ms < beat.at_ms - FORGET_MS
    ]
    if stale:
        await redis.hdel(key, *stale)


async def forget_heartbeat(redis: Redis, keys: KeySpace, consumer: str) -> None:
    await redis.hdel(keys.worker_heartbeats, consumer)


async def read_workers(redis: Redis, keys: KeySpace, now_ms: int) -> Workers:
    """The reports younger than ``FRESH_MS`` at ``now_ms``."""
    reports = await _all(redis, keys.worker_heartbeats)
    return Workers(
        {
            name: report
            for name, report in sorted(reports.items())
            if report is not None and report.at_ms >= now_ms - FRESH_MS
        }
    )


async def _all(redis: Redis, key: str) -> dict[str, Heartbeat | None]:
    """Every field of the hash, decoded (None: a value nobody can read)."""
    raw: dict[Any, Any] = await redis.hgetall(key)
    found: dict[str, Heartbeat | None] = {}
    for name, value in raw.items():
        try:
            found[bytes(name).decode()] = _decoder.decode(value)
        except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError):
            found[bytes(name).decode(errors="replace")] = None
    return found
