"""The inbox end to end, with real processes (``clarion run``: API, delivery worker,
projector), Redis, PostgreSQL and headless Chromium driving the demo page: a notification
accepted through the API appears on the page within a second; reading it there updates the
count and, through the projector, the delivery's status (READ). Nothing logged holds a
token."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import REPO
from tests.e2e.api.test_dashboard import Browser, browser_paths, chromium_browser
from tests.e2e.api.test_unsubscribe import PROFILES, eventually, running_service, send

pytestmark = pytest.mark.timeout(180)

RECIPIENT = "user-88"


def order(order_id: str, recipient: str = RECIPIENT) -> dict[str, Any]:
    return {
        "recipient": {"id": recipient},
        "type": "order_confirmed",
        "data": {"order_id": order_id},
    }


def in_app_id(answer: dict[str, Any]) -> str:
    [delivery] = [d for d in answer["deliveries"] if d["channel"] == "IN_APP"]
    assert delivery["status"] == "QUEUED"
    return str(delivery["id"])


def token_for(client: httpx.Client, recipient: str = RECIPIENT) -> str:
    answer = client.post(f"/v1/recipients/{recipient}/inbox-tokens", json={}, headers=PROFILES)
    assert answer.status_code == 201, answer.text
    return str(answer.json()["token"])


def delivery_status(client: httpx.Client, notification_id: str, delivery_id: str) -> str:
    answer = client.get(
        f"/v1/notifications/{notification_id}", headers={"Authorization": "Bearer shop-secret-key"}
    )
    [delivery] = [d for d in answer.json()["deliveries"] if d["id"] == delivery_id]
    return str(delivery["status"])


def unread_badge(browser: Browser) -> str:
    return browser.text_of("#unread")


def test_a_message_appears_on_the_demo_page_live_and_is_read_there(
    key_prefix: str, tmp_path: Path
) -> None:
    browser_paths()  # fail before any work when Chromium is missing
    log_path = tmp_path / "service.log"
    with (
        running_service(key_prefix, REPO / "clarion.toml", log_path) as (base_url, _),
        httpx.Client(base_url=base_url, timeout=10) as client,
        chromium_browser() as browser,
    ):
        token = token_for(client)
        earlier = in_app_id(send(client, "order-1", order("A-1")))
        browser.open(f"{base_url}/inbox/demo#token={token}")
        eventually(lambda: browser.text_of("#live") == "live", 10, "the stream open")
        eventually(lambda: unread_badge(browser) == "1", 10, "the earlier message counted")

        answer = send(client, "order-2", order("A-2"))
        accepted = time.monotonic()
        delivery_id = in_app_id(answer)
        row = eventually(lambda: _row(browser, delivery_id), 5, "the new message on the page")
        arrived = time.monotonic() - accepted
        assert arrived < 1.0, f"the message took {arrived:.3f} s to appear"
        assert "Order A-2 is confirmed." in browser.text(row)
        assert unread_badge(browser) == "2"
        shot = browser.screenshot(tmp_path / "inbox.png")
        assert shot.stat().st_size > 5_000

        browser.click(browser.find(f"#m-{delivery_id} .toggle"))
        eventually(lambda: unread_badge(browser) == "1", 5, "the count after reading")
        assert browser.text_of(f"#m-{delivery_id} .toggle") == "Mark unread"
        eventually(
            lambda: delivery_status(client, answer["id"], delivery_id) == "READ", 30,
            "the delivery READ in the status API",
        )  # fmt: skip
        assert earlier != delivery_id
    logged = log_path.read_text()
    assert "Traceback" not in logged
    assert token not in logged


def _row(browser: Browser, delivery_id: str) -> str | None:
    found = browser.call(
        "POST", "/elements", {"using": "css selector", "value": f"#m-{delivery_id}"}
    )
    return str(next(iter(found[0].values()))) if found else None
