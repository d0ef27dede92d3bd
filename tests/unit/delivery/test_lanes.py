"""A worker's lanes: places are taken before leasing, as many as are free, and given back."""

from __future__ import annotations

import asyncio

import pytest

from app.delivery.lanes import Lanes
from streams.core.vocabulary import Priority


async def test_a_reader_takes_every_free_place_and_gives_back_what_it_did_not_use() -> None:
    lanes = Lanes({Priority.HIGH: 4, Priority.LOW: 2})
    assert await lanes.take(Priority.HIGH) == 4
    assert lanes.free(Priority.HIGH) == 0
    assert lanes.free(Priority.LOW) == 2  # each priority has places of its own
    lanes.give_back(Priority.HIGH, 3)
    assert await lanes.take(Priority.HIGH) == 3


async def test_recovery_takes_no_more_places_than_it_has_entries() -> None:
    lanes = Lanes({Priority.NORMAL: 8})
    assert await lanes.take(Priority.NORMAL, 3) == 3
    assert lanes.free(Priority.NORMAL) == 5


async def test_a_full_lane_makes_the_taker_wait_for_the_first_place_given_back() -> None:
    lanes = Lanes({Priority.LOW: 2})
    await lanes.take(Priority.LOW)
    waiting = asyncio.create_task(lanes.take(Priority.LOW))
    await asyncio.sleep(0.01)
    assert not waiting.done()
    lanes.give_back(Priority.LOW)
    assert await asyncio.wait_for(waiting, 1) == 1


async def test_a_taker_cancelled_while_it_waits_took_no_place() -> None:
    lanes = Lanes({Priority.LOW: 1})
    await lanes.take(Priority.LOW)
    waiting = asyncio.create_task(lanes.take(Priority.LOW))
    await asyncio.sleep(0.01)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    lanes.give_back(Priority.LOW)
    assert lanes.free(Priority.LOW) == 1


async def test_takers_have_their_turn_in_order_so_a_reader_cannot_starve_recovery() -> None:
    lanes = Lanes({Priority.HIGH: 2})
    await lanes.take(Priority.HIGH)  # a reader holds the whole lane
    recovery = asyncio.create_task(lanes.take(Priority.HIGH, 1))
    await asyncio.sleep(0.01)
    # The reader gives its places back and at once wants the whole lane again.
    lanes.give_back(Priority.HIGH, 2)
    reader = asyncio.create_task(lanes.take(Priority.HIGH))
    assert await asyncio.wait_for(recovery, 1) == 1
    assert await asyncio.wait_for(reader, 1) == 1  # what recovery left
    lanes.give_back(Priority.HIGH, 0)  # nothing to return: nothing changes
    assert lanes.free(Priority.HIGH) == 0
