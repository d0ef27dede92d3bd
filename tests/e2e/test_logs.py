"""Log hygiene of the real service: everything ``clarion run`` prints during a run with
failures, a bug, a bad API key and a DLQ replay is JSON, carries the ids of the delivery it is
about, and holds no contact address and no API key."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import REPO, unlink_prefix
from tests.e2e.service_support import CLARION, service_env, wait_healthy
from tests.pg import TEST_SERVER_URL, drop_database, throwaway_name, with_database
from tests.servers import free_port, wait_for_port

pytestmark = pytest.mark.timeout(120)

EMAIL = "anna.schmidt@example.com"
PHONE = "+4915112345678"
# Shaped like real ones: an APNs token (64 hex digits) and FCM registration tokens.
PUSH_TOKENS = [
    "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "dQw4w9WgXcQ:APA91bHun4MxP5egoKMwt2KZFBaFUH-1RYqx0Qe7Vr1qIvZl3pW5bLc7",
    "eXaMpLeToKeN:APA91bFcmTokenWithoutDirectivesSentToTheSandboxOk12345",
]
SEND_KEY = "shop-secret-key"
ADMIN_KEY = "ops-admin-secret-key"
WRONG_KEY = "not-a-valid-key-8f3e2a"
TERMINAL = {"SENT", "FAILED", "SUPPRESSED", "EXPIRED"}


def test_no_address_or_key_in_the_logs_and_ids_on_every_delivery_line(
    key_prefix: str, tmp_path: Path
) -> None:
    output = run_service_through_failures(key_prefix, tmp_path)
    for secret in [EMAIL, PHONE, *PUSH_TOKENS, SEND_KEY, ADMIN_KEY, WRONG_KEY]:
        assert secret not in output, f"{secret!r} appears in the logs"

    lines = [json.loads(line) for line in output.splitlines() if line.strip()]  # JSON only
    about_deliveries = [line for line in lines if line["event"].startswith("delivery.")]
    events = {line["event"] for line in about_deliveries}
    assert {"delivery.attempt_failed", "delivery.bug"} <= events  # the run logged failures
    for line in about_deliveries:
        assert line.get("delivery_id"), line
        assert line.get("notification_id"), line
    replayed = [line for line in lines if line["event"] == "dlq.delivery_replayed"]
    assert replayed
    assert all(line["delivery_id"] and line["notification_id"] for line in replayed)
    assert any("<email>" in line.get("error", "") for line in about_deliveries)  # masked


def run_service_through_failures(key_prefix: str, tmp_path: Path) -> str:
    """Run ``clarion run`` with JSON logs through failures, a bug, a bad key and a replay;
    everything it printed (stdout and stderr)."""
    port = free_port()
    database = throwaway_name()
    env = service_env(
        key_prefix,
        port,
        CLARION_DATABASE_URL=with_database(TEST_SERVER_URL, database),
        CLARION_API_KEYS=f"shop:{SEND_KEY}:send+read,ops:{ADMIN_KEY}:admin",
        CLARION_LOG_FORMAT="json",
        CLARION_LOG_LEVEL="INFO",
    )
    log_path = tmp_path / "service.log"
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(
            [*CLARION, "run", "--workers", "1"],
            env=env,
            cwd=REPO,
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_for_port(port, timeout=20)
            url = f"http://127.0.0.1:{port}"
            wait_healthy(url)
            exercise(url)
        finally:
            process.terminate()
            process.wait(timeout=45)  # the supervisor kills its children after 30 s
            unlink_prefix(key_prefix)
            asyncio.run(drop_database(database))
    return log_path.read_text()


def exercise(url: str) -> None:
    send = {"Authorization": f"Bearer {SEND_KEY}"}
    bodies: list[dict[str, Any]] = [
        {
            "recipient": {"id": "user-1", "email": EMAIL, "push_tokens": PUSH_TOKENS[:2]},
            "type": "order_confirmed",
            "data": {
                "order_id": "A-17",
                "sandbox": {
                    # A provider error that quotes the address: the log line must mask it.
                    "EMAIL": {"fail_permanent": f"mailbox {EMAIL} does not exist"},
                    "PUSH": {"invalid_token": True},
                },
            },
        },
        {
            "recipient": {"id": "user-2", "phone": PHONE},
            "type": "otp",
            "data": {"code": "424242", "sandbox": {"SMS": {"fail_transient": 1}}},
        },
        {
            "recipient": {"id": "user-3", "email": EMAIL, "push_tokens": PUSH_TOKENS[2:]},
            "type": "security_alert",
            "data": {"message": "new sign-in", "sandbox": {"PUSH": {"raise_bug": True}}},
        },
    ]
    with httpx.Client(base_url=url, timeout=10) as client:
        wrong = client.post(
            "/v1/notifications",
            json=bodies[0],
            headers={"Authorization": f"Bearer {WRONG_KEY}", "Idempotency-Key": "wrong"},
        )
        assert wrong.status_code == 401
        ids = []
        for n, body in enumerate(bodies):
            answer = client.post(
                "/v1/notifications", json=body, headers={**send, "Idempotency-Key": f"k-{n}"}
            )
            assert answer.status_code == 202, answer.text
            ids.append(answer.json()["id"])
        wait_all_ended(client, ids, send)
        replay = {"limit": 10, "operator": "anna", "reason": "log test", "channel": "EMAIL"}
        answer = client.post(
            "/v1/dlq/replay", json=replay, headers={"Authorization": f"Bearer {ADMIN_KEY}"}
        )
        assert answer.status_code == 200, answer.text
        assert answer.json()["replayed"]
        wait_all_ended(client, ids, send)


def wait_all_ended(client: httpx.Client, ids: list[str], headers: dict[str, str]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        statuses = [
            d["status"]
            for notification_id in ids
            for d in client.get(f"/v1/notifications/{notification_id}", headers=headers).json()[
                "deliveries"
            ]
        ]
        if set(statuses) <= TERMINAL:
            return
        time.sleep(0.2)
    raise AssertionError(f"deliveries did not end: {statuses}")
