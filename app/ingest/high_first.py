"""HIGH single requests ahead of batch work, in one process's event loop.

An API process serves single POSTs and 1000-item batches on one event loop. Planning and
writing a batch takes tens of milliseconds of CPU, done in slices (``Ingestor.ingest_many``
and the batch handler's decoding); a single request needs only a few short steps, but
between each of them (it awaits the ingest quota, then the write) every batch in flight
could run a slice. During a LOW flood through
the batch API that made an OTP wait behind marketing at the front door.

So a HIGH single request is ``serving`` while it is handled, and a batch awaits
``batch_turn`` between its slices: while a HIGH request is being served the batch waits,
for ``MAX_WAIT_S`` at most, so that batches still move under a storm of HIGH requests.
The first step of a request (reading it, before its priority is known) still waits for
the slice that is running; the slices are kept short for that.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager

# The longest a batch slice waits for HIGH requests to be answered; a HIGH request takes
# about a millisecond of CPU, so only a storm of them reaches it.
MAX_WAIT_S = 0.1


class HighFirst:
    """Whether HIGH single requests are being served; batch work waits for them."""

    def __init__(self, max_wait_s: float = MAX_WAIT_S) -> None:
        self.max_wait_s = max_wait_s
        self._serving = 0
        self._idle = asyncio.Event()
        self._idle.set()

    @property
    def busy(self) -> bool:
        """Whether a HIGH request is being served now."""
        return self._serving > 0

    @contextmanager
    def serving(self) -> Iterator[None]:
        """Mark a HIGH request as being served while the block runs."""
        self._serving += 1
        self._idle.clear()
        try:
            yield
        finally:
            self._serving -= 1
            if not self._serving:
                self._idle.set()

    async def batch_turn(self) -> None:
        """Between two slices of batch work: let whatever is ready run, then wait while a
        HIGH request is being served (``max_wait_s`` at most)."""
        await asyncio.sleep(0)
        if self.busy:
            try:
                async with asyncio.timeout(self.max_wait_s):
                    await self._idle.wait()
            except TimeoutError:
                pass
