"""A worker's lanes: per priority a bound on sends in flight, so LOW can never take HIGH's
capacity.

A place in the lane is taken *before* a delivery is leased, not after. A lease runs from the
moment it is taken: a delivery leased while its send waited for room behind others could see
its lease run out before the send ended, and another worker would lease it and send it again
meanwhile. So whoever leases first takes places (``take``: a reader as many as are free,
recovery as many as it has entries for, both waiting for at least one), leases only as many
deliveries as it holds places, and gives back at once the places of those it does not send
(``give_back``); a send gives its place back when it ends.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from streams.vocabulary import Priority


class Lanes:
    """The places in flight of each priority's lane."""

    def __init__(self, sizes: Mapping[Priority, int]) -> None:
        self.sizes = dict(sizes)
        self._places = {priority: asyncio.Semaphore(size) for priority, size in sizes.items()}

    async def take(self, priority: Priority, most: int = 0) -> int:
        """Wait until the lane has a free place, then take every free one up to ``most``
        (0: the lane's size); how many were taken. Cancelled while it waits, it took none."""
        places = self._places[priority]
        most = most or self.sizes[priority]
        await places.acquire()
        taken = 1
        # A free place is taken without waiting: no other task runs in between.
        while taken < most and not places.locked():
            await places.acquire()
            taken += 1
        return taken

    def give_back(self, priority: Priority, count: int = 1) -> None:
        """Return ``count`` places taken with ``take``."""
        places = self._places[priority]
        for _ in range(count):
            places.release()

    def free(self, priority: Priority) -> int:
        """How many places of the lane nobody holds now."""
        return self._places[priority]._value
