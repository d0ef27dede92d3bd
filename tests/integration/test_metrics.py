"""What the worker counts about deliveries, read back through ``/v1/ops/lag`` and ``/metrics``."""

from __future__ import annotations

from redis.asyncio import Redis

from app.settings import Settings
from streams.core.keys import KeySpace
from tests.integration.api_support import api, lag_report, otp, post, sample, scrape
from tests.integration.delivery_support import fast_catalog, running_worker, wait_until


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
