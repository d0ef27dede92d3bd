"""The provider rate limiter against real Redis (and fakeredis, where a test takes ``redis``),
and one limit shared by two separate worker processes."""

from __future__ import annotations

import asyncio
import bisect
import json
import sys
import time

import pytest
from redis.asyncio import Redis

from streams.core.keys import KeySpace
from streams.delivery.rate_limiter import Rate, RateLimiter
from tests.conftest import REDIS_URL, REPO


async def test_a_burst_then_one_interval_of_wait(redis: Redis, key_prefix: str) -> None:
    limiter = RateLimiter(redis, KeySpace(key_prefix))
    rate = Rate(per_second=50, burst=5)
    waits = await limiter.acquire_many([("sms", rate, "HIGH")] * 6)
    assert waits == [0.0] * 5 + [pytest.approx(0.02, abs=1e-6)]
    wait = await limiter.acquire("sms", rate, "HIGH")
    assert 0 < wait <= 0.02
    await asyncio.sleep(wait)
    assert await limiter.acquire("sms", rate, "HIGH") == 0.0


async def test_the_top_of_the_burst_window_is_kept_for_high(redis: Redis, key_prefix: str) -> None:
    limiter = RateLimiter(redis, KeySpace(key_prefix))
    rate = Rate(per_second=1, burst=10, normal_share=0.7, low_share=0.4)
    requests = [("sms", rate, p) for p in ["LOW"] * 5 + ["NORMAL"] * 5 + ["HIGH"] * 4]
    waits = await limiter.acquire_many(requests)
    granted = [wait == 0 for wait in waits]
    # LOW's own burst is 4; NORMAL brings the total to 7 of 10; HIGH takes the last 3.
    assert granted == [True] * 4 + [False] + [True] * 3 + [False] * 2 + [True] * 3 + [False]
    assert waits[4] == pytest.approx(2.5, abs=0.05)  # LOW's interval at 0.4/s
    assert waits[8] == pytest.approx(1.0, abs=0.05)  # the total is beyond NORMAL's 7
    assert waits[13] == pytest.approx(1.0, abs=0.05)  # the total is full


async def test_refusals_change_nothing(redis: Redis, key_prefix: str) -> None:
    limiter = RateLimiter(redis, KeySpace(key_prefix))
    rate = Rate(per_second=1, burst=5)  # NORMAL's own burst: 4
    assert await limiter.acquire_many([("sms", rate, "NORMAL")] * 4) == [0.0] * 4
    bucket = KeySpace(key_prefix).rate_bucket("sms")
    before = [await redis.get(bucket), await redis.get(f"{bucket}:normal")]
    refused = await limiter.acquire_many([("sms", rate, "NORMAL")] * 20)
    assert refused == [refused[0]] * 20
    assert refused[0] > 0
    assert [await redis.get(bucket), await redis.get(f"{bucket}:normal")] == before


async def test_providers_do_not_share_a_limit(redis: Redis, key_prefix: str) -> None:
    limiter = RateLimiter(redis, KeySpace(key_prefix))
    rate = Rate(per_second=1, burst=2)
    requests = [(provider, rate, "HIGH") for provider in ["sms", "email", "push"] * 3]
    waits = await limiter.acquire_many(requests)
    assert [wait == 0 for wait in waits] == [True] * 6 + [False] * 3


async def test_idle_buckets_leave_nothing_behind(real_redis: Redis, key_prefix: str) -> None:
    limiter = RateLimiter(real_redis, KeySpace(key_prefix))
    rate = Rate(per_second=1000, burst=5)
    started = time.monotonic()
    await limiter.acquire_many([("sms", rate, p) for p in ("HIGH", "NORMAL", "LOW")])
    keys = [key async for key in real_redis.scan_iter(match=f"{key_prefix}:*")]
    ttls = [await real_redis.pttl(key) for key in keys]
    waited_ms = (time.monotonic() - started) * 1000
    # The backlogs are a few milliseconds; the keys go one second after. (A machine slow
    # enough to take most of that second before reading them may find some gone: -2.)
    assert all(ttl == -2 or 1000 - waited_ms - 50 < ttl <= 1005 for ttl in ttls), ttls
    if waited_ms < 900:
        assert len(keys) == 3
    await asyncio.sleep(1.1)
    assert [key async for key in real_redis.scan_iter(match=f"{key_prefix}:*")] == []


# One worker process: wait for a start time on stdin, then take HIGH sends through one
# provider as fast as the limit allows until the duration is over; print the grant times.
WORKER = """
import asyncio, json, sys, time
from redis.asyncio import Redis
from streams.core.connection import connect_cluster
from streams.core.keys import KeySpace
from streams.delivery.rate_limiter import Rate, RateLimiter

async def main(url, prefix, per_second, burst, duration):
    cluster = url.startswith("redis+cluster://")
    redis = connect_cluster(url) if cluster else Redis.from_url(url)
    limiter = RateLimiter(redis, KeySpace(prefix))
    rate = Rate(per_second=per_second, burst=burst)
    await redis.ping()
    print("ready", flush=True)
    start = float(await asyncio.to_thread(sys.stdin.readline))
    await asyncio.sleep(start - time.time())
    grants, denials = [], 0
    while time.time() < start + duration:
        wait = await limiter.acquire("shared", rate, "HIGH")
        if wait == 0:
            grants.append(time.time())
        else:
            denials += 1
            await asyncio.sleep(wait)
    await redis.aclose()
    print(json.dumps({"grants": grants, "denials": denials}), flush=True)

url, prefix, per_second, burst, duration = sys.argv[1:]
asyncio.run(main(url, prefix, float(per_second), int(burst), float(duration)))
"""


async def test_two_processes_share_one_limit(real_redis: Redis, key_prefix: str) -> None:
    per_second, burst, duration = 200, 10, 3.0
    args = [REDIS_URL, key_prefix, str(per_second), str(burst), str(duration)]
    workers = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            WORKER,
            *args,
            cwd=REPO,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        for _ in range(2)
    ]
    try:
        for worker in workers:
            assert worker.stdout is not None
            assert await asyncio.wait_for(worker.stdout.readline(), 30) == b"ready\n"
        start = time.time() + 0.2
        outputs = await asyncio.wait_for(
            asyncio.gather(*(w.communicate(f"{start!r}\n".encode()) for w in workers)),
            duration + 15,
        )
    finally:
        for worker in workers:
            if worker.returncode is None:
                worker.kill()
                await worker.wait()
    assert [worker.returncode for worker in workers] == [0, 0]
    reports = [json.loads(stdout) for stdout, _ in outputs]
    grants = sorted(t for report in reports for t in report["grants"])

    # Both processes really competed for the same limit.
    for report in reports:
        assert len(report["grants"]) > 0.2 * len(grants)
        assert report["denials"] > 0
    # No 1-second window (sliding by 100 ms) holds more than the rate allows plus the burst.
    windows = [start + step / 10 for step in range(int((duration - 1) * 10) + 1)]
    busiest = max(
        bisect.bisect_left(grants, begin + 1.0) - bisect.bisect_left(grants, begin)
        for begin in windows
    )
    assert busiest <= per_second * 1.05 + burst
    # And the limit was used: the run's total is the rate times the duration, plus the burst.
    expected = per_second * duration + burst
    assert abs(len(grants) - expected) <= 0.05 * per_second * duration
    split = [len(report["grants"]) for report in reports]
    print(f"two processes: {split} grants (expected {expected:.0f} in all), busiest 1 s {busiest}")
