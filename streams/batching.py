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

from streams.scripts import KeyOrArg, LuaScript

Item = TypeVar("Item")
Reply = TypeVar("Reply")
Group = TypeVar("Group", bound=Hashable)
Call = tuple[list[KeyOrArg], list[KeyOrArg]]


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
        self._waiting: list[tuple[Item, asyncio.Future[Reply]]] = []
        self._flusher: asyncio.Task[None] | None = None

    async def run(self, items: Sequence[Item]) -> list[Reply]:
        """Run the script for ``items``; their replies in the same order."""
        futures = self._submit(items)
        if len(futures) == 1:
            return [await futures[0]]
        return list(await asyncio.gather(*futures))

    async def run_settled(self, items: Sequence[Item]) -> list[Reply | Exception]:
        """Like ``run``, but an item whose call failed gets its error in its place.

        The calls of one pipeline succeed or fail one by one, so items of a failed call can
        be told apart from items that were written.
        """
        futures = self._submit(items)
        if len(futures) == 1:
            try:
                return [await futures[0]]
            except Exception as error:
                return [error]
        return list(await asyncio.gather(*futures, return_exceptions=True))  # type: ignore[arg-type]

    def _submit(self, items: Sequence[Item]) -> list[asyncio.Future[Reply]]:
        loop = asyncio.get_running_loop()
        futures: list[asyncio.Future[Reply]] = [loop.create_future() for _ in items]
        self._waiting.extend(zip(items, futures, strict=True))
        if self._flusher is None:
            self._flusher = loop.create_task(self._flush())
        return futures

    async def _flush(self) -> None:
        try:
            while self._waiting:
                batch = self._waiting[: self.max_items]
                del self._waiting[: self.max_items]
                try:
                    await self._write(batch)
                except BaseException as error:
                    # Never leave a caller waiting for an answer that will not come.
                    for _, future in batch:
                        if not future.done():
                            future.set_exception(
                                error if isinstance(error, Exception) else RuntimeError(error)
                            )
                    raise
        finally:
            self._flusher = None

    async def _write(self, batch: list[tuple[Item, asyncio.Future[Reply]]]) -> None:
        groups: dict[Group, list[tuple[Item, asyncio.Future[Reply]]]] = defaultdict(list)
        for entry in batch:
            groups[self.group_of(entry[0])].append(entry)
        calls: list[Call] = []
        waiters: list[list[asyncio.Future[Reply]]] = []
        for group, entries in groups.items():
            for start in range(0, len(entries), self.chunk):
                part = entries[start : start + self.chunk]
                calls.append(self.build(group, [item for item, _ in part]))
                waiters.append([future for _, future in part])
        try:
            results = await self.script.run_many(self.redis, calls, return_exceptions=True)
        except Exception as error:  # the pipeline failed: every waiter gets the error
            results = [error] * len(calls)
        for futures, result in zip(waiters, results, strict=True):
            for index, future in enumerate(futures):
                if future.done():  # its caller was cancelled
                    continue
                if isinstance(result, Exception):
                    future.set_exception(result)
                    continue
                try:
                    future.set_result(self.parse(result[index]))
                except Exception as error:  # a reply this code cannot read: a bug
                    future.set_exception(error)
