"""What the worker counts about deliveries, read back through ``/v1/ops/lag`` and ``/metrics``:
sends, failures, attempts, sends after a retry, open dead letters by class, duplicates
skipped at ingest and by the worker, and deliveries a recipient's throttle refused."""

from __future__ import annotations

from redis.asyncio import Redis

from app.catalog import parse_catalog
from app.settings import Settings
from streams.core.keys import KeySpace
from streams.core.vocabulary import Priority
from tests.conftest import ORDERS
from tests.integration.api_support import api, lag_report, otp, post, sample, scrape
from tests.integration.delivery_support import (
    catalog_text,
    fast_catalog,
    running_worker,
    wait_until,
)

THROTTLED = "clarion_throttled_total"


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


async def test_sends_after_a_retry_open_dead_letters_and_replayed_requests_are_series(
    real_redis: Redis, settings: Settings, key_prefix: str
) -> None:
    keys, catalog = KeySpace(key_prefix), fast_catalog()
    async with api(real_redis, settings, catalog) as client:
        assert (await post(client, otp({"fail_transient": 1}), key="flaky")).status_code == 202
        assert (await post(client, otp(), key="at-once")).status_code == 202
        dead = otp({"fail_permanent": "number does not exist"})
        assert (await post(client, dead, key="dead")).status_code == 202
        replayed = await post(client, otp({"fail_transient": 1}), key="flaky")
        assert replayed.headers["Idempotent-Replayed"] == "true"
        async with running_worker(real_redis, keys, catalog):

            async def ended() -> bool:
                deliveries = (await lag_report(client))["deliveries"]
                return (deliveries["sent"], deliveries["failed"]) == (2, 1) and bool(
                    deliveries["duplicates_skipped_by_layer"]  # the API flushes once a second
                )

            await wait_until(ended, within=15)
        samples = await scrape(client)
        # One of the two sent took a second attempt: its share is 1 / 2.
        assert sample(samples, "clarion_sent_after_retry_total", channel="SMS") == 1
        sent = {"channel": "SMS", "status": "SENT"}
        assert sample(samples, "clarion_delivery_attempts_count", **sent) == 2
        assert sample(samples, "clarion_duplicates_skipped_total", layer="ingest") == 1
        open_letters = "clarion_dead_letters_open"
        assert sample(samples, open_letters, error_class="PERMANENT") == 1
        assert (open_letters, frozenset({("error_class", "POISON")})) in samples  # 0, shown
        assert sample(samples, open_letters, error_class="POISON") == 0
        assert sample(samples, "clarion_dead_letters_open_truncated") == 0
        deliveries = (await lag_report(client))["deliveries"]
        assert deliveries["sent_after_retry"] == 1
        assert deliveries["dead_letters_open_by_error_class"] == {"PERMANENT": 1}
        assert deliveries["duplicates_skipped_by_layer"] == {"ingest": 1}
        # A replayed dead letter is no longer open (though still in the stream).
        body = {"limit": 10, "operator": "anna", "reason": "number fixed"}
        assert (await client.post("/v1/dlq/replay", json=body, headers=ORDERS)).status_code == 200
        samples = await scrape(client)
        assert sample(samples, open_letters, error_class="PERMANENT") == 0
        assert sample(samples, "clarion_dlq_size", shard="0") == 1


async def test_a_work_item_of_a_delivery_that_ended_is_a_duplicate_the_worker_skips(
    real_redis: Redis, settings: Settings, key_prefix: str
) -> None:
    keys, catalog = KeySpace(key_prefix), fast_catalog()
    stream = keys.shard(0).work(Priority.HIGH)
    async with api(real_redis, settings, catalog) as client:
        assert (await post(client, otp(), key="once")).status_code == 202
        [(_, work_fields)] = await real_redis.xrange(stream)
        async with running_worker(real_redis, keys, catalog):

            async def sent() -> bool:
                return (await lag_report(client))["deliveries"]["sent"] == 1

            await wait_until(sent)
            # The same work item again, as a worker stopped mid-step and taken over leaves it.
            await real_redis.xadd(stream, work_fields)

            async def skipped() -> bool:
                return await real_redis.xlen(stream) == 0

            await wait_until(skipped)
        samples = await scrape(client)
    assert sample(samples, "clarion_duplicates_skipped_total", layer="worker") == 1
    assert sample(samples, "clarion_delivery_attempts_count", channel="SMS", status="SENT") == 1


async def test_deliveries_a_throttle_refused_are_counted_by_type_and_action(
    real_redis: Redis, settings: Settings, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix)
    marker = 'priority = "HIGH"\nttl_seconds = 300'
    text = catalog_text().replace(marker, f'{marker}\nthrottle = {{ limit = 1, per = "1h" }}', 1)
    catalog = parse_catalog(text, "throttled.toml")
    async with api(real_redis, settings, catalog) as client:
        for n in range(3):
            assert (await post(client, otp(), key=f"k{n}")).status_code == 202
        async with running_worker(real_redis, keys, catalog):

            async def counted() -> bool:
                samples = await scrape(client)
                return sample(samples, THROTTLED, type="otp", action="suppress") == 2

            await wait_until(counted, within=15)
        samples = await scrape(client)
        assert sample(samples, THROTTLED, type="otp", action="defer") == 0
        reasons = {"channel": "SMS", "reason": "throttled"}
        assert sample(samples, "clarion_suppressed_deliveries_total", **reasons) == 2
