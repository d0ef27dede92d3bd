"""Status webhooks with real processes, real Redis and PostgreSQL: through ``clarion run`` a
receiver that fails for a while (503s, then answers that come too late) and then recovers
gets every final status exactly once per delivery and version, replays included, each
delivery's in order; and a ``clarion status-webhooks`` killed mid-run loses nothing."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import subprocess
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from redis import Redis

from streams.core import codec
from streams.core.events import AnyEvent
from streams.core.ids import new_id
from streams.core.keys import KeySpace
from tests.conftest import REPO, sync_test_redis, unlink_prefix
from tests.e2e.service_support import CLARION, Lines, service_env, wait_healthy
from tests.integration.delivery_support import catalog_text
from tests.integration.projection_support import accepted, delivered
from tests.peers.webhook import Answer, Receiver, serve
from tests.pg import TEST_SERVER_URL, drop_database, throwaway_name, with_database
from tests.servers import free_port, wait_for_port

pytestmark = pytest.mark.timeout(180)

SECRET = "whsec_" + base64.b64encode(b"clarion-e2e-status-hook-32-bytes").decode()
SHOP = {"Authorization": "Bearer shop-secret-key"}
HOOKS = """
[status_webhooks]
allow_http_hosts = ["127.0.0.1"]
allow_networks = ["127.0.0.0/8"]
timeout_seconds = 1
connect_timeout_seconds = 1
retry = { base_seconds = 0.2, max_seconds = 1 }
"""
DUE = {"DeliverySent", "DeliveryFailed", "DeliveryExpired", "DeliverySuppressed",
       "ProviderFeedbackReceived"}  # fmt: skip


def due_in(redis: Redis, keys: KeySpace) -> set[str]:
    """``<delivery id>.<version>`` of every final status and feedback in the events."""
    found = set()
    for _, fields in redis.xrange(keys.shard(0).events):
        events: list[AnyEvent] = codec.decode_events(fields[b"e"])
        for event in events:
            if type(event).__name__ in DUE:
                found.add(f"{event.delivery_id}.{event.version}")  # type: ignore[union-attr]
    return found


def in_order(receiver: Receiver) -> bool:
    """Whether each delivery's versions came in increasing order."""
    seen: dict[str, list[int]] = defaultdict(list)
    for key in receiver.deliveries:
        delivery, version = key.rsplit(".", 1)
        seen[delivery].append(int(version))
    return all(versions == sorted(versions) for versions in seen.values())


def wait_for(check: Any, within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline, f"{what} not reached within {within} s"
        time.sleep(0.2)


@contextmanager
def clarion_run(key_prefix: str, catalog: Path) -> Iterator[str]:
    """``clarion run`` (API, worker, projector, status-webhooks) on its own database."""
    port = free_port()
    database = throwaway_name()
    database_url = with_database(TEST_SERVER_URL, database)
    env = service_env(
        key_prefix, port, CLARION_DATABASE_URL=database_url, CLARION_CONFIG=str(catalog)
    )
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
        assert SECRET not in text


def test_a_receiver_that_fails_then_recovers_gets_every_final_status_once_per_version(
    key_prefix: str, tmp_path: Path
) -> None:
    catalog = tmp_path / "clarion.toml"
    catalog.write_text(catalog_text(base=0.05, max_delay=0.2) + HOOKS)
    receiver = Receiver(SECRET)
    # A while of failing: 503s, then answers that come after the time limit (503 too).
    receiver.script("/shop", *[Answer(503)] * 40, *[Answer(503, hang_seconds=1.5)] * 12)
    keys = KeySpace(key_prefix)
    redis = sync_test_redis()
    with serve(receiver) as served, clarion_run(key_prefix, catalog) as url:
        put = httpx.put(f"{url}/v1/status-webhook", headers=SHOP,
                        json={"url": served.url("/shop"), "secret": SECRET})  # fmt: skip
        assert put.status_code == 200, put.text
        time.sleep(2)  # the process rereads webhooks every second
        items = []
        for n in range(60):
            data: dict[str, Any] = {"order_id": f"A-{n}"}
            if n % 3 == 0:
                data["sandbox"] = {"EMAIL": {"fail_permanent": "no such mailbox"}}
            items.append({"idempotency_key": f"k-{n}", "type": "order_confirmed", "data": data,
                          "recipient": {"id": f"u-{n}", "email": f"u{n}@example.com"}})  # fmt: skip
        batch = httpx.post(f"{url}/v1/notifications/batch", headers=SHOP,
                           json={"notifications": items}, timeout=30)  # fmt: skip
        assert batch.status_code == 200, batch.text

        wait_for(lambda: redis.xlen(keys.shard(0).dlq) == 20, 60, "20 dead letters")
        replay = httpx.post(f"{url}/v1/dlq/replay", headers=SHOP, json={
            "limit": 100, "operator": "anna", "reason": "mailbox fixed",
        })  # fmt: skip
        assert replay.status_code == 200, replay.text
        assert len(replay.json()["replayed"]) == 20
        # They fail again: a second FAILED each, with a higher version.
        wait_for(lambda: redis.xlen(keys.shard(0).dlq) == 40, 60, "the replays failing again")
        expected = due_in(redis, keys)
        assert len(expected) == 180 + 20  # 3 deliveries each, and the replayed ones again
        wait_for(lambda: expected <= set(receiver.deliveries), 90, "every status told")
        time.sleep(1)  # anything more would come now
    redis.close()
    assert set(receiver.deliveries) == expected
    assert receiver.duplicates == 0
    assert receiver.unverified == 0
    assert len(receiver.attempts) > len(expected)  # it failed, and was retried
    assert in_order(receiver)


@contextmanager
def status_webhooks_process(env: dict[str, str]) -> Iterator[tuple[subprocess.Popen[bytes], Lines]]:
    """``clarion status-webhooks`` and what it logs; killed if still running at the end."""
    process = subprocess.Popen(
        [*CLARION, "status-webhooks"], env=env, cwd=REPO, stderr=subprocess.PIPE
    )
    assert process.stderr is not None
    logged = Lines(process.stderr)
    try:
        yield process, logged
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=30)
        logged.wait_closed()
        text = "\n".join(logged.lines)
        assert "Traceback" not in text, text[-3000:]


def test_a_process_killed_mid_run_loses_nothing(key_prefix: str, tmp_path: Path) -> None:
    catalog = tmp_path / "clarion.toml"
    catalog.write_text((REPO / "clarion.toml").read_text() + HOOKS + "lanes = 4\n")
    keys = KeySpace(key_prefix)
    redis = sync_test_redis()
    receiver = Receiver(SECRET)
    receiver.script("/shop", *[Answer(200, hang_seconds=0.01)] * 4000)
    at = datetime.now(UTC)
    expected = set()
    for _ in range(30):  # 30 entries of 50 notifications, as ingest and workers write them
        events: list[Any] = []
        for _ in range(50):
            nid, did = new_id(0), new_id(0)
            events += [accepted(nid, [did], at=at, producer="shop"),
                       *delivered(nid, did, "SENT", at=at)]  # fmt: skip
            expected.add(f"{did}.2")
        redis.xadd(keys.shard(0).events, {codec.EVENT_FIELD: codec.encode_events(events)})
    env = service_env(key_prefix, free_port(), CLARION_CONFIG=str(catalog),
                      CLARION_LOG_LEVEL="INFO")  # fmt: skip
    try:
        with serve(receiver) as served:
            hook = json.dumps({"url": served.url("/shop"), "secret": SECRET, "updated_ms": 1})
            redis.set(keys.status_webhooks("shop").config, hook)
            redis.sadd(keys.status_webhook_producers, "shop")
            with status_webhooks_process(env) as (first, _):
                wait_for(lambda: len(receiver.deliveries) >= 300, 60, "300 statuses")
                os.kill(first.pid, signal.SIGKILL)
            taken = len(receiver.deliveries)
            assert taken < len(expected)  # killed mid-run
            with status_webhooks_process(env) as (second, logged):
                wait_for(lambda: expected <= set(receiver.deliveries), 90, "every status")
                second.send_signal(signal.SIGTERM)
                assert second.wait(30) == 0  # a clean stop
            assert "status_webhooks.active" in logged.events()
            assert redis.exists(keys.status_webhook_lease) == 0  # handed back on the stop
    finally:
        for key in redis.scan_iter(match=f"{key_prefix}:*"):
            redis.unlink(key)
        redis.close()
    assert set(receiver.deliveries) == expected
    # At least once: only what was in flight or done but not yet deleted is sent twice.
    assert receiver.duplicates <= 50
