"""The worker's watchdog for provider calls."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from app.catalog import parse_catalog
from app.delivery.provider_timeouts import ProviderTimeouts, start_within_ms
from tests.conftest import REPO


@pytest.fixture
async def timeouts() -> AsyncIterator[ProviderTimeouts]:
    watchdog = ProviderTimeouts(tick_s=0.01)
    running = asyncio.create_task(watchdog.run())
    yield watchdog
    running.cancel()
    await asyncio.gather(running, return_exceptions=True)


async def test_a_call_within_its_limit_returns_its_value(timeouts: ProviderTimeouts) -> None:
    async def quick() -> str:
        await asyncio.sleep(0.01)
        return "answer"

    assert await timeouts.limit(1.0, quick()) == "answer"


async def test_a_call_past_its_limit_raises_timeout_and_the_task_goes_on(
    timeouts: ProviderTimeouts,
) -> None:
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        await timeouts.limit(0.05, asyncio.sleep(10))
    assert 0.05 <= time.monotonic() - started < 0.5  # within a few ticks
    # The cancellation was withdrawn: this task awaits normally afterwards.
    current = asyncio.current_task()
    assert current is not None
    assert current.cancelling() == 0
    await asyncio.sleep(0.02)


async def test_an_error_of_the_call_passes_through(timeouts: ProviderTimeouts) -> None:
    async def broken() -> None:
        raise ValueError("provider bug")

    with pytest.raises(ValueError, match="provider bug"):
        await timeouts.limit(1.0, broken())


async def test_a_cancellation_from_outside_is_not_a_timeout(timeouts: ProviderTimeouts) -> None:
    task = asyncio.create_task(timeouts.limit(10.0, asyncio.sleep(10)))
    await asyncio.sleep(0.02)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_many_calls_keep_their_own_limits(timeouts: ProviderTimeouts) -> None:
    async def call(seconds: float) -> str:
        try:
            await timeouts.limit(0.1, asyncio.sleep(seconds))
        except TimeoutError:
            return "timeout"
        return "done"

    results = await asyncio.gather(*(call(0.01 if n % 2 else 5) for n in range(20)))
    assert results == ["timeout", "done"] * 10


def test_a_send_may_start_only_while_its_time_limit_and_outcome_end_inside_the_lease() -> None:
    text = (REPO / "clarion.toml").read_text()
    assert "timeout_seconds = 10" in text, "clarion.toml changed: update this test"
    catalog = parse_catalog(text.replace("timeout_seconds = 10", "timeout_seconds = 4"), "t")
    # Of the 11 s the 4 s limit leaves of a 15 s lease, half for starting, half for recording.
    assert start_within_ms(catalog, lease_ms=15_000)["sandbox"] == 5_500
    # A limit as long as the lease (processes refuse one): half the lease.
    assert start_within_ms(catalog, lease_ms=4_000)["sandbox"] == 2_000
