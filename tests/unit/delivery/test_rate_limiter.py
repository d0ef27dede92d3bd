"""The provider rate limiter on fakeredis: bursts, waits, shares, HIGH's reserve, batches.

A batch of requests for one provider runs in one script call, so it is decided at a single
instant of the Redis clock: those tests are exact. The ones about rates over time use short
real runs with generous bounds (the script reads Redis's TIME; fakeredis supports it).
"""

from __future__ import annotations

import asyncio
import time

import pytest
from redis.asyncio import Redis

from streams.core.keys import KeySpace
from streams.core.vocabulary import Priority
from streams.delivery.rate_limiter import Rate, RateLimiter


@pytest.fixture
def limiter(fake: Redis, key_prefix: str) -> RateLimiter:
    return RateLimiter(fake, KeySpace(key_prefix))


async def hammer(
    limiter: RateLimiter, provider: str, rate: Rate, priority: str, seconds: float
) -> tuple[int, int, float]:
    """Ask again and again for ``seconds``, sleeping each wait: (granted, denied, elapsed)."""
    granted = denied = 0
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        wait = await limiter.acquire(provider, rate, priority)
        if wait == 0:
            granted += 1
        else:
            denied += 1
            await asyncio.sleep(wait)
    return granted, denied, time.monotonic() - started


async def test_a_burst_is_granted_at_once_then_the_next_waits_one_interval(
    limiter: RateLimiter,
) -> None:
    rate = Rate(per_second=100, burst=10)
    waits = await limiter.acquire_many([("sms", rate, "HIGH")] * 11)
    assert waits[:10] == [0.0] * 10
    assert waits[10] == pytest.approx(0.01, abs=1e-6)
    # Waiting what it was told is enough.
    wait = await limiter.acquire("sms", rate, "HIGH")
    assert 0 < wait <= 0.01
    await asyncio.sleep(wait)
    assert await limiter.acquire("sms", rate, Priority.HIGH) == 0.0


async def test_a_single_acquire_gets_the_burst_too(limiter: RateLimiter) -> None:
    rate = Rate(per_second=2, burst=3)
    waits = [await limiter.acquire("push", rate, "HIGH") for _ in range(4)]
    assert waits[:3] == [0.0] * 3
    assert 0.3 < waits[3] <= 0.5


@pytest.mark.parametrize(("priority", "share"), [("HIGH", 1.0), ("NORMAL", 0.8), ("LOW", 0.6)])
async def test_each_priority_alone_gets_at_most_its_share_of_the_rate(
    limiter: RateLimiter, priority: str, share: float
) -> None:
    rate = Rate(per_second=200, burst=10)
    granted, denied, elapsed = await hammer(limiter, "sms", rate, priority, 0.5)
    burst = max(1, share * rate.burst)
    assert granted <= share * rate.per_second * elapsed + burst + 1
    # Not starved either (a slow machine only lowers this).
    assert granted >= 0.6 * share * rate.per_second * 0.5
    assert denied > 0


async def test_high_is_granted_when_normal_and_low_have_filled_their_share(
    limiter: RateLimiter,
) -> None:
    rate = Rate(per_second=100, burst=10)  # NORMAL may fill 8 of the 10, LOW 6
    requests = [("sms", rate, "LOW")] * 7 + [("sms", rate, "NORMAL")] * 3
    requests += [("sms", rate, "HIGH")] * 3 + [("sms", rate, "LOW"), ("sms", rate, "NORMAL")]
    waits = await limiter.acquire_many(requests)
    priorities = [priority for _, _, priority in requests]
    granted = [(p, wait == 0) for p, wait in zip(priorities, waits, strict=True)]
    assert granted == [
        *[("LOW", True)] * 6,
        ("LOW", False),  # LOW's own burst is 6
        *[("NORMAL", True)] * 2,
        ("NORMAL", False),  # the total holds 8 now: the rest of the window is HIGH's
        *[("HIGH", True)] * 2,
        ("HIGH", False),  # the whole window is full
        ("LOW", False),
        ("NORMAL", False),
    ]
    assert waits[6] == pytest.approx(1 / 60, abs=1e-6)  # LOW's own interval
    assert waits[9] == pytest.approx(0.01, abs=1e-6)


async def test_high_is_never_refused_while_normal_and_low_saturate_the_total(
    limiter: RateLimiter,
) -> None:
    rate = Rate(per_second=200, burst=10)
    high_waits: list[float] = []

    async def high() -> None:
        started = time.monotonic()
        while time.monotonic() - started < 0.5:
            high_waits.append(await limiter.acquire("sms", rate, "HIGH"))
            await asyncio.sleep(0.02)

    others = asyncio.gather(
        hammer(limiter, "sms", rate, "NORMAL", 0.5), hammer(limiter, "sms", rate, "LOW", 0.5)
    )
    (normal, _, elapsed), (low, _, _) = (await asyncio.gather(others, high()))[0]
    assert len(high_waits) >= 10
    assert high_waits == [0.0] * len(high_waits)
    # Together they still never exceed the total, HIGH's grants included.
    assert normal + low + len(high_waits) <= rate.per_second * elapsed + rate.burst + 1


async def test_a_denied_request_consumes_nothing(limiter: RateLimiter, fake: Redis) -> None:
    # Slow enough that the milliseconds between the calls change no decision.
    rate = Rate(per_second=1, burst=10, low_share=0.5)
    assert await limiter.acquire_many([("sms", rate, "LOW")] * 5) == [0.0] * 5
    stored = {key: await fake.get(key) for key in await fake.keys("*")}
    # Fifty refusals at one instant: each is told the same wait, and nothing is written.
    refused = await limiter.acquire_many([("sms", rate, "LOW")] * 50)
    assert refused == [refused[0]] * 50
    assert refused[0] == pytest.approx(2.0, abs=0.1)  # one of LOW's intervals
    assert {key: await fake.get(key) for key in await fake.keys("*")} == stored
    # LOW's refusals took nothing from the total either: HIGH gets the other 5 of the burst.
    waits = await limiter.acquire_many([("sms", rate, "HIGH")] * 6)
    assert waits[:5] == [0.0] * 5
    assert waits[5] == pytest.approx(1.0, abs=0.1)


async def test_providers_are_independent_and_replies_keep_request_order(
    limiter: RateLimiter,
) -> None:
    fast, slow = Rate(per_second=1000, burst=3), Rate(per_second=1, burst=1)
    requests = [("email", fast, "HIGH"), ("sms", slow, "HIGH")] * 4
    waits = await limiter.acquire_many(requests)
    assert waits[0::2] == [0.0, 0.0, 0.0, pytest.approx(0.001, abs=1e-6)]
    assert waits[1::2] == [0.0, *[pytest.approx(1.0, abs=1e-6)] * 3]
    # A full provider does not slow another one down.
    assert await limiter.acquire("push", slow, "LOW") == 0.0


async def test_concurrent_acquires_share_calls_and_each_gets_its_own_answer(
    limiter: RateLimiter,
) -> None:
    rate = Rate(per_second=10, burst=5)
    waits = await asyncio.gather(*(limiter.acquire("sms", rate, "HIGH") for _ in range(8)))
    assert sorted(waits) == [0.0] * 5 + [pytest.approx(0.1, abs=0.01)] * 3


async def test_a_batch_longer_than_one_call_is_still_decided_in_order(
    fake: Redis, key_prefix: str
) -> None:
    limiter = RateLimiter(fake, KeySpace(key_prefix), chunk=4)
    rate = Rate(per_second=100, burst=6)
    waits = await limiter.acquire_many([("sms", rate, "HIGH")] * 10)
    assert [wait == 0 for wait in waits] == [True] * 6 + [False] * 4


async def test_buckets_expire_soon_after_they_stop_mattering(
    limiter: RateLimiter, fake: Redis, key_prefix: str
) -> None:
    rate = Rate(per_second=10, burst=4)
    await limiter.acquire_many([("sms", rate, "HIGH"), ("sms", rate, "NORMAL")])
    total = KeySpace(key_prefix).rate_bucket("sms")
    # The backlog is 2 intervals (200 ms) on the total, 1 of NORMAL's 125 ms on its bucket.
    assert 900 < await fake.pttl(total) <= 1200
    assert 900 < await fake.pttl(f"{total}:normal") <= 1125
    assert not await fake.exists(f"{total}:low")  # LOW never asked: nothing to remember


async def test_bad_priorities_and_rates_are_refused_before_anything_is_sent(
    limiter: RateLimiter,
) -> None:
    with pytest.raises(ValueError, match="unknown priority 'URGENT'"):
        await limiter.acquire("sms", Rate(per_second=1), "URGENT")
    with pytest.raises(ValueError, match="per_second"):
        Rate(per_second=0)
    with pytest.raises(ValueError, match="burst"):
        Rate(per_second=1, burst=0)
    with pytest.raises(ValueError, match="low_share"):
        Rate(per_second=1, low_share=1.5)
    assert await limiter.acquire_many([]) == []
