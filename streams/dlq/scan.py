"""Finding dead letters: the entries a selection matches, page by page, and their summary.

Entries are read shard by shard, each with how a replay settled it (its mark in
``dlq:resolved``); entries without a mark are the open dead letters. Every scan is bounded:
it looks at no more than a given number of entries, matching or not, so what a view costs
does not grow with the queue. A replay reads oldest first (the order it replays in); a
summary reads newest first, so a large queue's summary shows what failed most recently, and
says that it is partial.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import Redis

from streams.core.codec import as_text
from streams.core.keys import KeySpace
from streams.core.vocabulary import Channel, ErrorClass
from streams.dlq.entries import DeadLetter, parse_entry, parse_resolution

SUMMARY_SCAN = 10_000  # entries one summary may look at (about 0.3 s of API time)
_PAGE = 500


@dataclass(frozen=True, slots=True)
class Selection:
    """Which entries an operator means; None (or empty) matches everything."""

    notification_type: str | None = None
    channel: Channel | None = None
    error_class: ErrorClass | None = None
    since_ms: int | None = None  # dead-lettered at or after
    until_ms: int | None = None  # dead-lettered before
    delivery_ids: frozenset[str] = frozenset()
    # Only this producer's entries (a producer's own view); None: every producer's (admin).
    producer: str | None = None

    def matches(self, letter: DeadLetter) -> bool:
        """True when ``letter`` passes every filter (the time range is applied by XRANGE)."""
        return (
            self.producer in (None, letter.producer)
            and self.notification_type in (None, letter.notification_type)
            and self.channel in (None, letter.channel)
            and self.error_class in (None, letter.error_class)
            and (not self.delivery_ids or letter.delivery_id in self.delivery_ids)
        )

    @property
    def id_range(self) -> tuple[str, str]:
        """The selection's time window as XRANGE bounds."""
        low = f"{self.since_ms}-0" if self.since_ms is not None else "-"
        high = f"({self.until_ms}-0" if self.until_ms is not None else "+"
        return low, high


async def scan(
    redis: Redis,
    keys: KeySpace,
    selection: Selection,
    *,
    open_only: bool,
    max_entries: int,
    newest_first: bool = False,
) -> AsyncIterator[list[DeadLetter]]:
    """Pages of matching entries, oldest (or newest) first, shard by shard, each with its
    resolution.

    Looks at no more than ``max_entries`` entries in all, matching or not.
    """
    low, high = selection.id_range
    looked = 0
    for shard in keys.all_shards():
        start = high if newest_first else low
        while looked < max_entries:
            count = min(_PAGE, max_entries - looked)
            entries: Any = await (
                redis.xrevrange(shard.dlq, start, low, count=count)
                if newest_first
                else redis.xrange(shard.dlq, start, high, count=count)
            )
            if not entries:
                break
            looked += len(entries)
            ids = [as_text(entry_id) for entry_id, _ in entries]
            marks: list[Any] = await redis.hmget(shard.dlq_resolved, ids)
            page = []
            for entry_id, (_, raw), mark in zip(ids, entries, marks, strict=True):
                if open_only and mark is not None:
                    continue
                letter = parse_entry(shard.shard, entry_id, raw)
                if selection.matches(letter):
                    resolution = parse_resolution(mark)
                    if resolution is not None:
                        letter = dataclasses.replace(letter, resolution=resolution)
                    page.append(letter)
            if page:
                yield page
            if len(entries) < count:
                break
            start = f"({ids[-1]}"


@dataclass(slots=True)
class Summary:
    """The open dead letters a selection matches: counts by class, channel, type, samples."""

    open: int = 0
    resolved: int = 0
    by_error_class: Counter[str] = field(default_factory=Counter)
    by_channel: Counter[str] = field(default_factory=Counter)
    by_type: Counter[str] = field(default_factory=Counter)
    oldest_open_ms: int | None = None
    samples: list[DeadLetter] = field(default_factory=list)
    # More entries than one summary looks at: the counts are complete only for the entries
    # dead-lettered since ``complete_since_ms`` (the oldest one counted).
    truncated: bool = False
    complete_since_ms: int | None = None

    def count(self, letter: DeadLetter, samples: int) -> None:
        """Count one entry (read newest first); keep the oldest ``samples`` open ones."""
        self.complete_since_ms = letter.dead_lettered_ms
        if letter.resolution is not None:
            self.resolved += 1
            return
        self.open += 1
        self.by_error_class[letter.error_class] += 1
        self.by_channel[letter.channel or "unknown"] += 1
        self.by_type[letter.notification_type or "unknown"] += 1
        if self.oldest_open_ms is None or letter.dead_lettered_ms < self.oldest_open_ms:
            self.oldest_open_ms = letter.dead_lettered_ms
        if samples:
            self.samples.append(letter)
            if len(self.samples) > samples:
                self.samples.pop(0)


async def summarize(
    redis: Redis,
    keys: KeySpace,
    selection: Selection,
    *,
    samples: int,
    max_entries: int = SUMMARY_SCAN,
) -> Summary:
    """Count the matching entries among the newest ``max_entries`` (open ones by class,
    channel and type) and take samples: the oldest ``samples`` open ones of those, in the
    order a replay would take them."""
    summary = Summary()
    pages = scan(
        redis, keys, selection, open_only=False, max_entries=max_entries, newest_first=True
    )
    async for page in pages:
        for letter in page:
            summary.count(letter, samples)
    summary.samples.reverse()  # read newest first, shown oldest first
    summary.truncated = await more_than(redis, keys, selection, max_entries)
    return summary


async def more_than(redis: Redis, keys: KeySpace, selection: Selection, limit: int) -> bool:
    """Whether the selection's time window holds more than ``limit`` entries in all."""
    if selection.since_ms is None and selection.until_ms is None:
        async with redis.pipeline(transaction=False) as pipe:
            for shard in keys.all_shards():
                pipe.xlen(shard.dlq)
            lengths: list[int] = await pipe.execute()
        return sum(lengths) > limit
    total = 0
    low, high = selection.id_range
    for shard in keys.all_shards():
        # XRANGE with COUNT limit+1 bounds the work: only whether there is more matters.
        found: Any = await redis.xrange(shard.dlq, low, high, count=limit + 1 - total)
        total += len(found)
        if total > limit:
            return True
    return False
