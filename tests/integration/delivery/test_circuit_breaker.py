"""Circuit breakers shared through Redis: two workers' views of one provider agree, the
circuit opens on a share of TRANSIENT failures, lets one probe through when half-open, and
closes or reopens on the probe's answer."""

from __future__ import annotations

import asyncio

from redis.asyncio import Redis

from streams.core.keys import KeySpace
from streams.delivery.circuit_breaker import (
    CircuitBreakers,
    CircuitPolicy,
    CircuitState,
    read_circuits,
)

POLICY = CircuitPolicy(failure_share=0.5, min_calls=10, window_seconds=30, open_seconds=0.3)


def breakers(redis: Redis, key_prefix: str) -> CircuitBreakers:
    return CircuitBreakers(redis, KeySpace(key_prefix), {"sms": POLICY, "mail": POLICY})


def calls(breaker: CircuitBreakers, provider: str, *, ok: int, failed: int) -> None:
    for _ in range(ok):
        breaker.record(provider, failed=False)
    for _ in range(failed):
        breaker.record(provider, failed=True)


async def test_few_failures_or_few_calls_keep_the_circuit_closed(
    redis: Redis, key_prefix: str
) -> None:
    worker = breakers(redis, key_prefix)
    calls(worker, "sms", ok=6, failed=3)  # 9 calls: fewer than min_calls
    await worker.report()
    assert worker.circuit("sms").state is CircuitState.CLOSED
    calls(worker, "sms", ok=6, failed=0)  # 15 calls, 3 failed: 20 %
    await worker.report()
    circuit = worker.circuit("sms")
    assert (circuit.state, circuit.calls, circuit.failures) == (CircuitState.CLOSED, 15, 3)


async def test_failures_counted_by_two_workers_open_it_for_both(
    redis: Redis, key_prefix: str
) -> None:
    first, second = breakers(redis, key_prefix), breakers(redis, key_prefix)
    calls(first, "sms", ok=2, failed=3)
    calls(second, "sms", ok=2, failed=3)  # together: 10 calls, half failed
    await first.report()
    assert first.circuit("sms").state is CircuitState.CLOSED
    await second.report()
    assert second.circuit("sms").state is CircuitState.OPEN
    await first.report()  # the next report of the other worker sees it open
    assert first.circuit("sms").state is CircuitState.OPEN
    assert first.circuit("sms").opened == 1
    # The other provider is not touched.
    assert first.circuit("mail").state is CircuitState.CLOSED


async def test_a_half_open_circuit_lets_exactly_one_probe_through(
    redis: Redis, key_prefix: str
) -> None:
    first, second = breakers(redis, key_prefix), breakers(redis, key_prefix)
    calls(first, "sms", ok=0, failed=10)
    await first.report()
    assert not await first.try_probe("sms", 5_000)  # still open
    await asyncio.sleep(0.35)
    granted = await asyncio.gather(first.try_probe("sms", 5_000), second.try_probe("sms", 5_000))
    assert sorted(granted) == [False, True]
    assert first.circuit("sms").state is CircuitState.HALF_OPEN
    assert first.circuit("sms").until_ms > 0  # the probe's lease


async def test_a_successful_probe_closes_it_with_a_clean_window(
    redis: Redis, key_prefix: str
) -> None:
    worker = breakers(redis, key_prefix)
    calls(worker, "sms", ok=0, failed=10)
    await worker.report()
    await asyncio.sleep(0.35)
    assert await worker.try_probe("sms", 5_000)
    await worker.probe_done("sms", ok=True)
    circuit = worker.circuit("sms")
    assert (circuit.state, circuit.calls, circuit.failures) == (CircuitState.CLOSED, 0, 0)


async def test_a_failed_probe_opens_it_again_for_the_whole_time(
    redis: Redis, key_prefix: str
) -> None:
    worker = breakers(redis, key_prefix)
    calls(worker, "sms", ok=0, failed=10)
    await worker.report()
    await asyncio.sleep(0.35)
    assert await worker.try_probe("sms", 5_000)
    await worker.probe_done("sms", ok=False)
    circuit = worker.circuit("sms")
    assert (circuit.state, circuit.opened) == (CircuitState.OPEN, 2)
    assert not await worker.try_probe("sms", 5_000)


async def test_an_expired_probe_lease_lets_another_worker_probe(
    redis: Redis, key_prefix: str
) -> None:
    first, second = breakers(redis, key_prefix), breakers(redis, key_prefix)
    calls(first, "sms", ok=0, failed=10)
    await first.report()
    await asyncio.sleep(0.35)
    assert await first.try_probe("sms", 100)  # the probing worker dies with it
    assert not await second.try_probe("sms", 100)
    await asyncio.sleep(0.15)
    assert await second.try_probe("sms", 100)


async def test_status_views_read_circuits_without_changing_them(
    redis: Redis, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix)
    worker = breakers(redis, key_prefix)
    calls(worker, "sms", ok=0, failed=10)
    await worker.report()
    circuits = await read_circuits(redis, keys, ["sms", "mail", "never_called"])
    assert circuits["sms"].state is CircuitState.OPEN
    assert circuits["sms"].until_ms == worker.circuit("sms").until_ms
    assert circuits["mail"].state is CircuitState.CLOSED
    assert circuits["never_called"].state is CircuitState.CLOSED
    assert not await redis.exists(keys.circuit("never_called"))


async def test_a_cancelled_reporter_ends_though_the_client_swallowed_the_cancellation(
    redis: Redis, key_prefix: str
) -> None:
    """A report that finishes although it was cancelled mid-write must not leave the
    reporter looping: a stopping worker waits for it."""
    breaker = breakers(redis, key_prefix)
    breaker.interval_s = 0.01

    async def swallowing_report() -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            return

    breaker.report = swallowing_report  # type: ignore[method-assign]
    task = asyncio.create_task(breaker.run())
    await asyncio.sleep(0.05)  # in the middle of a report

    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=5)

    assert done, "the reporter kept looping after it was cancelled"
    assert task.cancelled()
