"""Retries waiting in the ``delayed`` sets, per priority: how many, and how old the oldest is.

A ``delayed`` member is a retry when its work item has attempts behind it (a failed attempt
put it there, or a delivery that failed before waits for a rate-limit slot or a circuit);
members without attempts are first deferrals (quiet hours, a provider's rate limit) and are
not counted. Its priority is the member's prefix (``streams.delivery.delayed``). A retry's
age is how long ago its notification was accepted.

Bounded: each shard's ``RETRY_SCAN_LIMIT`` earliest-due members are read (one pipelined
round trip for every shard), so a queue larger than that is counted in its earliest part
only (retries come due sooner than quiet hours, so they sit there) and ``capped`` says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec
from redis.asyncio import Redis

from streams.core.keys import KeySpace
from streams.core.vocabulary import Priority

RETRY_SCAN_LIMIT = 1000  # members read per shard, earliest due first
_PRIORITY_OF = {priority.stream_name.encode(): priority for priority in Priority}


class _Attempted(msgspec.Struct, array_like=True):
    """The head of an encoded work item (``streams.delivery.work_items``) up to its
    attempts; the fields after them are not read, the data is not decoded."""

    delivery_id: msgspec.Raw
    notification_id: msgspec.Raw
    notification_type: msgspec.Raw
    channel: msgspec.Raw
    priority: msgspec.Raw
    recipient_id: msgspec.Raw
    address: msgspec.Raw
    locale: msgspec.Raw
    data: msgspec.Raw
    created_ms: int
    expires_ms: int
    attempts: int = 0


_decoder = msgspec.json.Decoder(_Attempted)


@dataclass(frozen=True, slots=True)
class PriorityRetries:
    count: int = 0
    oldest_age_ms: int = 0  # since the oldest one's notification was accepted (0: none)


@dataclass(frozen=True, slots=True)
class Retries:
    """Retries waiting, by priority (every priority present), over all shards."""

    by_priority: dict[Priority, PriorityRetries] = field(
        default_factory=lambda: {priority: PriorityRetries() for priority in Priority}
    )
    capped: bool = False  # a shard held more members than were read

    @property
    def count(self) -> int:
        return sum(figures.count for figures in self.by_priority.values())

    @property
    def oldest_age_ms(self) -> int:
        return max(figures.oldest_age_ms for figures in self.by_priority.values())


async def read_retries(redis: Redis, keys: KeySpace, now_ms: int) -> Retries:
    """Count the retries in every shard's ``delayed`` set, ages against ``now_ms``."""
    async with redis.pipeline(transaction=False) as pipe:
        for shard in keys.all_shards():
            pipe.zrange(shard.delayed, 0, RETRY_SCAN_LIMIT - 1)
            pipe.zcard(shard.delayed)
        replies: list[Any] = await pipe.execute()
    counts = dict.fromkeys(Priority, 0)
    oldest: dict[Priority, int] = {}
    capped = False
    for members, size in zip(replies[0::2], replies[1::2], strict=True):
        capped = capped or int(size) > len(members)
        for member in members:
            prefix, _, encoded = bytes(member).partition(b" ")
            priority = _PRIORITY_OF.get(prefix)
            item = _attempted(encoded)
            if priority is None or item is None or item.attempts < 1:
                continue
            counts[priority] += 1
            oldest[priority] = min(oldest.get(priority, item.created_ms), item.created_ms)
    return Retries(
        {
            priority: PriorityRetries(
                counts[priority],
                max(0, now_ms - oldest[priority]) if priority in oldest else 0,
            )
            for priority in Priority
        },
        capped,
    )


def _attempted(encoded: bytes) -> _Attempted | None:
    """The member's work item head; None for one that cannot be read (the scheduler
    dead-letters it when it comes due)."""
    try:
        return _decoder.decode(encoded)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
