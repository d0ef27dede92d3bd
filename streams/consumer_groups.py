"""The consumer groups Clarion reads its streams with, and the calls every reader shares.

``delivery`` reads each shard's ``work:<priority>`` streams (the delivery workers);
``projector`` reads each shard's ``events`` stream (the projector). A reader first drains its
own pending entries, then reads new ones, and takes over entries other consumers left idle
with XAUTOCLAIM.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import ResponseError

DELIVERY_GROUP = "delivery"
PROJECTOR_GROUP = "projector"

# An entry of a stream: its id and its fields.
Entry = tuple[str, dict[bytes, bytes]]


async def ensure_group(redis: Redis, stream: str, group: str) -> None:
    """Create ``group`` on ``stream`` (and the stream) if missing, reading from the start."""
    try:
        await redis.xgroup_create(stream, group, id="0", mkstream=True)
    except ResponseError as error:  # BUSYGROUP: it exists already
        if "BUSYGROUP" not in str(error):
            raise


async def delivery_counts(
    redis: Redis, stream: str, group: str, entry_ids: Sequence[str]
) -> dict[str, int]:
    """How often each of these pending entries has been handed out (one round trip)."""
    async with redis.pipeline(transaction=False) as pipe:
        for entry_id in entry_ids:
            pipe.xpending_range(stream, group, min=entry_id, max=entry_id, count=1)
        replies: list[Any] = await pipe.execute()
    return {
        _text(item["message_id"]): int(item["times_delivered"])
        for reply in replies
        for item in reply
    }


async def autoclaim(
    redis: Redis,
    stream: str,
    group: str,
    consumer: str,
    *,
    min_idle_ms: int,
    start: str,
    count: int,
) -> tuple[str, list[Entry], list[str]]:
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
