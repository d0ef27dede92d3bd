"""Every HTTP request counted by method, route template and status class (and opt-outs
counted at ingest), read back through ``/metrics``."""

from __future__ import annotations

from redis.asyncio import Redis

from app.settings import Settings
from tests.conftest import PROFILES
from tests.integration.api_support import api, lag_report, post, sample, scrape
from tests.integration.delivery_support import fast_catalog, wait_until


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
        response = await client.put("/v1/recipients/user-9/preferences", json=off, headers=PROFILES)
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
