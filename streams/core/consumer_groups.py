"""The consumer groups Clarion reads its streams with, and the calls every reader shares.

``delivery`` reads each shard's ``work:<priority>`` streams (the delivery workers);
``projector`` reads each shard's ``events`` stream (the projector), and so does
``status-webhooks`` (the status-webhooks process, which POSTs final statuses to producers). A
reader first drains its
own pending entries, then reads new ones, and takes over entries other consumers left idle
with XAUTOCLAIM. A reader that finds its group gone makes it again, reading from the start.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import ResponseError

from streams.core.codec import as_text
from streams.core.keys import ShardKeys

DELIVERY_GROUP = "delivery"
PROJECTOR_GROUP = "projector"
STATUS_WEBHOOK_GROUP = "status-webhooks"
# Every group on a shard's ``events`` stream: it is trimmed only below what all of them read.
EVENTS_GROUPS = (PROJECTOR_GROUP, STATUS_WEBHOOK_GROUP)

# An entry of a stream: its id and its fields.
Entry = tuple[str, dict[bytes, bytes]]


async def ensure_group(redis: Redis, stream: str, group: str) -> None:
    """Create ``group`` on ``stream`` (and the stream) if missing, reading from the start."""
    try:
        await redis.xgroup_create(stream, group, id="0", mkstream=True)
    except ResponseError as error:  # BUSYGROUP: it exists already
        if "BUSYGROUP" not in str(error):
            raise


def is_missing_group(error: BaseException) -> bool:
    """Whether ``error`` says the group (or its stream) is gone: Redis restarted empty, or
    someone deleted it. Whoever meets it makes the group again (``ensure_group``)."""
    return isinstance(error, ResponseError) and str(error).startswith("NOGROUP")


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
    cursor = as_text(reply[0])
    claimed = [(as_text(entry_id), fields or {}) for entry_id, fields in reply[1] if entry_id]
    deleted = [as_text(entry_id) for entry_id in (reply[2] if len(reply) > 2 else [])]
    return cursor, claimed, deleted


def groups_of(shard: ShardKeys) -> list[tuple[str, str]]:
    """Every (stream, group) of one shard that Clarion reads."""
    return [(stream, DELIVERY_GROUP) for stream in shard.work_streams] + [
        (shard.events, group) for group in EVENTS_GROUPS
    ]


async def ensure_all_groups(redis: Redis, shards: Sequence[ShardKeys]) -> None:
    """Make every group of these shards that is missing (one round trip)."""
    async with redis.pipeline(transaction=False) as pipe:
        for shard in shards:
            for stream, group in groups_of(shard):
                pipe.xgroup_create(stream, group, id="0", mkstream=True)
        replies = await pipe.execute(raise_on_error=False)
    for reply in replies:
        if isinstance(reply, Exception) and "BUSYGROUP" not in str(reply):
            raise reply


async def missing_groups(redis: Redis, shards: Sequence[ShardKeys]) -> list[tuple[str, str]]:
    """The (stream, group) pairs of these shards that do not exist (one round trip)."""
    wanted = [pair for shard in shards for pair in groups_of(shard)]
    async with redis.pipeline(transaction=False) as pipe:
        for stream, _ in wanted:
            pipe.xinfo_groups(stream)
        replies: list[Any] = await pipe.execute(raise_on_error=False)
    missing = []
    for (stream, group), reply in zip(wanted, replies, strict=True):
        if isinstance(reply, ResponseError) and "no such key" in str(reply).lower():
            missing.append((stream, group))
        elif isinstance(reply, Exception):
            raise reply
        elif group not in {as_text(info["name"]) for info in reply}:
            missing.append((stream, group))
    return missing
