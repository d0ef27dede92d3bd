"""Metrics, GET /v1/ops/lag and the recorder, against real Redis and the real worker."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from redis.asyncio import Redis
from redis.exceptions import RedisError

from app.api.app import create_app
from app.catalog import Catalog
from app.metrics import OPT_OUTS
from app.settings import Settings
from streams.backlog import read_backlog
from streams.consumer_groups import DELIVERY_GROUP, ensure_group
from streams.keys import KeySpace
from streams.metrics_recorder import MetricsRecorder, read_counters
from streams.vocabulary import Priority
from tests.conftest import AUTH, ORDERS, VIEWER, http_client
from tests.integration.delivery_support import fast_catalog, running_worker, wait_until
from tests.integration.test_notifications_api import post


def otp(directives: dict[str, Any] | None = None) -> dict[str, Any]:
    data: dict[str, Any] = {"code": "1"}
    if directives:
        data["sandbox"] = {"SMS": directives}
    return {"recipient": {"id": "u-1", "phone": "+4915112345678"}, "type": "otp", "data": data}


@asynccontextmanager
async def api(
    redis: Redis, settings: Settings, catalog: Catalog
) -> AsyncIterator[httpx.AsyncClient]:
    """The API with its lifespan running, so its metrics are flushed to Redis."""
    app = create_app(settings, redis=redis, catalog=catalog)
    async with app.lifespan(), http_client(app) as client:
        yield client


async def lag_report(client: httpx.AsyncClient) -> dict[str, Any]:
    response = await client.get("/v1/ops/lag", headers=VIEWER)
    assert response.status_code == 200, response.text
    report: dict[str, Any] = response.json()
    return report


def stream_row(report: dict[str, Any], stream: str) -> dict[str, Any]:
    [row] = [r for r in report["streams"] if r["stream"] == stream and r["shard"] == 0]
    return row


async def scrape(client: httpx.AsyncClient) -> dict[tuple[str, frozenset[Any]], float]:
    """``/metrics`` parsed: each sample's value by name and labels."""
    response = await client.get("/metrics", headers=VIEWER)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def sample(samples: dict[tuple[str, frozenset[Any]], float], name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


async def test_a_backlog_builds_then_drains_when_a_worker_starts(
    real_redis: Redis, settings: Settings, key_prefix: str
) -> None:
    keys, catalog = KeySpace(key_prefix), fast_catalog()
    high = keys.shard(0).work(Priority.HIGH)
    async with api(real_redis, settings, catalog) as client:
        for n in range(20):
            assert (await post(client, otp(), key=f"k{n}")).status_code == 202
        await asyncio.sleep(0.05)
        # No worker has started: the group does not exist yet, everything is unread.
        row = stream_row(await lag_report(client), "work:high")
        assert (row["group"], row["length"], row["lag"], row["pending"]) == ("delivery", 20, 20, 0)
        assert row["oldest_unread_age_ms"] >= 50

        # A consumer reads five entries and stalls: they are pending, and age.
        await ensure_group(real_redis, high, DELIVERY_GROUP)
        await real_redis.xreadgroup(DELIVERY_GROUP, "stalled", {high: ">"}, count=5)
        await asyncio.sleep(0.05)
        report = await lag_report(client)
        row = stream_row(report, "work:high")
        assert (row["length"], row["lag"], row["pending"]) == (20, 15, 5)
        assert row["oldest_pending_age_ms"] >= 50
        assert report["projection_lag_ms"] >= 50  # no projector runs in this test
        samples = await scrape(client)
        labels = {"stream": "work:high", "shard": "0", "group": "delivery"}
        assert sample(samples, "clarion_stream_lag", **labels) == 15
        assert sample(samples, "clarion_stream_pending", **labels) == 5
        assert sample(samples, "clarion_stream_oldest_pending_age_seconds", **labels) >= 0.05

        # A worker sends the unread entries and takes over the stalled ones after the lease.
        async with running_worker(real_redis, keys, catalog):

            async def drained() -> bool:
                report = await lag_report(client)
                row = stream_row(report, "work:high")
                return (row["lag"], row["pending"], report["deliveries"]["sent"]) == (0, 0, 20)

            await wait_until(drained, within=15)
        row = stream_row(await lag_report(client), "work:high")
        assert (row["oldest_pending_age_ms"], row["oldest_unread_age_ms"]) == (0, 0)
        samples = await scrape(client)
        latency = {"channel": "SMS", "priority": "HIGH"}
        assert sample(samples, "clarion_delivery_latency_seconds_count", **latency) == 20
        # Accepted and sent within this test: every latency is below a minute.
        bucket = "clarion_delivery_latency_seconds_bucket"
        assert sample(samples, bucket, le="60.0", **latency) == 20
        assert sample(samples, "clarion_stream_lag", **labels) == 0


async def test_failures_and_attempts_are_counted(
    real_redis: Redis, settings: Settings, key_prefix: str
) -> None:
    keys, catalog = KeySpace(key_prefix), fast_catalog()
    async with api(real_redis, settings, catalog) as client:
        await post(client, otp({"fail_transient": 2}), key="flaky")
        await post(client, otp({"fail_permanent": "number does not exist"}), key="dead")
        async with running_worker(real_redis, keys, catalog):

            async def both_ended() -> bool:
                deliveries = (await lag_report(client))["deliveries"]
                return (deliveries["sent"], deliveries["failed"]) == (1, 1)

            await wait_until(both_ended, within=15)
        report = await lag_report(client)
        assert report["deliveries"]["failed_by_error_class"] == {"PERMANENT": 1}
        assert report["deliveries"]["attempt_failures"] == 3  # two transient, one permanent
        assert report["dlq"]["size"] == 1
        samples = await scrape(client)
        sent = {"channel": "SMS", "status": "SENT"}
        assert sample(samples, "clarion_delivery_attempts_bucket", le="2.0", **sent) == 0
        assert sample(samples, "clarion_delivery_attempts_bucket", le="3.0", **sent) == 1
        failed = {"channel": "SMS", "status": "FAILED"}
        assert sample(samples, "clarion_delivery_attempts_sum", **failed) == 1
        by_class = "clarion_delivery_attempt_failures_total"
        assert sample(samples, by_class, channel="SMS", error_class="TRANSIENT") == 2
        assert sample(samples, by_class, channel="SMS", error_class="PERMANENT") == 1
        failures = "clarion_delivery_failures_total"
        assert sample(samples, failures, channel="SMS", error_class="PERMANENT") == 1
        assert sample(samples, "clarion_dlq_size", shard="0") == 1


async def test_opt_outs_and_http_requests_are_counted(
    real_redis: Redis, settings: Settings, key_prefix: str
) -> None:
    marketing = {
        "recipient": {"id": "user-9", "email": "eva@example.com", "push_tokens": ["tok-9"]},
        "type": "marketing",
        "data": {"subject": "Sale", "body": "Everything must go"},
    }
    off = {"preferences": [{"type": "marketing", "channel": "EMAIL", "enabled": False}]}
    async with api(real_redis, settings, fast_catalog()) as client:
        response = await client.put(
            "/v1/recipients/user-9/preferences", content=json.dumps(off), headers=ORDERS
        )
        assert response.status_code == 200, response.text
        assert (await post(client, marketing, key="m1")).status_code == 202
        assert (await post(client, marketing, key="m1")).status_code == 202  # a replay
        assert (await post(client, {"type": "marketing"}, key="m2")).status_code == 422

        async def counted() -> bool:
            report = await lag_report(client)
            return bool(report["deliveries"]["opted_out_by_type"])

        await wait_until(counted, within=5)
        assert (await lag_report(client))["deliveries"]["opted_out_by_type"] == {"marketing": 1}
        samples = await scrape(client)
    requests = "clarion_http_request_duration_seconds_count"
    post_labels = {"method": "POST", "route": "/v1/notifications"}
    assert sample(samples, requests, status="2xx", **post_labels) == 2
    assert sample(samples, requests, status="4xx", **post_labels) == 1
    put_labels = {"method": "PUT", "route": "/v1/recipients/{recipient_id}/preferences"}
    assert sample(samples, requests, status="2xx", **put_labels) == 1
    assert sample(samples, "clarion_opt_outs_total", type="marketing") == 1


async def test_metrics_and_lag_need_a_read_key(
    real_redis: Redis, settings: Settings, catalog: Catalog
) -> None:
    async with http_client(create_app(settings, redis=real_redis, catalog=catalog)) as client:
        assert (await client.get("/metrics")).status_code == 401
        assert (await client.get("/v1/ops/lag")).status_code == 401
        assert (await client.get("/metrics", headers=AUTH)).status_code == 403
        assert (await client.get("/v1/ops/lag", headers=AUTH)).status_code == 403


async def test_lag_is_counted_when_redis_cannot_say(real_redis: Redis, key_prefix: str) -> None:
    keys = KeySpace(key_prefix)
    high = keys.shard(0).work(Priority.HIGH)
    await ensure_group(real_redis, high, DELIVERY_GROUP)
    ids = [await real_redis.xadd(high, {"w": b"x"}) for _ in range(5)]
    await real_redis.xreadgroup(DELIVERY_GROUP, "c", {high: ">"}, count=1)
    await real_redis.xdel(high, ids[2])  # a hole in the unread range: XINFO lag is nil
    [info] = await real_redis.xinfo_groups(high)
    assert info["lag"] is None
    backlog = await read_backlog(real_redis, keys)
    [row] = [g for g in backlog.groups if g.stream == "work:high"]
    assert (row.length, row.pending, row.lag) == (4, 1, 3)


async def test_the_recorder_keeps_its_counts_while_redis_is_away(
    real_redis: Redis, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix)
    unreachable = Redis.from_url("redis://127.0.0.1:1/0")  # nothing listens on port 1
    recorder = MetricsRecorder(unreachable, keys, interval_s=0.05)
    recorder.inc(OPT_OUTS, ("marketing",), 2)
    with pytest.raises((RedisError, OSError)):
        await recorder.flush()
    flusher = asyncio.create_task(recorder.run())
    try:
        await asyncio.sleep(0.2)  # several failed flushes: the loop keeps going
        assert not flusher.done()
        recorder.inc(OPT_OUTS, ("marketing",), 1)
        recorder.redis = real_redis  # Redis is back

        async def flushed() -> bool:
            counters = await read_counters(real_redis, keys, [OPT_OUTS])
            return counters[OPT_OUTS.name] == {("marketing",): 3.0}

        await wait_until(flushed, within=5)
    finally:
        flusher.cancel()
        await asyncio.gather(flusher, return_exceptions=True)
        await unreachable.aclose()
