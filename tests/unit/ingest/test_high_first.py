"""``HighFirst``: batch work waits between its slices while a HIGH request is served."""

from __future__ import annotations

import asyncio

from app.ingest.high_first import HighFirst


async def test_a_batch_turn_does_not_wait_when_no_high_request_is_served() -> None:
    high_first = HighFirst(max_wait_s=10)
    async with asyncio.timeout(1):
        await high_first.batch_turn()


async def test_a_batch_turn_waits_until_every_high_request_is_answered() -> None:
    high_first = HighFirst(max_wait_s=10)
    first, second = high_first.serving(), high_first.serving()
    first.__enter__()
    second.__enter__()
    turn = asyncio.create_task(high_first.batch_turn())
    await asyncio.sleep(0.05)
    first.__exit__(None, None, None)
    await asyncio.sleep(0.05)
    assert not turn.done()  # one HIGH request is still being served
    second.__exit__(None, None, None)
    async with asyncio.timeout(1):
        await turn


async def test_a_batch_waits_no_longer_than_max_wait_under_a_storm_of_high_requests() -> None:
    high_first = HighFirst(max_wait_s=0.05)
    with high_first.serving():
        loop = asyncio.get_running_loop()
        started = loop.time()
        await high_first.batch_turn()
        waited = loop.time() - started
    assert 0.04 <= waited < 1.0


async def test_a_high_request_that_fails_still_ends_its_turn() -> None:
    high_first = HighFirst(max_wait_s=10)
    try:
        with high_first.serving():
            raise ValueError("refused")
    except ValueError:
        pass
    async with asyncio.timeout(1):
        await high_first.batch_turn()
