"""Time limits of provider calls: one watchdog for all of a worker's concurrent sends.

``asyncio.timeout`` arms and disarms a loop timer for every call; in a delivery worker that
was one of the largest costs per delivery besides the send itself. A worker has up to a
hundred sends in flight, each limited to seconds, so one watchdog that looks every
``tick_s`` is precise enough (a call may run up to one tick longer than its limit) and
costs two dictionary operations per send.

A task whose limit passed is cancelled; ``limit`` tells that cancellation apart from any
other, withdraws it and raises ``TimeoutError`` instead, as ``asyncio.timeout`` does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from app.catalog import Catalog

T = TypeVar("T")


def start_within_ms(catalog: Catalog, lease_ms: int) -> dict[str, int]:
    """Per provider, how long after a delivery's lease was taken its send may still start.
    The call's time limit and the recording of its outcome must end inside the lease, or
    another worker could lease the delivery and send it again meanwhile: of the lease left
    beyond the limit, half is for starting, half for recording. (Processes refuse a limit as
    long as the lease; a worker made with one, as tests make, starts within half the lease.)"""
    within = {}
    for name, config in catalog.providers.items():
        limit_ms = round(config.timeout_seconds * 1000)
        within[name] = (lease_ms - limit_ms) // 2 if limit_ms < lease_ms else lease_ms // 2
    return within


class ProviderTimeouts:
    """Limits on how long tasks may take, checked by ``run`` every ``tick_s`` seconds."""

    def __init__(self, tick_s: float = 0.05) -> None:
        self.tick_s = tick_s
        self._due: dict[asyncio.Task[object], float] = {}
        self._cancelled: set[asyncio.Task[object]] = set()

    async def limit(self, seconds: float, call: Awaitable[T]) -> T:
        """Await ``call``; ``TimeoutError`` once ``seconds`` have passed (up to a tick
        later). Must be awaited by a task, one limit at a time."""
        task = self._start(seconds)
        try:
            return await call
        except asyncio.CancelledError:
            if self._expired(task):
                raise TimeoutError from None
            raise
        finally:
            self._finish(task)

    def _start(self, seconds: float) -> asyncio.Task[object]:
        """Limit the current task to ``seconds`` from now; the task, for ``_finish``."""
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("ProviderTimeouts.limit must be awaited by a task")
        self._due[task] = asyncio.get_running_loop().time() + seconds
        return task

    def _finish(self, task: asyncio.Task[object]) -> None:
        """The limited call is over: stop watching ``task``."""
        self._due.pop(task, None)
        self._cancelled.discard(task)

    def _expired(self, task: asyncio.Task[object]) -> bool:
        """Whether the watchdog cancelled ``task``; if so the cancellation is withdrawn, so
        the task may go on (to record the timeout)."""
        if task not in self._cancelled:
            return False
        self._cancelled.discard(task)
        task.uncancel()
        return True

    async def run(self) -> None:
        """Cancel tasks whose limit passed, until cancelled itself."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.tick_s)
            now = loop.time()
            late = [task for task, due in self._due.items() if due <= now]
            for task in late:
                del self._due[task]
                self._cancelled.add(task)
                task.cancel()
