"""The one-click unsubscribe link round trip, with real processes, Redis, PostgreSQL, an SMTP
relay and headless Chromium: a notification goes through the API and a delivery worker to
the relay; the List-Unsubscribe link is taken from the email as received, opened in Chromium
and its button pressed; the opt-out is recorded (a PreferenceChanged event with source
``unsubscribe_link``, the recipient's settings over the API) and the next notification of
that type is not emailed (SUPPRESSED, opted_out, in the read model too) while its other
channels and an OTP still go out. Nothing the service logs holds the token or the address."""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from streams.core import codec
from streams.core.events import PreferenceChanged
from streams.core.keys import KeySpace
from tests.conftest import REPO, sync_test_redis, unlink_prefix
from tests.e2e.api.test_dashboard import Browser, browser_paths, chromium_browser
from tests.e2e.service_support import CLARION, service_env, wait_healthy
from tests.peers.smtp import Received, SmtpPeer
from tests.pg import TEST_SERVER_URL, drop_database, throwaway_name, with_database
from tests.servers import free_port, wait_for_port

pytestmark = pytest.mark.timeout(180)

EMAIL = "eva.lindqvist@example.com"
SEND = {"Authorization": "Bearer shop-secret-key"}
PROFILES = {"Authorization": "Bearer profiles-secret-key"}
RECIPIENT = {"id": "user-77", "email": EMAIL, "push_tokens": ["fcm-token-of-eva"]}


def catalog_with_relay(path: Path, port: int) -> Path:
    """The shipped catalog with EMAIL going to an SMTP relay at ``port``."""
    text = (REPO / "clarion.toml").read_text()
    channel = '[channels.EMAIL]\nprovider = "sandbox"'
    assert channel in text, "clarion.toml changed: update this test"
    text = text.replace(channel, '[channels.EMAIL]\nprovider = "relay"')
    relay = (
        f'\n[providers.relay]\nkind = "smtp"\nhost = "127.0.0.1"\nport = {port}\n'
        'tls = "none"\nfrom = "Example Shop <no-reply@shop.example>"\n'
    )
    path.write_text(text + relay)
    return path


@contextmanager
def running_service(prefix: str, catalog: Path, log_path: Path) -> Iterator[tuple[str, str]]:
    """``clarion run`` (API, delivery worker, projector) with CLARION_PUBLIC_URL set to its own
    address; its base URL and read-model database URL. Stopped and cleaned up afterwards."""
    port = free_port()
    database = throwaway_name()
    database_url = with_database(TEST_SERVER_URL, database)
    base_url = f"http://127.0.0.1:{port}"
    env = service_env(
        prefix, port, CLARION_CONFIG=str(catalog), CLARION_DATABASE_URL=database_url,
        CLARION_API_KEYS="shop:shop-secret-key:send+read,profiles:profiles-secret-key:recipients",
        CLARION_PUBLIC_URL=base_url, CLARION_LOG_FORMAT="json", CLARION_LOG_LEVEL="INFO",
    )  # fmt: skip
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(
            [*CLARION, "run", "--workers", "1", "--delivery-workers", "1"],
            env=env, cwd=REPO, stdout=log_file, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            wait_for_port(port, timeout=20)
            wait_healthy(base_url)
            yield base_url, database_url
        finally:
            process.terminate()
            process.wait(timeout=45)
            unlink_prefix(prefix)
            asyncio.run(drop_database(database))


def eventually(check: Callable[[], Any], within: float = 30, what: str = "") -> Any:
    """Poll ``check`` until it returns something true; that value."""
    deadline = time.monotonic() + within
    while not (found := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {within} s: {what}")
        time.sleep(0.1)
    return found


def send(client: httpx.Client, key: str, body: dict[str, Any]) -> dict[str, Any]:
    answer = client.post("/v1/notifications", json=body, headers={**SEND, "Idempotency-Key": key})
    assert answer.status_code == 202, answer.text
    result: dict[str, Any] = answer.json()
    return result


def unsubscribe_in_chromium(browser: Browser, link: str, screenshots: Path) -> list[Path]:
    """What a recipient does: open the link, read what it is about, press the button."""
    browser.open(link)
    assert browser.text_of("#title") == "Unsubscribe from “Order confirmations”?"
    assert "Order confirmations by email" in browser.text_of("#what")
    shots = [browser.screenshot(screenshots / "unsubscribe.png")]
    browser.click(browser.find("#unsubscribe"))
    eventually(lambda: browser.text_of("#title") == "You are unsubscribed", 10, "confirmed")
    assert browser.url == link  # the form posted back to the link itself
    shots.append(browser.screenshot(screenshots / "unsubscribed.png"))
    return shots


def test_an_unsubscribe_link_round_trip_in_chromium(key_prefix: str, tmp_path: Path) -> None:
    browser_paths()  # fail before any work when Chromium is missing
    log_path = tmp_path / "service.log"
    with SmtpPeer() as relay:
        catalog = catalog_with_relay(tmp_path / "catalog.toml", relay.port)
        with (
            running_service(key_prefix, catalog, log_path) as (base_url, database_url),
            httpx.Client(base_url=base_url, timeout=10) as client,
        ):
            order = {"recipient": RECIPIENT, "type": "order_confirmed", "data": {"order_id": "A-1"}}
            send(client, "order-1", order)
            [email] = eventually(lambda: relay.to(EMAIL), what="the first email at the relay")
            link = email_link(email, base_url)

            with chromium_browser() as browser:
                shots = unsubscribe_in_chromium(browser, link, tmp_path)
            for shot in shots:
                assert shot.stat().st_size > 5_000, f"{shot} looks empty"

            assert_recorded(client, key_prefix)
            # A mail client's one-click POST of the same link: 200, nothing more recorded.
            one_click = client.post(
                link, content=b"List-Unsubscribe=One-Click",
                headers={"Content-Type": "application/x-www-form-urlencoded"},
            )  # fmt: skip
            assert one_click.status_code == 200
            assert_next_order_not_emailed(client, relay, order, database_url)
    logged = log_path.read_text()
    assert "Traceback" not in logged
    assert link.rpartition("/")[2] not in logged  # the token never reaches a log line
    assert EMAIL not in logged
    assert '"unsubscribe.recorded"' in logged


def email_link(email: Received, base_url: str) -> str:
    """The one-click link the email carries, checked to be ours."""
    assert email.header("List-Unsubscribe-Post") == "List-Unsubscribe=One-Click"
    header = email.header("List-Unsubscribe")
    assert header.startswith(f"<{base_url}/v1/unsubscribe/")
    assert header.endswith(">")
    return header[1:-1]


def assert_recorded(client: httpx.Client, key_prefix: str) -> None:
    """The opt-out is a PreferenceChanged event from the link, and in the recipient's settings."""
    redis = sync_test_redis()
    try:
        stream = KeySpace(key_prefix).home_of_recipient("user-77").events
        changes = [
            event
            for _, fields in redis.xrange(stream)
            for event in codec.decode_events(fields[b"e"])
            if isinstance(event, PreferenceChanged)
        ]
    finally:
        redis.close()
    assert [(c.recipient_id, c.source, c.settings_version) for c in changes] == [
        ("user-77", "unsubscribe_link", 1)
    ]
    settings = client.get("/v1/recipients/user-77/settings", headers=PROFILES)
    assert settings.status_code == 200
    assert settings.json()["preferences"] == [
        {"type": "order_confirmed", "channel": "EMAIL", "enabled": False}
    ]


def assert_next_order_not_emailed(
    client: httpx.Client, relay: SmtpPeer, order: dict[str, Any], database_url: str
) -> None:
    """The next order confirmation: no email, its push and in-app deliveries go out; an OTP by
    email still arrives, without a List-Unsubscribe (it cannot be switched off)."""
    answer = send(client, "order-2", order)
    by_channel = {d["channel"]: d for d in answer["deliveries"]}
    assert (by_channel["EMAIL"]["status"], by_channel["EMAIL"]["reason"]) == (
        "SUPPRESSED", "opted_out",
    )  # fmt: skip
    assert {by_channel["PUSH"]["status"], by_channel["IN_APP"]["status"]} == {"QUEUED"}
    otp = {"recipient": RECIPIENT, "type": "otp", "channels": ["EMAIL"], "data": {"code": "4242"}}
    send(client, "otp-1", otp)
    otp_email = eventually(
        lambda: [r for r in relay.to(EMAIL) if r.header("Subject") == "Your code"], what="the OTP"
    )[0]
    assert otp_email.header("List-Unsubscribe") == ""
    assert len(relay.to(EMAIL)) == 2  # the first order and the OTP: no second order email

    async def projected() -> dict[str, str]:
        connection = await asyncpg.connect(database_url)
        try:
            rows = await connection.fetch(
                "SELECT channel, status FROM delivery WHERE notification_id = $1::uuid",
                answer["id"],
            )
        finally:
            await connection.close()
        return {row["channel"]: row["status"] for row in rows}

    final = {"EMAIL": "SUPPRESSED", "PUSH": "SENT", "IN_APP": "SENT"}
    eventually(lambda: asyncio.run(projected()) == final, what=f"read model shows {final}")
