"""Throttles through ``clarion run`` (API, worker, projector, status webhooks) with real
Redis and PostgreSQL: a recipient capped at 3 OTPs an hour gets 3 of 10 at the sandbox, the
other 7 are SUPPRESSED ``throttled`` in the status API and their timelines say which
throttle; with ``defer`` the second of two arrives once the window allows it."""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from redis import Redis

from streams.core.keys import KeySpace
from tests.conftest import REPO, sync_test_redis, unlink_prefix
from tests.e2e.service_support import CLARION, Lines, service_env, wait_healthy
from tests.integration.delivery_support import catalog_text
from tests.pg import TEST_SERVER_URL, drop_database, throwaway_name, with_database
from tests.servers import free_port, wait_for_port

pytestmark = pytest.mark.timeout(180)

SHOP = {"Authorization": "Bearer shop-secret-key"}
OTP = 'priority = "HIGH"\nttl_seconds = 300'


def throttled_catalog(tmp_path: Path, throttle: str) -> Path:
    """The shipped catalog with quick retries and ``throttle`` on the OTP type."""
    text = catalog_text()
    assert OTP in text
    path = tmp_path / "clarion.toml"
    path.write_text(text.replace(OTP, f"{OTP}\nthrottle = {throttle}", 1))
    return path


@contextmanager
def clarion_run(key_prefix: str, catalog: Path) -> Iterator[str]:
    """``clarion run`` on its own database; its URL."""
    port = free_port()
    database = throwaway_name()
    env = service_env(
        key_prefix, port, CLARION_DATABASE_URL=with_database(TEST_SERVER_URL, database),
        CLARION_CONFIG=str(catalog),
    )  # fmt: skip
    process = subprocess.Popen(
        [*CLARION, "run", "--workers", "1"], env=env, cwd=REPO, stderr=subprocess.PIPE
    )
    assert process.stderr is not None
    logged = Lines(process.stderr)
    try:
        wait_for_port(port, timeout=30)
        wait_healthy(f"http://127.0.0.1:{port}")
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=45)
        logged.wait_closed()
        unlink_prefix(key_prefix)
        asyncio.run(drop_database(database))
        text = "\n".join(logged.lines)
        assert "Traceback" not in text, text[-3000:]
        assert "+4915112345678" not in text  # no address in clear in any log


def send_otps(url: str, count: int, tag: str) -> list[str]:
    ids = []
    for n in range(count):
        answer = httpx.post(
            f"{url}/v1/notifications",
            headers={**SHOP, "Idempotency-Key": f"{tag}-{n}"},
            json={"recipient": {"id": "u-1", "phone": "+4915112345678"}, "type": "otp",
                  "data": {"code": str(n)}},
        )  # fmt: skip
        assert answer.status_code == 202, answer.text
        ids.append(answer.json()["id"])
    return ids


def delivery_of(url: str, notification_id: str) -> dict[str, Any]:
    answer = httpx.get(f"{url}/v1/notifications/{notification_id}", headers=SHOP)
    assert answer.status_code == 200, answer.text
    [delivery] = answer.json()["deliveries"]
    return dict(delivery)


def wait_for(check: Any, within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline, f"{what} not reached within {within} s"
        time.sleep(0.2)


def sandbox_times(redis: Redis, keys: KeySpace) -> list[int]:
    return [int(entry_id.split(b"-")[0]) for entry_id, _ in redis.xrange(keys.sandbox_sent)]


def test_a_recipient_capped_at_three_an_hour_gets_three_of_ten(
    key_prefix: str, tmp_path: Path
) -> None:
    catalog = throttled_catalog(tmp_path, '{ limit = 3, per = "1h" }')
    keys, redis = KeySpace(key_prefix), sync_test_redis()
    with clarion_run(key_prefix, catalog) as url:
        ids = send_otps(url, 10, "cap")

        def all_ended() -> bool:
            return all(delivery_of(url, i)["status"] in {"SENT", "SUPPRESSED"} for i in ids)

        wait_for(all_ended, 60, "every delivery ended")
        time.sleep(1)  # anything more would reach the sandbox now
        deliveries = [delivery_of(url, i) for i in ids]
        assert Counter(d["status"] for d in deliveries) == {"SENT": 3, "SUPPRESSED": 7}
        assert {d["reason"] for d in deliveries if d["status"] == "SUPPRESSED"} == {"throttled"}
        assert len(sandbox_times(redis, keys)) == 3
        refused = next(i for i, d in zip(ids, deliveries, strict=True) if d["reason"])

        def projected() -> bool:
            page = httpx.get(f"{url}/dashboard/notifications/{refused}", headers=SHOP)
            return page.status_code == 200 and "DeliveryThrottled" in page.text

        wait_for(projected, 30, "the timeline showing the throttle")
    redis.close()


def test_a_deferred_otp_arrives_once_the_window_allows(key_prefix: str, tmp_path: Path) -> None:
    catalog = throttled_catalog(tmp_path, '{ limit = 1, per = "2s", action = "defer" }')
    keys, redis = KeySpace(key_prefix), sync_test_redis()
    with clarion_run(key_prefix, catalog) as url:
        ids = send_otps(url, 2, "defer")
        wait_for(lambda: len(sandbox_times(redis, keys)) == 2, 30, "both at the sandbox")
        first, second = sandbox_times(redis, keys)
        assert second - first >= 1900
        wait_for(
            lambda: [delivery_of(url, i)["status"] for i in ids] == ["SENT", "SENT"],
            30,
            "both SENT in the status API",
        )
    redis.close()
