"""The delivery side of the write model: leases, outcomes, dead letters and recovery.

A delivery's state lives in its ``dlv:<id>`` hash (absent until a worker first touches it,
which means "as accepted"). ``begin`` takes a lease for the deliveries a worker is about to
send; ``finish`` records each outcome atomically with its events, its ``delayed`` or
dead-letter entry and the acknowledgement of its work entry.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from redis.asyncio import Redis

from streams import codec, scripts
from streams.batching import BatchedScript, Call
from streams.keys import Priority, ShardKeys
from streams.scripts import KeyOrArg

GROUP = "delivery"
TERMINAL = frozenset({"SENT", "FAILED", "EXPIRED", "SUPPRESSED"})
# How long an ended delivery's state hash stays (CLARION_DELIVERY_STATE_RETENTION), and a
# FAILED one's: as long as its dead letter may be replayed (CLARION_DLQ_RETENTION).
STATE_RETENTION_MS = 86400 * 1000
FAILED_STATE_RETENTION_MS = 7 * 86400 * 1000


@dataclass(frozen=True, slots=True)
class Lease:
    """What ``begin`` found for one delivery."""

    verdict: Literal["GO", "TERMINAL", "LEASED"]
    version: int
    attempts: int
    now_ms: int
    first_attempt_ms: int


@dataclass(frozen=True, slots=True)
class Outcome:
    """One delivery's outcome, ready to record."""

    shard: ShardKeys
    priority: Priority
    delivery_id: str
    entry_id: str  # the work entry to acknowledge ("" when there is none)
    expected_version: int
    events: bytes  # the events as one JSON array (b"" for none)
    fields: dict[str, KeyOrArg]
    delayed_member: bytes = b""
    due_ms: int = 0
    dead_letter: dict[str, KeyOrArg] = field(default_factory=dict)


# OK: recorded. ENDED / MOVED: the delivery ended or moved on meanwhile; only the work entry
# was acknowledged. BROKEN: its state key is not a hash; nothing was recorded or acknowledged.
FinishReply = Literal["OK", "ENDED", "MOVED", "BROKEN"]


class DeliveryStore:
    """Leases and outcomes of deliveries, batched across concurrent workers."""

    def __init__(
        self,
        redis: Redis,
        *,
        state_retention_ms: int = STATE_RETENTION_MS,
        failed_state_retention_ms: int = FAILED_STATE_RETENTION_MS,
    ) -> None:
        self.redis = redis
        self.retention = (state_retention_ms, failed_state_retention_ms)
        self._finish: BatchedScript[tuple[ShardKeys, Priority], Outcome, FinishReply]
        self._finish = BatchedScript(
            redis,
            scripts.DELIVERY_FINISH,
            group_of=lambda outcome: (outcome.shard, outcome.priority),
            build=lambda group, outcomes: _finish_call(group, outcomes, self.retention),
            parse=lambda raw: raw.decode(),
        )

    async def begin(
        self,
        shard: ShardKeys,
        items: Sequence[tuple[str, str, str]],
        consumer: str,
        lease_ms: int,
    ) -> list[Lease]:
        """Lease (delivery id, notification id, channel) items for ``consumer``."""
        if not items:
            return []
        keys: list[KeyOrArg] = [shard.delivery(did) for did, _, _ in items]
        args: list[KeyOrArg] = [consumer, lease_ms]
        for _, nid, channel in items:
            args += [nid, channel]
        flat = iter(await scripts.DELIVERY_BEGIN(self.redis, keys, args))
        per_item = zip(flat, flat, flat, flat, flat, strict=True)  # five values per item
        return [
            Lease(verdict.decode(), int(version), int(attempts), int(now), int(first))
            for verdict, version, attempts, now, first in per_item
        ]

    async def finish(self, outcomes: Sequence[Outcome]) -> list[FinishReply]:
        """Record ``outcomes``; concurrent callers share pipelines."""
        return await self._finish.run(outcomes)

    async def dead_letter_raw(
        self, shard: ShardKeys, priority: Priority, entry_id: str, fields: dict[str, KeyOrArg]
    ) -> None:
        """Dead-letter a work entry nobody can handle, with its raw fields, and ack it."""
        flat: list[KeyOrArg] = [GROUP, entry_id]
        for name, value in fields.items():
            flat += [name, value]
        await scripts.DEAD_LETTER_RAW(self.redis, [shard.work(priority), shard.dlq], flat)

    async def state(self, shard: ShardKeys, delivery_id: str) -> dict[str, str]:
        """The delivery's state hash as text (empty when no worker touched it yet)."""
        raw: dict[Any, Any] = await self.redis.hgetall(shard.delivery(delivery_id))
        return {_text(k): _text(v) for k, v in raw.items()}


def _finish_call(
    group: tuple[ShardKeys, Priority], outcomes: Sequence[Outcome], retention: tuple[int, int]
) -> Call:
    shard, priority = group
    keys: list[KeyOrArg] = [shard.work(priority), shard.events, shard.delayed, shard.dlq]
    joined, spans = codec.join_events([outcome.events for outcome in outcomes])
    args: list[KeyOrArg] = [GROUP, *retention, joined, codec.span_text(spans)]
    for outcome in outcomes:
        keys.append(shard.delivery(outcome.delivery_id))
        args += [outcome.entry_id, outcome.expected_version, outcome.delayed_member, outcome.due_ms]
        args += _flat(outcome.fields)
        args += _flat(outcome.dead_letter)
    return keys, args


def _flat(fields: dict[str, KeyOrArg]) -> list[KeyOrArg]:
    flat: list[KeyOrArg] = [2 * len(fields)]
    for name, value in fields.items():
        flat += [name, value]
    return flat


async def ensure_group(redis: Redis, stream: str) -> None:
    """Create the ``delivery`` group on ``stream`` (and the stream) if missing."""
    try:
        await redis.xgroup_create(stream, GROUP, id="0", mkstream=True)
    except Exception as error:  # BUSYGROUP: it exists already
        if "BUSYGROUP" not in str(error):
            raise


async def delivery_counts(redis: Redis, stream: str, entry_ids: Sequence[str]) -> dict[str, int]:
    """How often each of these pending entries has been handed out (one round trip)."""
    async with redis.pipeline(transaction=False) as pipe:
        for entry_id in entry_ids:
            pipe.xpending_range(stream, GROUP, min=entry_id, max=entry_id, count=1)
        replies: list[Any] = await pipe.execute()
    return {
        _text(item["message_id"]): int(item["times_delivered"])
        for reply in replies
        for item in reply
    }


async def autoclaim(
    redis: Redis,
    stream: str,
    consumer: str,
    *,
    min_idle_ms: int,
    start: str,
    count: int,
    group: str = GROUP,
) -> tuple[str, list[tuple[str, dict[bytes, bytes]]], list[str]]:
    """XAUTOCLAIM: (next cursor, claimed entries, ids of entries deleted from the stream)."""
    reply = await redis.xautoclaim(
        stream, group, consumer, min_idle_time=min_idle_ms, start_id=start, count=count
    )
    # Redis 7 answers [cursor, [[id, fields]...], [deleted ids]]; entries trimmed from the
    # stream come back as ids only and must be acknowledged, or they stay pending forever.
    cursor = _text(reply[0])
    claimed = [(_text(entry_id), fields or {}) for entry_id, fields in reply[1] if entry_id]
    deleted = [_text(entry_id) for entry_id in (reply[2] if len(reply) > 2 else [])]
    return cursor, claimed, deleted


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
