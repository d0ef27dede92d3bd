"""Sending later and cancelling against a running ``clarion run`` (API, worker, projector)
with the sandbox provider, as a producer uses them:

- a notification with ``send_at`` 3 s ahead is sent between 3 and 4 s later;
- one sent with a 1 h delay and cancelled after 1 s never reaches the sandbox, and the
  status API shows it CANCELLED with who cancelled it;
- 10,000 notifications pending under one cancellation key are all cancelled by one call in
  under 2 s, and the ones already sent are reported as sent, not cancelled;
- a recipient who opts out between the request and the send time gets nothing.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from streams.core.keys import KeySpace
from tests.conftest import REPO, sync_test_redis, unlink_prefix
from tests.e2e.service_support import CLARION, service_env, wait_healthy
from tests.integration.delivery_support import catalog_text
from tests.pg import TEST_SERVER_URL, drop_database, throwaway_name, with_database
from tests.servers import free_port, wait_for_port

pytestmark = pytest.mark.timeout(300)

SHOP = {"Authorization": "Bearer shop-secret-key"}
PROFILES = {"Authorization": "Bearer profiles-secret-key"}
KEYS = "shop:shop-secret-key:send+read,profiles:profiles-secret-key:recipients"


@dataclass(frozen=True)
class Service:
    client: httpx.Client
    keys: KeySpace

    def send(self, body: dict[str, Any], key: str | None = None) -> dict[str, Any]:
        headers = {**SHOP, "Idempotency-Key": key or uuid.uuid4().hex}
        answer = self.client.post("/v1/notifications", json=body, headers=headers)
        assert answer.status_code == 202, answer.text
        accepted: dict[str, Any] = answer.json()
        return accepted

    def status(self, notification_id: str) -> dict[str, Any]:
        answer = self.client.get(f"/v1/notifications/{notification_id}", headers=SHOP)
        assert answer.status_code == 200, answer.text
        found: dict[str, Any] = answer.json()
        return found

    def sent(self) -> dict[str, int]:
        """The sandbox's sends: delivery id -> when (ms)."""
        with sync_test_redis() as redis:
            entries: Any = redis.xrange(self.keys.sandbox_sent)
        return {
            fields[b"delivery_id"].decode(): int(entry_id.split(b"-")[0])
            for entry_id, fields in entries
            if fields[b"outcome"] == b"sent"
        }


def email(recipient: str, **extra: Any) -> dict[str, Any]:
    return {
        "recipient": {"id": recipient, "email": f"{recipient}@example.com"},
        "type": "order_confirmed",
        "channels": ["EMAIL"],
        "data": {"order_id": "A-1"},
        **extra,
    }


def eventually(check: Callable[[], Any], within: float = 30, what: str = "") -> Any:
    deadline = time.monotonic() + within
    while not (found := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {within} s: {what}")
        time.sleep(0.1)
    return found


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    catalog = tmp_path_factory.mktemp("catalog") / "clarion.toml"
    catalog.write_text(catalog_text())
    prefix = f"later-{uuid.uuid4().hex[:8]}"
    database = throwaway_name()
    port = free_port()
    env = service_env(
        prefix, port, CLARION_CONFIG=str(catalog), CLARION_API_KEYS=KEYS,
        CLARION_DATABASE_URL=with_database(TEST_SERVER_URL, database),
    )  # fmt: skip
    log = tmp_path_factory.mktemp("log") / "service.log"
    with log.open("wb") as log_file:
        process = subprocess.Popen(
            [*CLARION, "run", "--workers", "1", "--delivery-workers", "1"],
            env=env, cwd=REPO, stdout=log_file, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            base_url = f"http://127.0.0.1:{port}"
            wait_for_port(port, timeout=20)
            wait_healthy(base_url)
            with httpx.Client(base_url=base_url, timeout=30) as client:
                yield Service(client, KeySpace(prefix))
        finally:
            process.terminate()
            process.wait(timeout=45)
            unlink_prefix(prefix)
            asyncio.run(drop_database(database))
    assert "Traceback" not in log.read_text(errors="replace")


def test_send_at_three_seconds_ahead_is_sent_three_to_four_seconds_later(
    service: Service,
) -> None:
    send_at = datetime.now(UTC) + timedelta(seconds=3)
    accepted = service.send(email("u-at", send_at=send_at.isoformat()))
    [delivery] = accepted["deliveries"]
    assert (delivery["status"], delivery["reason"]) == ("SCHEDULED", "scheduled")
    sent = eventually(lambda: service.sent().get(delivery["id"]), within=10, what="sent")
    late_ms = sent - int(send_at.timestamp() * 1000)
    assert 0 <= late_ms < 1000, late_ms
    timeline = eventually(
        lambda: (s := service.status(accepted["id"]))["deliveries"][0]["status"] == "SENT" and s,
        what="projected SENT",
    )
    assert timeline["deliveries"][0]["attempts"] == 1


def test_a_one_hour_delay_cancelled_after_a_second_never_goes(service: Service) -> None:
    accepted = service.send(email("u-delay", delay="PT1H"))
    [delivery] = accepted["deliveries"]
    time.sleep(1)
    answer = service.client.post(f"/v1/notifications/{accepted['id']}/cancel", headers=SHOP)
    assert answer.status_code == 200, answer.text
    assert answer.json()["deliveries"] == [
        {"id": delivery["id"], "channel": "EMAIL", "status": "CANCELLED"}
    ]
    shown = eventually(
        lambda: (
            (d := service.status(accepted["id"])["deliveries"][0])["status"] == "CANCELLED" and d
        ),
        what="projected CANCELLED",
    )
    assert shown["reason"] == "notification cancelled by shop"
    with sync_test_redis() as redis:
        assert redis.zcard(service.keys.shard(0).delayed) == 0 or all(
            delivery["id"].encode() not in member
            for member in redis.zrange(service.keys.shard(0).delayed, 0, -1)
        )
    assert delivery["id"] not in service.sent()


def test_ten_thousand_pending_under_one_key_are_cancelled_in_under_two_seconds(
    service: Service,
) -> None:
    key = f"order-{uuid.uuid4().hex[:6]}"
    # Five go at once and are sent before the cancellation: reported as sent.
    early = [service.send(email(f"u-early-{i}", cancellation_key=key)) for i in range(5)]
    early_ids = {a["deliveries"][0]["id"] for a in early}
    eventually(lambda: early_ids <= service.sent().keys(), what="the early ones sent")
    pending: list[str] = []
    for batch in range(10):
        items = [
            {**email(f"u-{batch}-{i}", delay=3600, cancellation_key=key),
             "idempotency_key": f"{key}-{batch}-{i}"}
            for i in range(1000)
        ]  # fmt: skip
        answer = service.client.post(
            "/v1/notifications/batch", json={"notifications": items}, headers=SHOP
        )
        assert answer.status_code == 200, answer.text
        for result in answer.json()["results"]:
            assert result["status_code"] == 202, result
            pending.append(result["id"])
    started = time.monotonic()
    answer = service.client.post("/v1/cancellations", json={"key": key}, headers=SHOP)
    took = time.monotonic() - started
    assert answer.status_code == 200, answer.text
    assert answer.json() == {
        "key": key, "notifications": 10_005, "cancelled": 10_000, "sent": 5, "sending": 0,
        "ended": 0,
    }  # fmt: skip
    assert took < 2.0, f"{took:.2f} s"
    with sync_test_redis() as redis:
        assert redis.zcard(service.keys.shard(0).delayed) == 0
    for notification_id in pending[::1000]:  # a sample, through the status API (projected)
        eventually(
            lambda nid=notification_id: (
                [d["status"] for d in service.status(nid)["deliveries"]] == ["CANCELLED"]
            ),
            what="projected CANCELLED",
        )
    # Again: nothing pending is left under the key.
    again = service.client.post("/v1/cancellations", json={"key": key}, headers=SHOP)
    assert again.json()["notifications"] == 0


def test_a_recipient_who_opts_out_before_the_send_time_gets_nothing(service: Service) -> None:
    accepted = service.send(email("u-optout", delay=2))
    [delivery] = accepted["deliveries"]
    off = {"preferences": [{"type": "order_confirmed", "channel": "EMAIL", "enabled": False}]}
    answer = service.client.put("/v1/recipients/u-optout/preferences", json=off, headers=PROFILES)
    assert answer.status_code == 200, answer.text
    shown = eventually(
        lambda: (
            (d := service.status(accepted["id"])["deliveries"][0])["status"] == "SUPPRESSED" and d
        ),
        within=15,
        what="suppressed when due",
    )
    assert shown["reason"] == "opted_out"
    assert delivery["id"] not in service.sent()
