"""Delivery workers as real processes: crashes, graceful stops, shared rate limits, priority."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgspec
import pytest
from redis.asyncio import Redis

from app.ingest.fanout import Planner
from app.ingest.ingestor import Ingestor
from app.ingest.requests import NotificationRequest
from streams.core.keys import KeySpace
from streams.core.vocabulary import Priority
from tests.conftest import DIGEST, DIGEST_SECRET, REDIS_URL, REPO
from tests.integration.delivery_support import catalog_text, fast_catalog, sandbox_calls, wait_until

pytestmark = pytest.mark.timeout(120)


def worker_env(prefix: str, catalog_path: Path, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "CLARION_REDIS_URL": REDIS_URL,
        "CLARION_KEY_PREFIX": prefix,
        "CLARION_CONFIG": str(catalog_path),
        "CLARION_DIGEST_SECRET": DIGEST_SECRET.decode(),
        "CLARION_LOG_LEVEL": "WARNING",
        **extra,
    }


@contextmanager
def workers(env: dict[str, str], slots: list[int]) -> Iterator[list[subprocess.Popen[bytes]]]:
    processes = [
        subprocess.Popen(
            [sys.executable, "-m", "app.cli", "worker", "--slot", str(slot)],
            env=env,
            cwd=REPO,
            stderr=subprocess.PIPE,
        )
        for slot in slots
    ]
    try:
        yield processes
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
            _, stderr = process.communicate(timeout=30)
            assert b"Traceback" not in stderr, stderr.decode()[-3000:]


async def accept_many(
    redis: Redis, keys: KeySpace, catalog_path: Path, bodies: list[dict[str, Any]], tag: str
) -> list[str]:
    """Accept ``bodies``; the delivery ids."""
    from app.catalog import load_catalog  # noqa: PLC0415

    ingestor = Ingestor(redis, keys, Planner(load_catalog(catalog_path), DIGEST), 3600)
    ids: list[str] = []
    for start in range(0, len(bodies), 1000):
        entries = [
            (f"{tag}-{start + n}", msgspec.convert(body, NotificationRequest))
            for n, body in enumerate(bodies[start : start + 1000])
        ]
        for outcome in await ingestor.ingest_many("orders", entries):
            assert outcome.accepted
            answer = msgspec.json.decode(outcome.response)
            ids += [d["id"] for d in answer["deliveries"] if d["status"] == "QUEUED"]
    return ids


def otp(n: int, directives: dict[str, Any] | None = None) -> dict[str, Any]:
    data: dict[str, Any] = {"code": str(n)}
    if directives:
        data["sandbox"] = {"SMS": directives}
    return {"recipient": {"id": f"u-{n}", "phone": "+4915112345678"}, "type": "otp", "data": data}


async def statuses(redis: Redis, keys: KeySpace, ids: list[str]) -> Counter[str]:
    pipe = redis.pipeline(transaction=False)
    for delivery_id in ids:
        pipe.hget(keys.shard(0).delivery(delivery_id), "status")
    return Counter((s or b"QUEUED").decode() for s in await pipe.execute())


async def test_sigkill_with_200_in_flight_loses_and_duplicates_nothing(
    real_redis: Redis, key_prefix: str, tmp_path: Path
) -> None:
    keys = KeySpace(key_prefix)
    catalog_path = tmp_path / "catalog.toml"
    # A provider's time limit must end inside the (short) lease, or the worker refuses to start.
    catalog_path.write_text(catalog_text().replace("timeout_seconds = 10", "timeout_seconds = 2"))
    bodies = [otp(n, {"latency_ms": 1500}) for n in range(200)]
    ids = await accept_many(real_redis, keys, catalog_path, bodies, "kill")
    env = worker_env(key_prefix, catalog_path, CLARION_LANE_HIGH="256", CLARION_LEASE_MS="2500")
    with workers(env, [0]) as [first]:
        await asyncio.sleep(1.2)  # all 200 are in the provider's hands
        first.send_signal(signal.SIGKILL)
        first.wait()
    with workers(env, [1]):  # another consumer: it must reclaim what the first held

        async def all_sent() -> bool:
            return (await statuses(real_redis, keys, ids))["SENT"] == len(ids)

        await wait_until(all_sent, within=40)
    calls = await sandbox_calls(real_redis, keys)
    real_sends = Counter(
        c["delivery_id"] for c in calls if c["outcome"] == "sent" and c["duplicate"] == "0"
    )
    assert set(real_sends) == set(ids)
    assert set(real_sends.values()) == {1}  # the idempotency key stopped every second send


async def test_sigterm_finishes_what_is_in_flight(
    real_redis: Redis, key_prefix: str, tmp_path: Path
) -> None:
    keys = KeySpace(key_prefix)
    catalog_path = tmp_path / "catalog.toml"
    catalog_path.write_text(catalog_text())
    ids = await accept_many(
        real_redis, keys, catalog_path, [otp(n, {"latency_ms": 800}) for n in range(30)], "term"
    )
    env = worker_env(key_prefix, catalog_path)
    with workers(env, [0]) as [worker]:

        async def sending() -> bool:
            return (await statuses(real_redis, keys, ids))["SENDING"] > 0

        await wait_until(sending, within=20)  # the worker holds deliveries in flight
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=20) == 0
    assert (await statuses(real_redis, keys, ids))["SENT"] == 30
    pending = await real_redis.xpending(keys.shard(0).work(Priority.HIGH), "delivery")
    assert pending["pending"] == 0


async def test_the_rate_limit_holds_across_two_worker_processes(
    real_redis: Redis, key_prefix: str, tmp_path: Path
) -> None:
    rate, burst, seconds = 150, 5, 11
    keys = KeySpace(key_prefix)
    catalog_path = tmp_path / "catalog.toml"
    catalog_path.write_text(
        catalog_text(rate_limit=f"rate_limit = {{ per_second = {rate}, burst = {burst} }}")
    )
    ids = await accept_many(
        real_redis, keys, catalog_path, [otp(n) for n in range(rate * seconds + 300)], "rate"
    )
    env = worker_env(key_prefix, catalog_path)
    with workers(env, [0, 1]):
        await asyncio.sleep(seconds + 1)
    times = sorted(c["at_ms"] for c in await sandbox_calls(real_redis, keys))
    assert len(times) < len(ids)  # the limit, not the backlog, ended the run
    start = times[0]
    window = 10_000
    # Over any 10 s window the provider saw at most its rate (5 % slack) plus the burst.
    most = max(
        sum(1 for t in times if s <= t < s + window)
        for s in range(start, times[-1] - window + 1, 100)
    )
    assert most <= rate * 10 * 1.05 + burst, most
    assert most >= rate * 10 * 0.9, most  # and the two workers did use it


async def test_high_stays_fast_while_a_low_backlog_drains(
    real_redis: Redis, key_prefix: str, tmp_path: Path
) -> None:
    keys = KeySpace(key_prefix)
    catalog_path = tmp_path / "catalog.toml"
    catalog_path.write_text(catalog_text())
    flood = [
        {"recipient": {"id": f"m-{n}", "email": "m@example.com"}, "type": "marketing",
         "data": {"subject": "s", "body": "b"}, "channels": ["EMAIL"]}
        for n in range(100_000)
    ]  # fmt: skip
    await accept_many(real_redis, keys, catalog_path, flood, "flood")
    ingestor = Ingestor(real_redis, keys, Planner(fast_catalog(), DIGEST), 3600)
    env = worker_env(key_prefix, catalog_path)
    high_ids: dict[str, float] = {}
    with workers(env, [0, 1]):
        await asyncio.sleep(1.0)  # the workers are busy with the flood
        for n in range(100):
            request = msgspec.convert(otp(n), NotificationRequest)
            accepted_at = time.time() * 1000
            outcome = await ingestor.ingest("auth", f"high-{n}", request)
            high_ids[msgspec.json.decode(outcome.response)["deliveries"][0]["id"]] = accepted_at
            await asyncio.sleep(0.05)

        async def high_done() -> bool:
            calls = await real_redis.xlen(keys.sandbox_sent)
            return bool(calls) and (await statuses(real_redis, keys, list(high_ids)))["SENT"] == 100

        await wait_until(high_done, within=30)
        calls = {c["delivery_id"]: c["at_ms"] for c in await sandbox_calls(real_redis, keys)}
    latencies = sorted(calls[d] - at for d, at in high_ids.items())
    p99 = latencies[int(len(latencies) * 0.99) - 1]
    # The promise is "HIGH within a second, even at peak". Typically p50 is 3 ms and p99
    # under 50 ms (bench/pipeline.py measures it); with the suite's processes sharing two
    # slow cores, single samples of 100-330 ms were seen, with and without recent changes.
    assert p99 < 1000, f"HIGH p99 {p99:.0f} ms (max {latencies[-1]:.0f} ms)"
    assert latencies[len(latencies) // 2] < 100, f"HIGH p50 {latencies[len(latencies) // 2]} ms"
    # The flood was draining, and far from drained, while HIGH went through.
    sent_low = len(calls) - len(high_ids)
    assert 1000 < sent_low < 100_000, sent_low
