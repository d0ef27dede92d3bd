"""What the generator keeps of a campaign's batches while it runs (``generator``).

A batch (``Batch``) is one chunk's notifications with their recipients' settings read
before planning; the next one is read while the current one is written (``ReadAhead``).
``Tally`` counts what became of a batch's recipients (accepted, repeated, skipped), which
the batch's checkpoint adds to the campaign's counts. ``Pace`` keeps a campaign with a rate
at that many recipients a second.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass
from typing import Any

from app.ingest.answers import IngestAnswer
from app.ingest.requests import NotificationRequest
from streams.campaigns.store import CHUNK_SIZE
from streams.recipients.read import RecipientSettings


@dataclass
class Tally:
    """What became of one batch's recipients: notifications accepted, answered as repeats
    (generated before), or skipped (refused)."""

    accepted: int = 0
    repeated: int = 0
    skipped: int = 0

    def count(self, answer: IngestAnswer) -> None:
        if answer.accepted:
            if answer.replayed:
                self.repeated += 1
            else:
                self.accepted += 1
        else:
            self.skipped += 1


Entry = tuple[str, NotificationRequest]
Known = Mapping[str, RecipientSettings]


@dataclass(frozen=True)
class Batch:
    """One chunk's notifications (idempotency key, request) and their recipients' settings
    as read before planning."""

    entries: list[Entry]
    known: Known


class ReadAhead:
    """The next chunk, being read while the current one is written."""

    def __init__(self) -> None:
        self._cursor = -1
        self._task: asyncio.Task[Batch] | None = None

    def start(self, cursor: int, read: Coroutine[Any, Any, Batch]) -> None:
        self.drop()
        self._cursor, self._task = cursor, asyncio.ensure_future(read)

    async def take(self, cursor: int) -> Batch | None:
        """The chunk read ahead if it is the one at ``cursor`` (None: read it now)."""
        if self._task is None or self._cursor != cursor:
            self.drop()
            return None
        task, self._task = self._task, None
        return await task

    def drop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            # A read that failed before it was dropped has nothing more to say.
            task.add_done_callback(lambda done: done.cancelled() or done.exception())


class Pace:
    """Keeps a campaign at its rate: recipients a second since this run began."""

    def __init__(self) -> None:
        self.began = time.monotonic()
        self.done = 0

    @staticmethod
    def step(rate: int | None) -> int:
        """Recipients ingested at once: a quarter of a second's worth at a set rate."""
        return CHUNK_SIZE if not rate else max(1, min(CHUNK_SIZE, rate // 4))

    async def wait(self, rate: int | None, count: int) -> None:
        if rate:
            ahead = self.began + self.done / rate - time.monotonic()
            if ahead > 0:
                await asyncio.sleep(ahead)
        self.done += count
