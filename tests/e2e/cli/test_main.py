"""The ``clarion`` command as a user runs it: real processes, real Redis (sending, sending
later and cancelling included)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from streams.core import codec
from streams.core.events import DeliveryQueued, NotificationAccepted
from streams.core.keys import KeySpace
from tests.conftest import REPO, sync_test_redis, unlink_prefix
from tests.e2e.service_support import CLARION, service_env, wait_healthy
from tests.pg import TEST_SERVER_URL, drop_database, throwaway_name, with_database
from tests.servers import free_port, redis_server, wait_for_port


@pytest.fixture
def service(key_prefix: str) -> Iterator[tuple[str, dict[str, str]]]:
    port = free_port()
    database = throwaway_name()  # the projector creates it
    env = service_env(
        key_prefix, port, CLARION_DATABASE_URL=with_database(TEST_SERVER_URL, database)
    )
    process = subprocess.Popen(
        [*CLARION, "run", "--workers", "2"], env=env, cwd=REPO, stderr=subprocess.PIPE
    )
    try:
        wait_for_port(port, timeout=20)
        wait_healthy(f"http://127.0.0.1:{port}")
        yield f"http://127.0.0.1:{port}", env
    finally:
        process.terminate()
        _, stderr = process.communicate(timeout=45)  # the supervisor kills after 30 s
        unlink_prefix(key_prefix)
        asyncio.run(drop_database(database))
        assert b"Traceback" not in stderr, stderr.decode()[-2000:]
        assert b"shop-secret-key" not in stderr


def clarion(url: str, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """Run a ``clarion`` command against the service at ``url`` with the test's API key."""
    return subprocess.run(
        [*CLARION, *args, "--url", url, "--api-key", "shop-secret-key"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def answer_of(run: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """The API's answer a ``clarion`` command printed after its status line."""
    found: dict[str, Any] = json.loads(run.stdout.split("\n", 1)[1])
    return found


def test_send_shows_up_in_the_events_stream(
    service: tuple[str, dict[str, str]], key_prefix: str
) -> None:
    url, env = service
    sent = clarion(
        url, env, "send", "--type", "otp", "--recipient", "user-1", "--phone",
        "+4915112345678", "--data", "code=424242", "--key", "login-1",
    )  # fmt: skip
    assert sent.returncode == 0, sent.stdout + sent.stderr
    assert "HTTP 202" in sent.stdout
    answer = answer_of(sent)
    redis = sync_test_redis()
    entries = redis.xrange(KeySpace(key_prefix).shard(0).events)
    redis.close()
    events = [e for _, fields in entries for e in codec.decode_events(fields[b"e"])]
    assert isinstance(events[0], NotificationAccepted)
    assert events[0].notification_id == answer["id"]
    assert isinstance(events[1], DeliveryQueued)
    assert events[1].channel == "SMS"


def test_concurrent_identical_posts_to_two_workers_make_one_notification(
    service: tuple[str, dict[str, str]], key_prefix: str
) -> None:
    url, _ = service
    body = {"recipient": {"id": "u", "phone": "+4915112345678"}, "type": "otp",
            "data": {"code": "1"}}  # fmt: skip
    headers = {"Authorization": "Bearer shop-secret-key", "Idempotency-Key": "twin"}

    async def fire() -> list[httpx.Response]:
        import asyncio  # noqa: PLC0415

        limits = httpx.Limits(max_connections=50)
        async with httpx.AsyncClient(base_url=url, limits=limits, timeout=20) as client:
            return await asyncio.gather(
                *(client.post("/v1/notifications", json=body, headers=headers) for _ in range(50))
            )

    import asyncio  # noqa: PLC0415

    responses = asyncio.run(fire())
    assert {r.status_code for r in responses} <= {202, 409}
    assert len({r.json()["id"] for r in responses if r.status_code == 202}) == 1
    redis = sync_test_redis()
    entries = redis.xrange(KeySpace(key_prefix).shard(0).events)
    redis.close()
    decoded = [e for _, fields in entries for e in codec.decode_events(fields[b"e"])]
    assert sum(isinstance(event, NotificationAccepted) for event in decoded) == 1


def run_expecting_failure(env: dict[str, str]) -> str:
    result = subprocess.run(
        [*CLARION, "run"], env=env, cwd=REPO, capture_output=True, text=True, timeout=30,
        check=False,
    )  # fmt: skip
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    return result.stderr


def test_bad_settings_stop_start_up_with_a_clear_message(key_prefix: str) -> None:
    env = service_env(key_prefix, free_port(), CLARION_SHARDS="many")
    assert "CLARION_SHARDS must be a whole number" in run_expecting_failure(env)
    env = service_env(key_prefix, free_port(), CLARION_API_KEYS="shop:hunter2-secret:write")
    message = run_expecting_failure(env)
    assert "CLARION_API_KEYS entry 1" in message
    assert "hunter2-secret" not in message


def test_broken_catalog_names_file_type_and_key(key_prefix: str, tmp_path: Path) -> None:
    broken = tmp_path / "broken.toml"
    text = (REPO / "clarion.toml").read_text().replace("ttl_seconds = 300", 'ttl_seconds = "5m"')
    broken.write_text(text)
    message = run_expecting_failure(
        service_env(key_prefix, free_port(), CLARION_CONFIG=str(broken))
    )
    assert "broken.toml" in message
    assert "types.otp.ttl_seconds" in message


def test_evicting_redis_refuses_start_up(key_prefix: str, tmp_path: Path) -> None:
    with redis_server(tmp_path, "--maxmemory-policy", "volatile-lru") as url:
        env = service_env(key_prefix, free_port(), CLARION_REDIS_URL=url)
        message = run_expecting_failure(env)
    assert "volatile-lru" in message
    assert "noeviction" in message


def test_run_refuses_quickly_when_redis_is_down(key_prefix: str) -> None:
    started = time.monotonic()
    env = service_env(key_prefix, free_port(), CLARION_REDIS_URL=f"redis://127.0.0.1:{free_port()}")
    assert "not reachable" in run_expecting_failure(env)
    assert time.monotonic() - started < 20


def test_a_sent_notification_can_be_followed_to_its_final_status(
    service: tuple[str, dict[str, str]],
) -> None:
    url, _ = service
    headers = {"Authorization": "Bearer shop-secret-key"}
    body = {"recipient": {"id": "u-7", "email": "u7@example.com"}, "type": "order_confirmed",
            "data": {"order_id": "A-7"}}  # fmt: skip
    accepted = httpx.post(
        f"{url}/v1/notifications", json=body, headers={**headers, "Idempotency-Key": "follow"}
    ).json()
    deadline = time.monotonic() + 20
    while True:
        answer = httpx.get(f"{url}/v1/notifications/{accepted['id']}", headers=headers)
        assert answer.status_code == 200  # never 404, projected or not
        statuses = {d["channel"]: d["status"] for d in answer.json()["deliveries"]}
        if statuses == {"EMAIL": "SENT", "PUSH": "SUPPRESSED", "IN_APP": "SENT"}:
            break
        assert time.monotonic() < deadline, statuses
        time.sleep(0.2)
    assert answer.json()["projection_lag_ms"] >= 0


def test_send_later_and_cancel_from_the_command_line(
    service: tuple[str, dict[str, str]],
) -> None:
    url, env = service
    order = ("--type", "order_confirmed", "--recipient", "u-9", "--email", "u9@example.com")
    later = clarion(
        url, env, "send", *order, "--data", "order_id=A-9", "--delay", "PT1H",
        "--cancellation-key", "order-9",
    )  # fmt: skip
    assert later.returncode == 0, later.stdout + later.stderr
    sent = answer_of(later)
    assert {d["status"] for d in sent["deliveries"]} >= {"SCHEDULED"}
    at = clarion(
        url, env, "send", *order, "--data", "order_id=A-10", "--send-at",
        "2099-01-01T08:00:00+09:00",
    )  # fmt: skip
    assert at.returncode == 1
    assert "HTTP 422" in at.stdout
    assert "send_at" in answer_of(at)["detail"]

    by_key = clarion(url, env, "cancel", "--key", "order-9")
    assert by_key.returncode == 0, by_key.stdout + by_key.stderr
    assert answer_of(by_key)["notifications"] == 1
    by_id = clarion(url, env, "cancel", sent["id"])  # again, by id: nothing left to cancel
    assert by_id.returncode == 0, by_id.stdout + by_id.stderr
    scheduled = [d for d in sent["deliveries"] if d["status"] == "SCHEDULED"]
    cancelled = {d["id"]: d["status"] for d in answer_of(by_id)["deliveries"]}
    assert {cancelled[d["id"]] for d in scheduled} == {"CANCELLED"}

    neither = clarion(url, env, "cancel")
    assert neither.returncode == 2
    assert "give a notification id or --key" in neither.stderr
    unknown = clarion(url, env, "cancel", "no/such id")
    assert unknown.returncode == 1
    assert "HTTP 404" in unknown.stdout
