"""Digests against a running ``clarion run`` (API, worker, projector) with the sandbox:

- 50 comments on one thread within 10 s, a 5 s window: the sandbox gets exactly one EMAIL
  and one PUSH, and the inbox one message, listing all 50 (``count`` 50; the sandbox keeps
  no message text, the inbox does, and every channel renders from the same data), and each
  comment names that digest;
- comments on two threads make two digests;
- a daily digest for a recipient in ``Asia/Tokyo`` closes at their next local ``at`` time;
- a comment cancelled while its digest is open leaves it.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

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
TOKYO = ZoneInfo("Asia/Tokyo")
LISTED = "{% for c in items %}{{ c.text }};{% endfor %}"
CATALOG = """
[types.comment]
channels = ["EMAIL", "PUSH", "IN_APP"]
priority = "NORMAL"
ttl_seconds = 3600
opt_out = true
digest = { window = "5s", key = "{{ data.thread }}", max_items = 100 }

[types.comment.templates.en]
EMAIL = { title = "{{ count }} new comments", body = "@LISTED@" }
PUSH = { title = "{{ count }} new comments", body = "@LISTED@" }
IN_APP = { title = "{{ count }} new comments on {{ key }}", body = "@LISTED@" }

[types.daily_summary]
channels = ["EMAIL"]
priority = "LOW"
ttl_seconds = 3600
opt_out = true
digest = { at = "@AT@" }

[types.daily_summary.templates.en]
EMAIL = { title = "Your day", body = "{{ count }} things happened" }
"""


def catalog(at: str) -> str:
    return CATALOG.replace("@LISTED@", LISTED).replace("@AT@", at)


@dataclass(frozen=True)
class Service:
    client: httpx.Client
    keys: KeySpace

    def send(self, type_: str, recipient: dict[str, Any], **data: Any) -> dict[str, Any]:
        body = {"recipient": recipient, "type": type_, "data": data}
        headers = {**SHOP, "Idempotency-Key": uuid.uuid4().hex}
        answer = self.client.post("/v1/notifications", json=body, headers=headers)
        assert answer.status_code == 202, answer.text
        accepted: dict[str, Any] = answer.json()
        return accepted

    def status(self, notification_id: str) -> dict[str, Any]:
        answer = self.client.get(f"/v1/notifications/{notification_id}", headers=SHOP)
        assert answer.status_code == 200, answer.text
        found: dict[str, Any] = answer.json()
        return found

    def inbox(self, recipient_id: str) -> list[dict[str, Any]]:
        made = self.client.post(
            f"/v1/recipients/{recipient_id}/inbox-tokens", json={}, headers=PROFILES
        )
        assert made.status_code == 201, made.text
        token = {"Authorization": f"Bearer {made.json()['token']}"}
        answer = self.client.get("/v1/inbox", headers=token)
        assert answer.status_code == 200, answer.text
        messages: list[dict[str, Any]] = answer.json()["messages"]
        return messages

    def sent(self, address: str) -> list[dict[str, Any]]:
        """The sandbox's sends to ``address``, oldest first."""
        with sync_test_redis() as redis:
            entries: Any = redis.xrange(self.keys.sandbox_sent)
        return [
            {k.decode(): v.decode() for k, v in fields.items()} | {"ms": int(i.split(b"-")[0])}
            for i, fields in entries
            if fields[b"outcome"] == b"sent" and fields[b"address"].decode() == address
        ]


def eventually(check: Callable[[], Any], within: float = 30, what: str = "") -> Any:
    deadline = time.monotonic() + within
    while not (found := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {within} s: {what}")
        time.sleep(0.1)
    return found


def two_minutes_ahead_in_tokyo() -> datetime:
    ahead = datetime.now(TOKYO) + timedelta(minutes=2)
    return ahead.replace(second=0, microsecond=0)


@pytest.fixture(scope="module")
def daily_at() -> datetime:
    return two_minutes_ahead_in_tokyo()


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory, daily_at: datetime) -> Iterator[Service]:
    path = tmp_path_factory.mktemp("catalog") / "clarion.toml"
    path.write_text(catalog_text() + catalog(daily_at.strftime("%H:%M")))
    prefix = f"digest-{uuid.uuid4().hex[:8]}"
    database = throwaway_name()
    port = free_port()
    env = service_env(
        prefix, port, CLARION_CONFIG=str(path), CLARION_API_KEYS=KEYS,
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


def person() -> dict[str, Any]:
    recipient_id = f"u-{uuid.uuid4().hex[:10]}"
    return {"id": recipient_id, "email": f"{recipient_id}@example.com",
            "push_tokens": [f"token-{recipient_id}"]}  # fmt: skip


def test_fifty_comments_in_ten_seconds_reach_the_sandbox_as_one_email_and_one_push(
    service: Service,
) -> None:
    recipient = person()
    accepted = []
    for n in range(50):
        accepted.append(service.send("comment", recipient, thread="Invoice A-17", text=f"c{n}"))
        time.sleep(0.08)  # 50 over about 4 s, inside one 5 s window
    digest_ids = {a["digest"]["id"] for a in accepted}
    assert len(digest_ids) == 1
    assert [a["digest"]["count"] for a in accepted] == list(range(1, 51))
    assert {d["status"] for a in accepted for d in a["deliveries"]} == {"DIGESTED"}

    eventually(lambda: service.sent(recipient["email"]), 20, "the digest's EMAIL")
    eventually(lambda: service.sent(recipient["push_tokens"][0]), 20, "its PUSH")
    time.sleep(2)  # nothing more comes
    assert len(service.sent(recipient["email"])) == 1
    assert len(service.sent(recipient["push_tokens"][0])) == 1
    # What the templates were given, as the inbox keeps it (EMAIL and PUSH render the same).
    [message] = service.inbox(recipient["id"])
    assert message["title"] == "50 new comments on Invoice A-17"
    assert message["body"] == "".join(f"c{n};" for n in range(50))
    [digest_id] = digest_ids
    status = eventually(
        lambda: (s := service.status(accepted[0]["id"])).get("digest_id") and s, 20, "digest_id"
    )
    assert status["digest_id"] == digest_id
    assert {d["status"] for d in status["deliveries"]} == {"DIGESTED"}


def test_comments_on_two_threads_make_two_digests(service: Service) -> None:
    recipient = person()
    first = service.send("comment", recipient, thread="A", text="a")
    second = service.send("comment", recipient, thread="B", text="b")
    assert first["digest"]["id"] != second["digest"]["id"]
    eventually(lambda: len(service.sent(recipient["email"])) == 2, 20, "two digests' EMAILs")


def test_a_comment_cancelled_while_its_digest_is_open_leaves_it(service: Service) -> None:
    recipient = person()
    kept = service.send("comment", recipient, thread="C", text="kept")
    cancelled = service.send("comment", recipient, thread="C", text="cancelled")
    answer = service.client.post(f"/v1/notifications/{cancelled['id']}/cancel", headers=SHOP)
    assert answer.status_code == 200, answer.text
    assert {d["status"] for d in answer.json()["deliveries"]} == {"CANCELLED"}
    assert kept["digest"]["id"] == cancelled["digest"]["id"]
    eventually(lambda: service.inbox(recipient["id"]), 20, "the digest")
    [message] = service.inbox(recipient["id"])
    assert (message["title"], message["body"]) == ("1 new comments on C", "kept;")


def test_a_daily_digest_closes_at_the_recipients_local_time(
    service: Service, daily_at: datetime
) -> None:
    recipient = person()
    profile = service.client.put(
        f"/v1/recipients/{recipient['id']}",
        json={**{k: v for k, v in recipient.items() if k != "id"}, "timezone": "Asia/Tokyo"},
        headers=PROFILES,
    )
    assert profile.status_code in (200, 201), profile.text
    first = service.send("daily_summary", recipient, what="a")
    service.send("daily_summary", recipient, what="b")
    closes_ms = first["digest"]["closes_ms"]
    assert closes_ms == daily_at.timestamp() * 1000
    [email] = eventually(lambda: service.sent(recipient["email"]), 200, "the daily digest")
    late_ms = email["ms"] - closes_ms
    assert 0 <= late_ms < 1000, late_ms
