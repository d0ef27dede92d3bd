"""Escalation steps and channel fallbacks against a running ``clarion run`` (API, worker,
projector) with the sandbox provider, in seconds where a catalog would say minutes:

- a comment shows in the app at once; unread, its PUSH goes 3 s later and its EMAIL 6 s
  later (the catalog's ``15m`` and ``1h``, scaled);
- read in the app after a second, the PUSH and the EMAIL end SKIPPED (reason ``read``) at
  once, and neither reaches the sandbox;
- read after the PUSH went, only the EMAIL is skipped;
- a PUSH to a token the provider calls invalid becomes an SMS; a recipient without any push
  token gets the SMS at once.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
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
PUSH_AFTER, EMAIL_AFTER = 3.0, 6.0
COMMENT = f"""
[types.comment]
channels = ["IN_APP", "PUSH", "EMAIL"]
priority = "NORMAL"
ttl_seconds = 3600
opt_out = true
steps = [
  {{ channel = "IN_APP" }},
  {{ channel = "PUSH", after = "{PUSH_AFTER:.0f}s", unless = "read" }},
  {{ channel = "EMAIL", after = "{EMAIL_AFTER:.0f}s", unless = ["read", "delivered"] }},
]
fallback = {{ PUSH = "SMS" }}

[types.comment.templates.en]
IN_APP = {{ title = "New comment", body = "{{{{ text }}}}" }}
PUSH = {{ title = "New comment", body = "{{{{ text }}}}" }}
EMAIL = {{ title = "New comment", body = "{{{{ text }}}}" }}
SMS = {{ body = "New comment: {{{{ text }}}}" }}
"""


@dataclass(frozen=True)
class Service:
    client: httpx.Client
    keys: KeySpace

    def send(self, recipient: dict[str, Any], **data: Any) -> dict[str, Any]:
        body = {"recipient": recipient, "type": "comment", "data": {"text": "Nice!", **data}}
        headers = {**SHOP, "Idempotency-Key": uuid.uuid4().hex}
        answer = self.client.post("/v1/notifications", json=body, headers=headers)
        assert answer.status_code == 202, answer.text
        accepted: dict[str, Any] = answer.json()
        return accepted

    def deliveries(self, notification_id: str) -> dict[str, dict[str, Any]]:
        """The notification's deliveries by channel, as the status API shows them."""
        answer = self.client.get(f"/v1/notifications/{notification_id}", headers=SHOP)
        assert answer.status_code == 200, answer.text
        return {d["channel"]: d for d in answer.json()["deliveries"]}

    def sent(self) -> dict[str, tuple[str, int]]:
        """The sandbox's sends: delivery id -> (channel, when in ms)."""
        with sync_test_redis() as redis:
            entries: Any = redis.xrange(self.keys.sandbox_sent)
        return {
            fields[b"delivery_id"].decode(): (
                fields[b"channel"].decode(),
                int(entry_id.split(b"-")[0]),
            )
            for entry_id, fields in entries
            if fields[b"outcome"] == b"sent"
        }

    def read_in_app(self, recipient_id: str, delivery_id: str) -> None:
        """The recipient's app reads the message (its id is its delivery's)."""
        made = self.client.post(
            f"/v1/recipients/{recipient_id}/inbox-tokens", json={}, headers=PROFILES
        )
        assert made.status_code == 201, made.text
        token = {"Authorization": f"Bearer {made.json()['token']}"}
        answer = self.client.post(f"/v1/inbox/{delivery_id}/read", headers=token)
        assert answer.status_code == 200, answer.text


def eventually(check: Callable[[], Any], within: float = 30, what: str = "") -> Any:
    deadline = time.monotonic() + within
    while not (found := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {within} s: {what}")
        time.sleep(0.05)
    return found


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    catalog = tmp_path_factory.mktemp("catalog") / "clarion.toml"
    catalog.write_text(catalog_text() + COMMENT)
    prefix = f"steps-{uuid.uuid4().hex[:8]}"
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


def person(**extra: Any) -> dict[str, Any]:
    recipient_id = f"u-{uuid.uuid4().hex[:10]}"
    return {
        "id": recipient_id,
        "email": f"{recipient_id}@example.com",
        "push_tokens": [f"token-{recipient_id}"],
        "phone": "+4915112345678",
        **extra,
    }


def ids_by_channel(accepted: dict[str, Any]) -> dict[str, str]:
    return {d["channel"]: d["id"] for d in accepted["deliveries"]}


def test_unread_the_push_goes_after_three_seconds_and_the_email_after_six(
    service: Service,
) -> None:
    accepted_ms = time.time() * 1000
    accepted = service.send(person())
    ids = ids_by_channel(accepted)
    by_channel = {d["channel"]: d for d in accepted["deliveries"]}
    assert by_channel["IN_APP"]["status"] == "QUEUED"
    assert by_channel["PUSH"]["status"] == by_channel["EMAIL"]["status"] == "SCHEDULED"

    sent = eventually(lambda: ids["EMAIL"] in service.sent() and service.sent(), 20, "EMAIL")
    push_s = (sent[ids["PUSH"]][1] - accepted_ms) / 1000
    email_s = (sent[ids["EMAIL"]][1] - accepted_ms) / 1000
    assert PUSH_AFTER - 0.1 <= push_s <= PUSH_AFTER + 1.5, push_s
    assert EMAIL_AFTER - 0.1 <= email_s <= EMAIL_AFTER + 1.5, email_s
    assert ids["IN_APP"] not in sent  # the inbox is Clarion's own, not the sandbox

    def all_sent() -> dict[str, dict[str, Any]] | None:
        shown = service.deliveries(accepted["id"])
        return shown if all(d["status"] == "SENT" for d in shown.values()) else None

    shown = eventually(all_sent, 20, "every step SENT in the read model")
    assert [shown[c]["step"] for c in ("IN_APP", "PUSH", "EMAIL")] == [1, 2, 3]


def test_read_in_the_app_the_push_and_email_are_skipped_at_once(service: Service) -> None:
    recipient = person()
    accepted = service.send(recipient)
    ids = ids_by_channel(accepted)
    eventually(
        lambda: service.deliveries(accepted["id"])["IN_APP"]["status"] == "SENT", 20, "IN_APP"
    )
    read_at = time.monotonic()
    service.read_in_app(recipient["id"], ids["IN_APP"])

    def skipped() -> dict[str, dict[str, Any]] | None:
        shown = service.deliveries(accepted["id"])
        wanted = shown["PUSH"]["status"] == shown["EMAIL"]["status"] == "SKIPPED"
        return shown if wanted else None

    shown = eventually(skipped, 20, "PUSH and EMAIL SKIPPED")
    # Brought forward by the read: well before the PUSH's own time.
    assert time.monotonic() - read_at < PUSH_AFTER
    assert shown["PUSH"]["reason"] == shown["EMAIL"]["reason"] == "read"
    assert shown["IN_APP"]["status"] == "READ"
    time.sleep(EMAIL_AFTER + 1 - (time.monotonic() - read_at))
    assert not {ids["PUSH"], ids["EMAIL"]} & service.sent().keys()


def test_read_after_the_push_went_only_the_email_is_skipped(service: Service) -> None:
    recipient = person()
    accepted = service.send(recipient)
    ids = ids_by_channel(accepted)
    eventually(lambda: ids["PUSH"] in service.sent(), 20, "PUSH sent")
    service.read_in_app(recipient["id"], ids["IN_APP"])
    shown = eventually(
        lambda: (s := service.deliveries(accepted["id"]))["EMAIL"]["status"] == "SKIPPED" and s,
        20,
        "EMAIL SKIPPED",
    )
    assert shown["PUSH"]["status"] == "SENT"
    time.sleep(EMAIL_AFTER + 1)
    assert ids["EMAIL"] not in service.sent()


def test_a_push_to_an_invalid_token_becomes_an_sms(service: Service) -> None:
    accepted = service.send(person(), sandbox={"PUSH": {"invalid_token": True}})
    ids = ids_by_channel(accepted)
    assert "SMS" not in ids  # only made if the PUSH fails

    def with_sms() -> dict[str, dict[str, Any]] | None:
        shown = service.deliveries(accepted["id"])
        return shown if shown.get("SMS", {}).get("status") == "SENT" else None

    shown = eventually(with_sms, 20, "the SMS fallback SENT")
    assert shown["PUSH"]["status"] == "FAILED"
    assert shown["SMS"]["fallback_of"] == ids["PUSH"]
    sms = [d for d, (channel, _) in service.sent().items() if channel == "SMS"]
    assert sms == [shown["SMS"]["id"]]


def test_without_a_push_token_the_sms_is_planned_at_once(service: Service) -> None:
    recipient = person()
    del recipient["push_tokens"]
    accepted = service.send(recipient)
    by_channel = {d["channel"]: d for d in accepted["deliveries"]}
    assert by_channel["PUSH"]["status"] == "SUPPRESSED"
    assert by_channel["PUSH"]["reason"] == "no_address"
    assert by_channel["SMS"]["status"] == "QUEUED"
    eventually(lambda: by_channel["SMS"]["id"] in service.sent(), 20, "SMS sent")
