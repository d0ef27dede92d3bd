"""A provider's circuit breaker in the running worker, against real Redis: failing sends
open it, deliveries then wait without spending attempts, one probe closes it again, and
the status API shows it throughout."""

from __future__ import annotations

from typing import Any

from redis.asyncio import Redis

from app.settings import Settings
from streams.core.events import DeliveryDeferred
from streams.core.keys import KeySpace
from tests.conftest import stream_events
from tests.integration.api_support import api, lag_report, sample, scrape
from tests.integration.delivery_support import (
    accept,
    fast_catalog,
    otp,
    running_worker,
    sandbox_calls,
    state,
    wait_until,
)

# The sandbox with its breaker on: 6 calls, half failing, open it for 0.6 s.
BREAKER = "circuit = { enabled = true, min_calls = 6, failure_share = 0.5, open_seconds = 0.6 }"


async def test_failing_sends_open_the_circuit_and_a_probe_closes_it(
    real_redis: Redis, settings: Settings, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix)
    # Retries come after the first report, so they find the circuit open.
    catalog = fast_catalog(rate_limit=BREAKER, attempts=6, base=0.4, max_delay=0.8)
    accepted: list[dict[str, Any]] = []
    seen: set[str] = set()
    async with (
        api(real_redis, settings, catalog) as client,
        running_worker(real_redis, keys, catalog),
    ):
        for n in range(10):  # every first and second attempt fails TRANSIENT
            body = otp(str(n), {"fail_transient": 2})
            accepted.append(await accept(real_redis, keys, catalog, body, f"k{n}"))

        async def all_sent() -> bool:
            seen.add(str((await lag_report(client))["circuits"]["sandbox"]["state"]))
            states = [await state(real_redis, keys, a["deliveries"][0]["id"]) for a in accepted]
            return all(s.get("status") == "SENT" for s in states)

        await wait_until(all_sent, within=20)
        report = await lag_report(client)
        samples = await scrape(client)
    assert "open" in seen  # the status API showed it open while deliveries waited
    circuit = report["circuits"]["sandbox"]
    # Second attempts fail too, so it may open more than once before it stays closed.
    assert circuit["state"] == "closed"
    assert circuit["opened"] >= 1
    assert sample(samples, "clarion_provider_circuit_state", provider="sandbox") == 0
    events = await stream_events(real_redis, keys.shard(0).events)
    waits = [e for e in events if isinstance(e, DeliveryDeferred) and e.reason == "circuit_open"]
    assert waits, "no delivery waited for the open circuit"
    # Waiting spends no attempt: each delivery made exactly its 3 (2 failed, 1 sent).
    for answer in accepted:
        delivery = await state(real_redis, keys, answer["deliveries"][0]["id"])
        assert delivery["attempts"] == "3"
    calls = await sandbox_calls(real_redis, keys)
    assert len(calls) == 30
