"""Merging many small script calls from concurrent tasks into few pipelined ones.

The Python client, not Redis, is the bottleneck: a round trip costs tens of microseconds of
client CPU however little it carries. ``BatchedScript`` collects the items that concurrent
tasks submit while a write is in flight, groups them (items of one call must share a hash
tag), packs each group into calls of up to ``chunk`` items, and sends all calls in one
pipeline. Under load one round trip carries many requests; a lone item goes out at once.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Callable, Hashable, Sequence
from typing import Any, Generic, TypeVar

from redis.asyncio import Redis

from streams.core.scripts import KeyOrArg, LuaScript

Item = TypeVar("Item")
Reply = TypeVar("Reply")
Group = TypeVar("Group", bound=Hashable)
Call = tuple[list[KeyOrArg], list[KeyOrArg]]


class _Ticket(Generic[Item, Reply]):
    """The items one caller submitted and, once written, their replies in the same order.

    One future per caller, not per item: a 1000-item batch then costs one wake-up instead of
    a thousand.
    """

    __slots__ = ("future", "items", "replies")

    def __init__(self, items: Sequence[Item], future: asyncio.Future[list[Reply | Exception]]):
        self.items = items
        self.replies: list[Reply | Exception] = [_UNANSWERED] * len(items)
        self.future = future


_UNANSWERED = RuntimeError("no reply was recorded for this item")


class BatchedScript(Generic[Group, Item, Reply]):
    """Runs ``script`` for items submitted by concurrent tasks, in shared pipelines.

    ``group_of`` says which items may share a call, ``build`` turns one group's chunk of
    items into a call's keys and arguments, and ``parse`` turns one entry of the script's
    reply (a list with one entry per item) into that item's reply.
    """

    def __init__(
        self,
        redis: Redis,
        script: LuaScript,
        *,
        group_of: Callable[[Item], Group],
        build: Callable[[Group, Sequence[Item]], Call],
        parse: Callable[[Any], Reply],
        chunk: int = 64,
        max_items: int = 1024,
    ) -> None:
        self.redis = redis
        self.script = script
        self.group_of = group_of
        self.build = build
        self.parse = parse
        self.chunk = chunk
        self.max_items = max_items
        self._waiting: list[_Ticket[Item, Reply]] = []
        self._flusher: asyncio.Task[None] | None = None

    async def run(self, items: Sequence[Item]) -> list[Reply]:
        """Run the script for ``items``; their replies in the same order."""
        replies = await self.run_settled(items)
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
        return replies  # type: ignore[return-value]

    async def run_settled(self, items: Sequence[Item]) -> list[Reply | Exception]:
        """Like ``run``, but an item whose call failed gets its error in its place.

        The calls of one pipeline succeed or fail one by one, so items of a failed call can
        be told apart from items that were written.
        """
        if not items:
            return []
        loop = asyncio.get_running_loop()
        ticket: _Ticket[Item, Reply] = _Ticket(items, loop.create_future())
        self._waiting.append(ticket)
        if self._flusher is None:
            self._flusher = loop.create_task(self._flush())
        return await ticket.future

    async def run_alone(self, items: Sequence[Item]) -> list[Reply | Exception]:
        """Like ``run_settled``, but ``items`` go out at once in a pipeline of their own,
        beside any write in flight.

        For a caller that submits parts of its own work as it goes (a campaign's generator):
        behind the shared pipeline, each part waited for the part before it to be answered,
        and the last parts of a batch came back long after they were planned.
        """
        if not items:
            return []
        ticket: _Ticket[Item, Reply] = _Ticket(items, asyncio.get_running_loop().create_future())
        await self._write([ticket])
        return ticket.replies

    async def _flush(self) -> None:
        try:
            while self._waiting:
                # Whole tickets, at least one, up to about ``max_items`` items.
                taken, count = 0, 0
                while taken < len(self._waiting) and (taken == 0 or count < self.max_items):
                    count += len(self._waiting[taken].items)
                    taken += 1
                batch = self._waiting[:taken]
                del self._waiting[:taken]
                try:
                    await self._write(batch)
                except BaseException as error:
                    # Never leave a caller waiting for an answer that will not come.
                    for ticket in batch:
                        if not ticket.future.done():
                            ticket.future.set_exception(
                                error if isinstance(error, Exception) else RuntimeError(error)
                            )
                    raise
        finally:
            self._flusher = None

    async def _write(self, batch: list[_Ticket[Item, Reply]]) -> None:
        groups: dict[Group, list[tuple[_Ticket[Item, Reply], int]]] = defaultdict(list)
        for ticket in batch:
            for index, item in enumerate(ticket.items):
                groups[self.group_of(item)].append((ticket, index))
        calls: list[Call] = []
        places: list[list[tuple[_Ticket[Item, Reply], int]]] = []
        for group, entries in groups.items():
            for start in range(0, len(entries), self.chunk):
                part = entries[start : start + self.chunk]
                calls.append(self.build(group, [ticket.items[index] for ticket, index in part]))
                places.append(part)
        try:
            results = await self.script.run_many(self.redis, calls, return_exceptions=True)
        except Exception as error:  # the pipeline failed: every item gets the error
            results = [error] * len(calls)
        for part, result in zip(places, results, strict=True):
            for position, (ticket, index) in enumerate(part):
                if isinstance(result, Exception):
                    ticket.replies[index] = result
                    continue
                try:
                    ticket.replies[index] = self.parse(result[position])
                except Exception as error:  # a reply this code cannot read: a bug
                    ticket.replies[index] = error
        for ticket in batch:
            if not ticket.future.done():  # done: its caller was cancelled
                ticket.future.set_result(ticket.replies)
