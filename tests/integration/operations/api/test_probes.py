"""Liveness and readiness, ``GET /v1/ops/lag`` and ``GET /metrics`` against real Redis and the
real worker: a backlog as it builds and drains, and who may read it."""

from __future__ import annotations

import asyncio

import asyncpg
import httpx
from redis.asyncio import Redis

from app.api.app import create_app
from app.catalog import Catalog
from app.metrics import STATUS_WEBHOOKS
from app.operations.advisor import DLQ_AND_RETRIES_TEXT
from app.settings import Settings
from streams.core.consumer_groups import DELIVERY_GROUP, ensure_all_groups, ensure_group
from streams.core.keys import KeySpace
from streams.core.vocabulary import Priority
from streams.metrics.recorder import MetricsRecorder
from streams.status_webhooks.store import StatusWebhookStore
from tests.conftest import AUTH, http_client
from tests.integration.api_support import api, lag_report, otp, post, sample, scrape, stream_row
from tests.integration.delivery_support import fast_catalog, running_worker, wait_until
from tests.integration.metrics.test_backlog import redis_now_ms
from tests.integration.operations.test_advice import dead_letters, retries

SECRET = "whsec_c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0"


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


async def test_metrics_and_lag_need_a_read_key(
    real_redis: Redis, settings: Settings, catalog: Catalog
) -> None:
    async with http_client(create_app(settings, redis=real_redis, catalog=catalog)) as client:
        assert (await client.get("/metrics")).status_code == 401
        assert (await client.get("/v1/ops/lag")).status_code == 401
        assert (await client.get("/metrics", headers=AUTH)).status_code == 403
        assert (await client.get("/v1/ops/lag", headers=AUTH)).status_code == 403


async def test_liveness_and_readiness_need_no_key(
    real_redis: Redis, settings: Settings, catalog: Catalog, pool: asyncpg.Pool
) -> None:
    app = create_app(settings, redis=real_redis, catalog=catalog, db=pool)
    await ensure_all_groups(real_redis, KeySpace(settings.key_prefix).all_shards())
    async with http_client(app) as client:
        live = await client.get("/v1/ops/health/live")
        ready = await client.get("/v1/ops/health/ready")
        health = await client.get("/v1/ops/health")
    assert (live.status_code, live.json()) == (200, {"status": "ok"})
    assert ready.status_code == 200
    assert ready.json() == {
        "status": "ready",
        "checks": {"redis": "ok", "consumer_groups": "ok", "postgresql": "ok"},
    }
    assert health.json() == ready.json()  # health is readiness


async def test_readiness_is_503_naming_what_is_wrong(client: httpx.AsyncClient) -> None:
    """Health once answered 200 while the service could deliver nothing."""
    response = await client.get("/v1/ops/health")  # no read model here, and no groups yet
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "not ready"
    assert body["checks"]["postgresql"] == "unreachable: the read model cannot be queried"
    assert body["checks"]["consumer_groups"].startswith("missing, made again now: ")


async def test_status_webhooks_show_their_lag_outboxes_and_outcomes(
    real_redis: Redis, settings: Settings, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix)
    await StatusWebhookStore(real_redis, keys).put("orders", "https://a.example.com/s", SECRET)
    hooks = keys.status_webhooks("orders")
    await real_redis.xadd(hooks.outbox, {"d": "d1", "v": 2, "b": b"{}"})
    await real_redis.xadd(hooks.dlq, {"webhook_id": "d0.3"})
    recorder = MetricsRecorder(real_redis, keys)
    recorder.inc(STATUS_WEBHOOKS, ("orders", "sent"), 7)
    recorder.inc(STATUS_WEBHOOKS, ("orders", "dead_lettered"), 1)
    await recorder.flush()
    await real_redis.xadd(keys.shard(0).events, {"e": b"[]"})  # not read by any group yet
    async with api(real_redis, settings, fast_catalog()) as client:
        report = (await lag_report(client))["status_webhooks"]
        samples = await scrape(client)
    assert report["producers"] == {
        "orders": {"waiting": 1, "oldest_age_ms": report["producers"]["orders"]["oldest_age_ms"],
                   "dead_letters": 1, "sent": 7, "dead_lettered": 1},
    }  # fmt: skip
    assert report["lag_ms"] >= 0
    assert sample(samples, "clarion_status_webhook_outbox_size", producer="orders") == 1
    assert sample(samples, "clarion_status_webhook_dead_letters", producer="orders") == 1
    assert sample(samples, "clarion_status_webhooks_total", producer="orders", outcome="sent") == 7
    lag = {"stream": "events", "shard": "0", "group": "status-webhooks"}
    assert sample(samples, "clarion_stream_lag", **lag) == 1


async def test_lag_carries_the_advice_and_metrics_the_retry_gauges(
    real_redis: Redis, settings: Settings, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix)
    now = await redis_now_ms(real_redis)
    await retries(real_redis, keys, 3, now)  # NORMAL retries, accepted 20 s ago
    await dead_letters(real_redis, keys, 1)
    async with api(real_redis, settings, fast_catalog()) as client:
        report = await lag_report(client)
        samples = await scrape(client)
        schema = (await client.get("/schema/openapi.json")).json()
    assert report["advice"] == [
        {
            "problem": "dead letters and retries",
            "text": DLQ_AND_RETRIES_TEXT,
            "evidence": report["advice"][0]["evidence"],
        }
    ]
    assert report["advice"][0]["evidence"].startswith("1 open dead letters, 3 retries waiting")
    assert report["dlq"]["open"] == 1
    assert report["retries"]["by_priority"]["NORMAL"]["count"] == 3
    assert report["workers"] == {
        "reporting": 0,
        "cpu_share": 0.0,
        "provider_waits": {"rate_limited": 0, "bulkhead_full": 0, "circuit_open": 0},
    }
    assert sample(samples, "clarion_due_retries", priority="NORMAL") == 3
    assert sample(samples, "clarion_due_retries", priority="HIGH") == 0
    assert 20 <= sample(samples, "clarion_oldest_due_retry_age_seconds", priority="NORMAL") < 60
    assert sample(samples, "clarion_oldest_due_retry_age_seconds", priority="LOW") == 0
    # The OpenAPI schema documents the advice's fields.
    answer = schema["paths"]["/v1/ops/lag"]["get"]["responses"]["200"]["content"]
    report_schema = schema["components"]["schemas"][
        answer["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
    ]
    assert "advice" in report_schema["required"]
    advice_ref = report_schema["properties"]["advice"]["items"]["$ref"].rsplit("/", 1)[1]
    assert set(schema["components"]["schemas"][advice_ref]["properties"]) == {
        "problem", "text", "evidence",
    }  # fmt: skip
