"""What the generator keeps of a batch: its tally, the next chunk read ahead, its pace."""

from __future__ import annotations

import asyncio
import time

from app.campaigns.batches import Batch, Pace, ReadAhead, Tally
from app.ingest.answers import IngestAnswer
from streams.campaigns.store import CHUNK_SIZE
from streams.core.errors import Conflict


def test_a_tally_counts_accepted_repeated_and_skipped_recipients() -> None:
    tally = Tally()
    for answer in (
        IngestAnswer(response=b"{}"),
        IngestAnswer(response=b"{}", replayed=True),
        IngestAnswer(error=Conflict("settings kept changing")),
        IngestAnswer(response=b"{}"),
    ):
        tally.count(answer)
    assert (tally.accepted, tally.repeated, tally.skipped) == (2, 1, 1)


async def read(batch: Batch) -> Batch:
    return batch


async def test_the_chunk_read_ahead_is_taken_at_its_cursor_only() -> None:
    ahead = ReadAhead()
    batch = Batch([], {})
    ahead.start(3, read(batch))
    assert await ahead.take(3) is batch
    assert await ahead.take(3) is None  # taken once
    ahead.start(4, read(batch))
    assert await ahead.take(5) is None  # another chunk: read it now, the one ahead dropped
    assert await ahead.take(4) is None


async def test_a_dropped_read_is_cancelled() -> None:
    started = asyncio.Event()

    async def slow() -> Batch:
        started.set()
        await asyncio.sleep(60)
        raise AssertionError("never reached")

    ahead = ReadAhead()
    ahead.start(1, slow())
    await started.wait()
    task = ahead._task
    ahead.drop()
    assert task is not None
    await asyncio.sleep(0)
    assert task.cancelled()


def test_a_paced_campaign_takes_a_quarter_second_of_its_rate_at_once() -> None:
    assert Pace.step(None) == CHUNK_SIZE
    assert Pace.step(400) == 100
    assert Pace.step(2) == 1
    assert Pace.step(10**9) == CHUNK_SIZE


async def test_the_pace_waits_until_the_rate_allows_more() -> None:
    pace = Pace()
    began = time.monotonic()
    await pace.wait(100, 10)  # the first ten go at once
    await pace.wait(100, 10)  # then ten at 100 a second: a tenth of a second on
    assert 0.08 <= time.monotonic() - began < 1.0
    await pace.wait(None, 10**6)  # no rate: no wait
    assert pace.done == 10 + 10 + 10**6
