"""Forgetting a recipient in Redis: the work items, dead letters and sandbox records that hold
its addresses, and the deliveries still waiting for it.

Addresses live in work items (work streams, producers' queues and ``delayed``), in dead
letters (which keep the work item) and in the sandbox's record of calls; events,
notification records and delivery states hold none. ``find_waiting`` scans one shard for the
recipient's work items; ``erase_call`` lays out ``erase.lua``, which ends each waiting
delivery SUPPRESSED ("erased") and removes its work item atomically. Dead letters and
sandbox records of the recipient are deleted (``remove_dead_letters``,
``remove_sandbox_records``). Scans read in chunks, so an erasure costs time in proportion to
what Redis holds, and nothing else waits.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import msgspec
from redis.asyncio import Redis

from streams.core import codec
from streams.core.consumer_groups import DELIVERY_GROUP
from streams.core.events import DeliverySuppressed
from streams.core.keys import KeySpace, ShardKeys
from streams.core.scripts import Call, KeyOrArg
from streams.delivery.delayed import work_item_of_member
from streams.delivery.fairness import FAIR_PRIORITIES, waiting_producers
from streams.delivery.work_items import WorkItem
from streams.dlq.entries import parse_entry

CHUNK = 1000


@dataclass(frozen=True, slots=True)
class Waiting:
    """A work item of the recipient: where it is and what it says."""

    source: (
        str  # the work stream, ``delayed`` or a producer's queue (``streams.delivery.fairness``)
    )
    kind: str  # "stream", "zset" or "list"
    entry: bytes  # the entry id, the ``delayed`` member or the queued item
    item: WorkItem


async def _stream_entries(
    redis: Redis, key: str
) -> AsyncIterator[tuple[bytes, dict[bytes, bytes]]]:
    start = "-"
    while True:
        chunk: Any = await redis.xrange(key, start, "+", count=CHUNK)
        for entry_id, fields in chunk:
            yield entry_id, fields
        if len(chunk) < CHUNK:
            return
        start = "(" + chunk[-1][0].decode()


async def _list_items(redis: Redis, key: str) -> AsyncIterator[bytes]:
    start = 0
    while True:
        chunk: Any = await redis.lrange(key, start, start + CHUNK - 1)
        for raw in chunk:
            yield raw
        if len(chunk) < CHUNK:
            return
        start += CHUNK


def _item(raw: bytes | None) -> WorkItem | None:
    if raw is None:
        return None
    try:
        return codec.decode_work_item(raw)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


async def find_waiting(redis: Redis, shard: ShardKeys, recipient_id: str) -> list[Waiting]:
    """The recipient's work items on ``shard``: in its work streams, in producers' queues and
    in ``delayed``."""
    found: list[Waiting] = []
    for stream in shard.work_streams:
        async for entry_id, fields in _stream_entries(redis, stream):
            item = _item(fields.get(codec.WORK_FIELD.encode()))
            if item is not None and item.recipient_id == recipient_id:
                found.append(Waiting(stream, "stream", entry_id, item))
    for priority in FAIR_PRIORITIES:
        for producer in await waiting_producers(redis, shard, priority):
            queue = shard.queued(priority, producer)
            async for raw in _list_items(redis, queue):
                item = _item(raw)
                if item is not None and item.recipient_id == recipient_id:
                    found.append(Waiting(queue, "list", raw, item))
    cursor = 0
    while True:
        reply: Any = await redis.zscan(shard.delayed, cursor, count=CHUNK)
        cursor, members = reply
        for member, _ in members:
            item = _item(work_item_of_member(member))
            if item is not None and item.recipient_id == recipient_id:
                found.append(Waiting(shard.delayed, "zset", member, item))
        if not cursor:
            return found


def erase_call(
    shard: ShardKeys, waiting: Sequence[Waiting], versions: Sequence[int], now_ms: int,
    retention_ms: int,
) -> Call:  # fmt: skip
    """The keys and arguments of one ``erase.lua`` call.

    KEYS: events, then per item its state hash, its work stream or ``delayed``, and its data
    hash when its template data is shared. ARGV: the consumer group, the retention of an
    ended state (ms), now (ms), then per item: its key count, "stream" or "zset", the entry
    id or member, the version read, the encoded DeliverySuppressed event, the notification
    id, the channel.
    """
    keys: list[KeyOrArg] = [shard.events]
    args: list[KeyOrArg] = [DELIVERY_GROUP, retention_ms, now_ms]
    at = datetime.fromtimestamp(now_ms / 1000, UTC)
    for found, version in zip(waiting, versions, strict=True):
        item = found.item
        keys += [shard.delivery(item.delivery_id), found.source]
        if item.shared_data:
            keys.append(shard.data(item.notification_id))
        event = DeliverySuppressed(
            at=at, notification_id=item.notification_id, delivery_id=item.delivery_id,
            version=version + 1, channel=item.channel, reason="erased",
        )  # fmt: skip
        args += [
            3 if item.shared_data else 2, found.kind, found.entry, version,
            codec.encode_events([event]), item.notification_id, item.channel,
        ]  # fmt: skip
    return keys, args


async def remove_dead_letters(redis: Redis, shard: ShardKeys, recipient_id: str) -> list[WorkItem]:
    """Delete the recipient's dead letters on ``shard`` (and how a replay settled them); the
    work items they held."""
    doomed: list[tuple[str, WorkItem]] = []
    async for entry_id, fields in _stream_entries(redis, shard.dlq):
        letter = parse_entry(shard.shard, entry_id.decode(), fields)
        if letter.work is not None and letter.work.recipient_id == recipient_id:
            doomed.append((letter.entry_id, letter.work))
    for start in range(0, len(doomed), CHUNK):
        ids = [entry_id for entry_id, _ in doomed[start : start + CHUNK]]
        async with redis.pipeline(transaction=False) as pipe:
            pipe.xdel(shard.dlq, *ids)
            pipe.hdel(shard.dlq_resolved, *ids)
            await pipe.execute()
    return [item for _, item in doomed]


async def remove_sandbox_records(
    redis: Redis, keys: KeySpace, addresses: Collection[str], delivery_ids: Collection[str]
) -> int:
    """Delete the sandbox's records of calls to ``addresses`` or for ``delivery_ids``; how many."""
    wanted = {address.encode() for address in addresses}
    deliveries = {delivery_id.encode() for delivery_id in delivery_ids}
    doomed = [
        entry_id
        async for entry_id, fields in _stream_entries(redis, keys.sandbox_sent)
        if fields.get(b"address") in wanted or fields.get(b"delivery_id") in deliveries
    ]
    for start in range(0, len(doomed), CHUNK):
        await redis.xdel(keys.sandbox_sent, *doomed[start : start + CHUNK])
    return len(doomed)
