"""The advisor against a running service: ``clarion api`` and ``clarion worker`` as processes
on real Redis and PostgreSQL, driven into each state the runbook knows by the sandbox's
scripted failures, and the advice read where operators read it: ``GET /v1/ops/lag`` and
``clarion status``.

In order: work waiting with no worker (lag high: start a worker), a worker draining it
(stable), a provider failing transiently for 120 deliveries (retry storm), one failing for
good meanwhile (dead letters and retries), and once the retries have expired (their TTL is
20 s) the dead letter alone."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.operations.advisor import (
    DEAD_LETTERS_TEXT,
    DLQ_AND_RETRIES_TEXT,
    NO_WORKER_TEXT,
    RETRY_STORM_RETRIES,
    RETRY_STORM_TEXT,
    STABLE_TEXT,
)
from tests.conftest import REPO
from tests.e2e.api_service import API_KEY, running_api_process
from tests.e2e.processes.test_worker import worker_env, workers
from tests.e2e.service_support import CLARION, service_env
from tests.integration.delivery_support import catalog_text

pytestmark = pytest.mark.timeout(180)

AUTH = {"Authorization": f"Bearer {API_KEY}"}
SHIPPED_TTL = "ttl_seconds = 300 "
STORM = 120  # deliveries failing transiently at once: over RETRY_STORM_RETRIES


def catalog(path: Path) -> Path:
    """The shipped catalog with retries every few seconds, many attempts, OTPs living 20 s."""
    text = catalog_text(base=2.0, max_delay=4.0, attempts=50)
    assert SHIPPED_TTL in text, "clarion.toml changed: update this test"
    path.write_text(text.replace(SHIPPED_TTL, "ttl_seconds = 20 "))
    return path


def otps(tag: str, count: int, sandbox: dict[str, Any] | None = None) -> dict[str, Any]:
    data: dict[str, Any] = {"code": "1"}
    if sandbox:
        data["sandbox"] = {"SMS": sandbox}
    return {
        "notifications": [
            {"idempotency_key": f"{tag}-{n}", "type": "otp", "data": data,
             "recipient": {"id": f"u-{tag}-{n}", "phone": "+4915112345678"}}
            for n in range(count)
        ]
    }  # fmt: skip


def send(url: str, body: dict[str, Any]) -> None:
    response = httpx.post(f"{url}/v1/notifications/batch", json=body, headers=AUTH, timeout=10)
    assert response.status_code == 200, response.text
    assert {r["status_code"] for r in response.json()["results"]} == {202}


def lag(url: str) -> dict[str, Any]:
    response = httpx.get(f"{url}/v1/ops/lag", headers=AUTH, timeout=10)
    assert response.status_code == 200, response.text
    report: dict[str, Any] = response.json()
    return report


def wait_for_advice(
    url: str, problem: str, within: float, also: Callable[[dict[str, Any]], bool] = bool
) -> dict[str, Any]:
    """The lag report once its first hint is ``problem`` (and ``also`` holds)."""
    deadline = time.monotonic() + within
    while True:
        report = lag(url)
        if report["advice"][0]["problem"] == problem and also(report):
            return report
        if time.monotonic() > deadline:
            raise AssertionError(f"no {problem!r} advice in {within} s: {report['advice']}")
        time.sleep(0.2)


def status_output(prefix: str, catalog_path: Path) -> str:
    # The port is the API's, which `clarion status` does not use (it reads Redis).
    env = service_env(prefix, 8000, CLARION_CONFIG=str(catalog_path))
    done = subprocess.run(
        [*CLARION, "status", "--interval", "0.2"],
        env=env, cwd=REPO, capture_output=True, timeout=60, check=True,
    )  # fmt: skip
    return done.stdout.decode()


def test_the_advice_follows_the_service_through_each_state(key_prefix: str, tmp_path: Path) -> None:
    path = catalog(tmp_path / "clarion.toml")
    with running_api_process(key_prefix, CLARION_CONFIG=str(path)) as (url, _):
        # Work waits with no worker: HIGH's oldest entry passes 5 s.
        send(url, otps("waiting", 3))
        report = wait_for_advice(url, "lag high", within=20)
        [hint] = report["advice"]
        assert hint["text"] == NO_WORKER_TEXT
        assert hint["evidence"].startswith("HIGH: 3 waiting")
        assert report["workers"]["reporting"] == 0
        printed = status_output(key_prefix, path)
        assert "hint: lag high: HIGH: 3 waiting" in printed
        assert NO_WORKER_TEXT in printed

        with workers(worker_env(key_prefix, path), [0]):
            # The worker drains the work, and reports its heartbeat.
            report = wait_for_advice(
                url, "stable", within=30, also=lambda r: r["workers"]["reporting"] == 1
            )
            assert report["advice"][0]["text"] == STABLE_TEXT

            # A provider failing transiently for many deliveries: a retry storm.
            send(url, otps("storm", STORM, {"fail_transient": 1000}))
            report = wait_for_advice(url, "retry storm", within=30)
            assert [h["problem"] for h in report["advice"]] == ["retry storm"]
            assert report["advice"][0]["text"] == RETRY_STORM_TEXT
            retries = report["retries"]["by_priority"]["HIGH"]["count"]
            assert retries >= RETRY_STORM_RETRIES

            # One fails for good meanwhile: dead letters and retries at once come first.
            send(url, otps("refused", 1, {"fail_permanent": "number does not exist"}))
            report = wait_for_advice(url, "dead letters and retries", within=15)
            assert report["advice"][0]["text"] == DLQ_AND_RETRIES_TEXT
            assert report["dlq"]["open"] == 1
            printed = status_output(key_prefix, path)
            assert "hint: dead letters and retries: 1 open dead letters" in printed
            assert "add workers" not in printed

            # The retries expire with their TTL: the open dead letter alone remains.
            report = wait_for_advice(url, "dead letters", within=40)
            assert report["advice"] == [
                {"problem": "dead letters", "text": DEAD_LETTERS_TEXT, "evidence": "1 open"}
            ]
            assert report["retries"]["by_priority"]["HIGH"]["count"] == 0
