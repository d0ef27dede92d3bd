"""How much work waits, and for how long: read live from Redis whenever someone asks.

For every shard's ``events`` and ``work:<priority>`` stream and each consumer group on it:
the stream's length, the group's pending entries (read, not yet acknowledged) and the age of
the oldest, its lag (entries not yet read by the group) and the age of the oldest of those;
per shard the dead-letter stream's length and how many of its entries are open (no replay
settled them: no mark in ``dlq:resolved``), the ``delayed`` set's size and how overdue its
earliest member is, and the work items waiting in producers' queues (``streams.delivery.fairness``).
Ages are measured on the Redis clock, which stamped the entry ids, so a reader on another
host with a skewed clock still gets them right. Two pipelined round trips for any number of
shards, and two more per shard for the queues.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import ResponseError

from streams.core.codec import as_text
from streams.core.connection import clock_reply_ms, queue_clock
from streams.core.consumer_groups import DELIVERY_GROUP, EVENTS_GROUPS
from streams.core.keys import KeySpace, ShardKeys
from streams.core.vocabulary import Priority
from streams.delivery.fairness import FAIR_PRIORITIES

# When Redis cannot say how far a group is behind (``lag`` is nil after an XDEL inside the
# unread range), the unread entries are counted, up to this many.
LAG_COUNT_LIMIT = 1000


@dataclass(frozen=True, slots=True)
class GroupBacklog:
    """One consumer group on one stream."""

    stream: str  # "events" or "work:<priority>"
    shard: int
    group: str
    length: int  # entries in the stream, whatever their state
    pending: int
    lag: int  # entries the group has not read yet
    oldest_pending_age_ms: int  # 0 when nothing is pending
    oldest_unread_age_ms: int  # 0 when nothing is unread

    @property
    def oldest_waiting_age_ms(self) -> int:
        """How long the oldest entry not yet finished by the group has waited."""
        return max(self.oldest_pending_age_ms, self.oldest_unread_age_ms)


@dataclass(frozen=True, slots=True)
class ShardBacklog:
    """A shard's dead letters and delayed work."""

    shard: int
    dlq_size: int
    delayed_size: int
    delayed_overdue_ms: int  # how long ago the earliest delayed member was due (0: none is)
    # NORMAL and LOW work items waiting in producers' queues for their fair share
    # (``streams.delivery.fairness``), by producer.
    queued: dict[str, int] = field(default_factory=dict)
    # Dead letters a replay settled (their marks in ``dlq:resolved``, which go with their
    # entries): the others are open.
    dlq_resolved: int = 0

    @property
    def dlq_open(self) -> int:
        return max(0, self.dlq_size - self.dlq_resolved)


@dataclass(frozen=True, slots=True)
class Backlog:
    now_ms: int  # the Redis clock when this was read
    groups: list[GroupBacklog]
    shards: list[ShardBacklog]

    @property
    def dlq_size(self) -> int:
        return sum(shard.dlq_size for shard in self.shards)

    @property
    def dlq_open(self) -> int:
        """Dead letters no replay settled, over all shards."""
        return sum(shard.dlq_open for shard in self.shards)

    @property
    def delayed_size(self) -> int:
        return sum(shard.delayed_size for shard in self.shards)

    @property
    def delayed_overdue_ms(self) -> int:
        return max((shard.delayed_overdue_ms for shard in self.shards), default=0)

    @property
    def queued(self) -> dict[str, int]:
        """Work items waiting in producers' queues, by producer, over all shards."""
        total: dict[str, int] = {}
        for shard in self.shards:
            for producer, count in shard.queued.items():
                total[producer] = total.get(producer, 0) + count
        return total


@dataclass(frozen=True, slots=True)
class _Stream:
    shard: ShardKeys
    name: str  # "events" or "work:<priority>"
    key: str
    # Reported even before they exist: everything is then unread.
    expected_groups: tuple[str, ...]


def _watched(keys: KeySpace) -> list[_Stream]:
    streams = []
    for shard in keys.all_shards():
        streams.append(_Stream(shard, "events", shard.events, EVENTS_GROUPS))
        for priority in Priority:
            name = f"work:{priority.stream_name}"
            streams.append(_Stream(shard, name, shard.work(priority), (DELIVERY_GROUP,)))
    return streams


async def read_backlog(redis: Redis, keys: KeySpace) -> Backlog:
    """The backlog of every shard."""
    streams = _watched(keys)
    pipe = redis.pipeline(transaction=False)
    queue_clock(pipe, keys.shard(0).events)
    for stream in streams:
        pipe.xlen(stream.key)
        pipe.xinfo_groups(stream.key)
    for shard in keys.all_shards():
        pipe.xlen(shard.dlq)
        pipe.zcard(shard.delayed)
        pipe.zrange(shard.delayed, 0, 0, withscores=True)
        pipe.hlen(shard.dlq_resolved)
    replies: list[Any] = await pipe.execute(raise_on_error=False)
    now_ms = clock_reply_ms(_ok(replies[0]))

    # (stream, length, group name, group info or None when the group does not exist yet)
    found: list[tuple[_Stream, int, str, dict[str, Any] | None]] = []
    for number, stream in enumerate(streams):
        length = int(_ok(replies[1 + 2 * number]))
        info = replies[2 + 2 * number]
        groups = {} if _missing_stream(info) else {as_text(g["name"]): g for g in _ok(info)}
        found += [
            (stream, length, name, None) for name in stream.expected_groups if name not in groups
        ]
        found += [(stream, length, name, group) for name, group in groups.items()]

    shard_replies = replies[1 + 2 * len(streams) :]
    shards = []
    for number, shard in enumerate(keys.all_shards()):
        dlq, delayed, earliest, resolved = shard_replies[4 * number : 4 * number + 4]
        overdue = max(0, now_ms - int(_ok(earliest)[0][1])) if _ok(earliest) else 0
        queued = await _queued(redis, shard)
        shards.append(
            ShardBacklog(
                shard.shard, int(_ok(dlq)), int(_ok(delayed)), overdue, queued, int(_ok(resolved))
            )
        )

    return Backlog(now_ms, await _group_figures(redis, found, now_ms), shards)


async def _queued(redis: Redis, shard: ShardKeys) -> dict[str, int]:
    """The shard's work items waiting in producers' queues, by producer: the producers of
    every fair priority in one round trip, their queues' lengths in another."""
    async with redis.pipeline(transaction=False) as pipe:
        for priority in FAIR_PRIORITIES:
            pipe.smembers(shard.queued_producers(priority))
        members: list[set[bytes]] = await pipe.execute()
    queues = [
        (name.decode(), priority)
        for priority, names in zip(FAIR_PRIORITIES, members, strict=True)
        for name in names
    ]
    if not queues:
        return {}
    async with redis.pipeline(transaction=False) as pipe:
        for producer, priority in queues:
            pipe.llen(shard.queued(priority, producer))
        counts: list[int] = await pipe.execute()
    lengths: dict[str, int] = {}
    for (producer, _), count in zip(queues, counts, strict=True):
        lengths[producer] = lengths.get(producer, 0) + count
    return lengths


async def _group_figures(
    redis: Redis,
    found: Sequence[tuple[_Stream, int, str, dict[str, Any] | None]],
    now_ms: int,
) -> list[GroupBacklog]:
    pipe = redis.pipeline(transaction=False)
    for stream, _, name, group in found:
        last_read = "0-0" if group is None else as_text(group["last-delivered-id"])
        pipe.xrange(stream.key, f"({last_read}", "+", count=1)
        if group is not None:  # a group that does not exist yet has nothing pending
            pipe.xpending(stream.key, name)
    replies = iter(await pipe.execute(raise_on_error=False))
    figures = []
    for stream, length, name, group in found:
        first_unread = _ok(next(replies))
        pending, oldest_pending = 0, 0
        if group is not None:
            summary = _ok(next(replies))
            pending = int(summary["pending"])
            oldest_pending = _age(now_ms, summary["min"]) if pending else 0
        oldest_unread = _age(now_ms, first_unread[0][0]) if first_unread else 0
        if group is None:
            lag = length
        elif group.get("lag") is not None:
            lag = int(group["lag"])
        elif not first_unread:
            lag = 0
        else:
            lag = await _count_after(redis, stream.key, as_text(group["last-delivered-id"]))
        figures.append(
            GroupBacklog(
                stream.name, stream.shard.shard, name, length, pending, lag,
                oldest_pending, oldest_unread,
            )
        )  # fmt: skip
    return figures


async def _count_after(redis: Redis, stream: str, last_read: str) -> int:
    """Entries after ``last_read``, counted up to ``LAG_COUNT_LIMIT``."""
    entries: Any = await redis.xrange(stream, f"({last_read}", "+", count=LAG_COUNT_LIMIT)
    return len(entries)


def _age(now_ms: int, entry_id: bytes | str) -> int:
    return max(0, now_ms - int(as_text(entry_id).partition("-")[0]))


def _missing_stream(reply: Any) -> bool:
    return isinstance(reply, ResponseError) and "no such key" in str(reply).lower()


def _ok(reply: Any) -> Any:
    """A pipeline reply, or its error raised (anything but a missing stream is a failure)."""
    if isinstance(reply, Exception):
        raise reply
    return reply
