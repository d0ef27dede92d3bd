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

from streams.core.vocabulary import Priority


class Lanes:
    """The free places of each priority's lane. Taking and giving back cost the same however
    many places change hands: a reader takes a whole lane at a time and gives back most of
    it when little is waiting in the stream."""

    def __init__(self, sizes: Mapping[Priority, int]) -> None:
        self.sizes = dict(sizes)
        self._free = dict(sizes)
        # Takers have their turn first come, first served: a reader that gives its places
        # back and takes again at once must not starve recovery waiting for one.
        self._turns = {priority: asyncio.Lock() for priority in sizes}
        # What the taker whose turn it is waits on while the lane is full.
        self._room: dict[Priority, asyncio.Future[None] | None] = dict.fromkeys(sizes)

    async def take(self, priority: Priority, most: int = 0) -> int:
        """Wait until the lane has a free place, then take every free one up to ``most``
        (0: the lane's size); how many were taken. Cancelled while it waits, it took none."""
        async with self._turns[priority]:
            while not self._free[priority]:
                room = asyncio.get_running_loop().create_future()
                self._room[priority] = room
                try:
                    await room
                finally:
                    self._room[priority] = None
            taken = min(most or self.sizes[priority], self._free[priority])
            self._free[priority] -= taken
            return taken

    def give_back(self, priority: Priority, count: int = 1) -> None:
        """Return ``count`` places taken with ``take``."""
        if count <= 0:
            return
        self._free[priority] += count
        room = self._room[priority]
        if room is not None and not room.done():
            room.set_result(None)

    def free(self, priority: Priority) -> int:
        """How many places of the lane nobody holds now."""
        return self._free[priority]
