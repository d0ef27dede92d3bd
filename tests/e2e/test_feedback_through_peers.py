"""Provider feedback end to end with real processes: ``clarion run`` sends SMS through the
local Twilio API and email through the local SendGrid API; the peers call back as the
providers do (Twilio's signed status callbacks to the StatusCallback URL Clarion gave,
SendGrid's signed Event Webhook), and Clarion shows each delivery DELIVERED, or FAILED with
the provider's reason (undelivered, bounced), and suppresses the dead address: the next
notification to it is SUPPRESSED without a call to the provider."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import REPO
from tests.e2e.api.test_unsubscribe import eventually, running_service
from tests.peers import sendgrid, twilio
from tests.peers.serving import serve

pytestmark = pytest.mark.timeout(120)

SEND = {"Authorization": "Bearer shop-secret-key"}
DEAD_NUMBER, BOUNCING = "+4915199990000", "nobody@bounce.example"


def catalog(path: Path, twilio_url: str, sendgrid_url: str, verification_key: str) -> Path:
    """The shipped catalog with SMS through Twilio and EMAIL through SendGrid."""
    text = (REPO / "clarion.toml").read_text()
    for channel in ("SMS", "EMAIL"):
        old = f'[channels.{channel}]\nprovider = "sandbox"'
        assert old in text, "clarion.toml changed: update this test"
        text = text.replace(old, f'[channels.{channel}]\nprovider = "{channel.lower()}"')
    text += (
        f'\n[providers.sms]\nkind = "twilio"\nbase_url = "{twilio_url}"\n'
        f'account_sid = "{twilio.PEER_SID}"\nauth_token_env = "PEER_TWILIO_TOKEN"\n'
        'from = "+15005550006"\n'
        f'\n[providers.email]\nkind = "sendgrid"\nbase_url = "{sendgrid_url}"\n'
        'api_key_env = "PEER_SENDGRID_KEY"\nfrom = "no-reply@shop.example"\n'
        f'event_webhook_public_key = "{verification_key}"\n'
    )
    path.write_text(text)
    return path


@contextmanager
def peers() -> Iterator[tuple[twilio.TwilioPeer, str, sendgrid.SendgridPeer, str]]:
    sms, mail = twilio.TwilioPeer(), sendgrid.SendgridPeer()
    with serve(sms) as sms_served, serve(mail) as mail_served:
        yield sms, sms_served.base_url, mail, mail_served.base_url


def send(client: httpx.Client, key: str, body: dict[str, Any]) -> dict[str, Any]:
    answer = client.post("/v1/notifications", json=body, headers={**SEND, "Idempotency-Key": key})
    assert answer.status_code == 202, answer.text
    return dict(answer.json())


def delivery(client: httpx.Client, notification: dict[str, Any]) -> dict[str, Any]:
    found = client.get(f"/v1/notifications/{notification['id']}", headers=SEND).json()
    return dict(found["deliveries"][0])


def otp(number: str) -> dict[str, Any]:
    return {"recipient": {"id": f"r{number}", "phone": number}, "type": "otp",
            "data": {"code": "424242"}}  # fmt: skip


def order(address: str) -> dict[str, Any]:
    return {"recipient": {"id": address, "email": address}, "type": "order_confirmed",
            "channels": ["EMAIL"], "data": {"order_id": "A-17"}}  # fmt: skip


def test_receipts_bounces_and_dead_numbers_come_back_from_the_providers(
    key_prefix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PEER_TWILIO_TOKEN", twilio.PEER_TOKEN)
    monkeypatch.setenv("PEER_SENDGRID_KEY", sendgrid.PEER_KEY)
    with peers() as (sms, sms_url, mail, mail_url):
        sms.undeliverable(DEAD_NUMBER, 30005)
        mail.outcome(BOUNCING, "bounce", "bounce")
        path = catalog(tmp_path / "catalog.toml", sms_url, mail_url, mail.verification_key)
        with running_service(key_prefix, path, tmp_path / "clarion.log") as (base_url, _):
            mail.event_webhook_url = f"{base_url}/v1/feedback/email"
            with httpx.Client(base_url=base_url, timeout=10) as client:
                sent = [send(client, "s-1", otp("+4915112345678")),
                        send(client, "s-2", otp(DEAD_NUMBER)),
                        send(client, "e-1", order("anna@shop.example")),
                        send(client, "e-2", order(BOUNCING))]  # fmt: skip

                def ended() -> list[dict[str, Any]] | None:
                    found = [delivery(client, n) for n in sent]
                    done = all(d["status"] in ("DELIVERED", "FAILED") for d in found)
                    return found if done else None

                found = eventually(ended, within=60, what="every delivery's feedback")
                assert [(d["status"], d["error_class"]) for d in found] == [
                    ("DELIVERED", None), ("FAILED", "PERMANENT"),
                    ("DELIVERED", None), ("FAILED", "PERMANENT"),
                ]  # fmt: skip
                assert found[1]["last_error"] == "undelivered: Twilio undelivered (error 30005)"
                assert found[3]["last_error"].startswith("bounced: 550 5.1.1")
                calls = (len(sms.accepted), len(mail.accepted))
                again = [send(client, "s-3", otp(DEAD_NUMBER)),
                         send(client, "e-3", order(BOUNCING))]  # fmt: skip
                assert [(d["deliveries"][0]["status"], d["deliveries"][0]["reason"])
                        for d in again] == [("SUPPRESSED", "invalid_address"),
                                            ("SUPPRESSED", "hard_bounce")]  # fmt: skip
                assert (len(sms.accepted), len(mail.accepted)) == calls
    # Every callback was taken (the "sent" status callbacks too, holding nothing to apply).
    assert {status for _, status in sms.callbacks} == {200}
    assert set(mail.events_posted) == {200}
