"""Campaigns against a running ``clarion run``, as a producer trying to learn who the
recipients are or to fill Redis would use them:

- a key with only ``send`` and ``read`` may neither create nor start nor look at a campaign
  that selects recipients by a segment of their profiles (403 naming the ``recipients``
  scope), and the status API never shows it the recipient ids a segment chose;
- campaign calls count against the producer's request quota (429 with ``Retry-After``);
- a producer's open campaigns and their uploaded recipients are capped (429, 413; nothing
  of a refused upload is added);
- a campaign's generator keeps to the producer's notifications quota: it waits, it drops
  nothing.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import httpx
import pytest

from tests.conftest import REPO, unlink_prefix
from tests.e2e.service_support import CLARION, service_env, wait_healthy
from tests.integration.delivery_support import catalog_text
from tests.pg import TEST_SERVER_URL, drop_database, throwaway_name, with_database
from tests.servers import free_port, wait_for_port

pytestmark = pytest.mark.timeout(180)

# scout: send+read only. crm: the same producer "mkt" with recipients too. flood: a quota
# of 1 request a second. bulk: small campaign limits. paced: 20 notifications a second.
KEYS = {
    "scout": "scout:scout-secret-key:send+read",
    "mkt": "mkt:mkt-secret-key:send+read",
    "crm": "mkt:mkt-crm-secret-key:send+read+recipients",
    "flood": "flood:flood-secret-key:send+read",
    "bulk": "bulk:bulk-secret-key:send+read",
    "paced": "paced:paced-secret-key:send+read",
    "profiles": "profiles:profiles-secret-key:recipients",
}
QUOTAS = """
[quotas.producers.flood]
requests = { per_second = 1, burst = 3 }

[quotas.producers.bulk]
campaigns = { open = 2, audience = 15000, open_audience = 25000 }

[quotas.producers.paced]
notifications = { per_second = 20, burst = 20 }
"""
CAMPAIGN = {"type": "marketing", "data": {"subject": "Sale", "body": "Now"}}
PRO = {"attributes": {"plan": "pro"}}
PRO_IDS = [f"pro-{i}" for i in range(5)]


def bearer(name: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[name].split(':')[1]}"}


@dataclass(frozen=True)
class Service:
    client: httpx.Client

    def post(self, who: str, path: str, body: Any = None, **headers: str) -> httpx.Response:
        return self.client.post(path, json=body, headers={**bearer(who), **headers})

    def get(self, who: str, path: str) -> httpx.Response:
        return self.client.get(path, headers=bearer(who))

    def create(self, who: str, body: dict[str, Any]) -> dict[str, Any]:
        answer = self.post(who, "/v1/campaigns", body)
        assert answer.status_code == 201, answer.text
        created: dict[str, Any] = answer.json()
        return created

    def upload(self, who: str, campaign_id: str, ids: list[str]) -> httpx.Response:
        return self.post(who, f"/v1/campaigns/{campaign_id}/recipients", {"recipients": ids})


def eventually(check: Callable[[], Any], within: float = 60, what: str = "") -> Any:
    deadline = time.monotonic() + within
    while not (found := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {within} s: {what}")
        time.sleep(0.2)
    return found


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """``clarion run`` (API, a delivery worker with the campaign generator, projector) with
    the producers above; recipients with profiles, some of them on the "pro" plan."""
    catalog = tmp_path_factory.mktemp("catalog") / "clarion.toml"
    catalog.write_text(catalog_text() + QUOTAS)
    prefix = f"cmp-{uuid.uuid4().hex[:8]}"
    database = throwaway_name()
    port = free_port()
    env = service_env(
        prefix, port, CLARION_CONFIG=str(catalog),
        CLARION_DATABASE_URL=with_database(TEST_SERVER_URL, database),
        CLARION_API_KEYS=",".join(KEYS.values()),
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
            with httpx.Client(base_url=base_url, timeout=20) as client:
                service = Service(client)
                _give_profiles(service)
                yield service
        finally:
            process.terminate()
            process.wait(timeout=45)
            unlink_prefix(prefix)
            asyncio.run(drop_database(database))
    assert "Traceback" not in log.read_text(errors="replace")


def _give_profiles(service: Service) -> None:
    people = [(r, {"plan": "pro"}) for r in PRO_IDS]
    people += [(f"free-{i}", {"plan": "free"}) for i in range(5)]
    people += [(f"paced-{i}", {}) for i in range(100)]
    for recipient_id, attributes in people:
        profile = {"email": f"{recipient_id}@example.com", "attributes": attributes}
        answer = service.client.put(
            f"/v1/recipients/{recipient_id}", json=profile, headers=bearer("profiles")
        )
        assert answer.status_code == 200, answer.text


def test_a_send_key_cannot_select_recipients_by_segment(service: Service) -> None:
    answer = service.post("scout", "/v1/campaigns", {**CAMPAIGN, "segment": PRO})
    assert answer.status_code == 403
    assert "'recipients' scope" in answer.json()["detail"]
    assert service.get("scout", "/v1/campaigns").json() == {"campaigns": []}  # nothing written

    # The same producer's key with the scope may; its send-only key then cannot start it,
    # read its audience or list it.
    campaign = service.create("crm", {**CAMPAIGN, "segment": PRO})
    path = f"/v1/campaigns/{campaign['id']}"
    for refused in (service.post("mkt", f"{path}/start"), service.get("mkt", path)):
        assert refused.status_code == 403, refused.text
        assert "'recipients' scope" in refused.json()["detail"]
    listed = service.get("mkt", "/v1/campaigns").json()["campaigns"]
    assert campaign["id"] not in [c["id"] for c in listed]
    assert service.get("crm", path).json()["state"] == "draft"  # the refused start did nothing
    # Nor does the dashboard show it (its audience) to the read key; to the other it does.
    for secret, shows in (("mkt-secret-key", False), ("mkt-crm-secret-key", True)):
        page = service.client.get("/dashboard", auth=("mkt", secret))
        assert page.status_code == 200, page.text
        assert (campaign["id"] in page.text) is shows


def test_the_status_api_hides_recipients_a_segment_chose(service: Service) -> None:
    segment = service.create("crm", {**CAMPAIGN, "segment": PRO})
    started = service.post("crm", f"/v1/campaigns/{segment['id']}/start")
    assert started.status_code == 200, started.text
    listed = service.create("mkt", CAMPAIGN)  # the send-only key's own upload
    assert service.upload("mkt", listed["id"], ["free-1"]).status_code == 200
    assert service.post("mkt", f"/v1/campaigns/{listed['id']}/start").status_code == 200

    def notifications() -> set[str]:
        page = service.get("mkt", "/v1/deliveries?type=marketing&limit=500").json()
        ids = {d["notification_id"] for d in page["deliveries"]}
        return ids if len(ids) >= len(PRO_IDS) + 1 else set()

    shown, on_dashboard = {}, {}
    for notification_id in eventually(notifications, what="the campaigns' deliveries"):
        as_mkt = service.get("mkt", f"/v1/notifications/{notification_id}").json()
        as_crm = service.get("crm", f"/v1/notifications/{notification_id}").json()
        recipient_id = as_crm["recipient_id"]
        shown[recipient_id] = as_mkt["recipient_id"]
        # The dashboard's timeline (its recipient, and the events' recipient_id and
        # idempotency key, which ends with the recipient's id) keeps it hidden too.
        page = service.client.get(
            f"/dashboard/notifications/{notification_id}", auth=("mkt", "mkt-secret-key")
        )
        assert page.status_code == 200, page.text
        on_dashboard[recipient_id] = recipient_id in page.text
    # Whom the segment chose stays hidden from the send+read key; its own upload does not.
    assert shown == {**dict.fromkeys(PRO_IDS), "free-1": "free-1"}
    assert on_dashboard == {**dict.fromkeys(PRO_IDS, False), "free-1": True}


def test_campaign_calls_count_against_the_request_quota(service: Service) -> None:
    ids = [f"flood-{i}" for i in range(10_000)]
    created = service.post("flood", "/v1/campaigns", CAMPAIGN)
    assert created.status_code == 201
    answers = [service.upload("flood", created.json()["id"], ids) for _ in range(5)]
    statuses = [answer.status_code for answer in answers]
    assert statuses[:2] == [200, 200]  # the burst of 3: the creation and two uploads
    assert 429 in statuses
    refused = answers[statuses.index(429)]
    assert int(refused.headers["Retry-After"]) >= 1
    assert "over its ingest quota" in refused.json()["detail"]
    time.sleep(1.1)
    audience = service.get("flood", f"/v1/campaigns/{created.json()['id']}").json()["audience"]
    assert audience == 10_000 * statuses.count(200)


def test_open_campaigns_and_their_audiences_are_capped(service: Service) -> None:
    ids = [f"bulk-{i}" for i in range(10_000)]
    first = service.create("bulk", CAMPAIGN)["id"]
    assert service.upload("bulk", first, ids).status_code == 200
    too_large = service.upload("bulk", first, [f"more-{i}" for i in range(5_001)])
    assert too_large.status_code == 413
    assert "at most 15,000 (quotas campaigns.audience)" in too_large.json()["detail"]
    second = service.create("bulk", CAMPAIGN)["id"]
    assert service.upload("bulk", second, ids).status_code == 200
    assert service.upload("bulk", second, ids[:5_000]).status_code == 200  # 25,000 in all
    over_all = service.upload("bulk", first, ["one-more"])  # 10,001 of 15,000 there
    assert over_all.status_code == 413
    assert "(quotas campaigns.open_audience)" in over_all.json()["detail"]
    third = service.post("bulk", "/v1/campaigns", CAMPAIGN)
    assert third.status_code == 429
    assert "2 open campaigns, its limit (quotas campaigns.open)" in third.json()["detail"]
    audiences = [
        service.get("bulk", f"/v1/campaigns/{campaign}").json()["audience"]
        for campaign in (first, second)
    ]
    assert audiences == [10_000, 15_000]  # nothing of a refused upload was added
    assert len(service.get("bulk", "/v1/campaigns").json()["campaigns"]) == 2
    # A cancelled campaign is no longer open: its place and its recipients are free again.
    assert service.post("bulk", f"/v1/campaigns/{first}/cancel").status_code == 200
    third_id = service.create("bulk", CAMPAIGN)["id"]
    assert service.upload("bulk", third_id, ids).status_code == 200


def test_generation_keeps_to_the_notifications_quota(service: Service) -> None:
    campaign = service.create("paced", CAMPAIGN)
    path = f"/v1/campaigns/{campaign['id']}"
    assert service.upload("paced", campaign["id"], [f"paced-{i}" for i in range(100)]).is_success
    assert service.post("paced", f"{path}/start").status_code == 200
    done = eventually(
        lambda: (found := service.get("paced", path).json())["state"] == "completed" and found,
        what="the campaign completed",
    )
    assert (done["generated"], done["skipped"]) == (100, 0)  # nothing dropped
    took = _seconds(done["ended_at"]) - _seconds(done["started_at"])
    # 100 notifications at 20 a second with a burst of 20: at least 4 s.
    assert took >= 3.5, took


def _seconds(at: str) -> float:
    return datetime.fromisoformat(at).timestamp()


def test_dead_letters_hide_recipients_a_segment_chose(service: Service) -> None:
    failing = {"sandbox": {"EMAIL": {"fail_permanent": "refused by the test"}}}
    body = {**CAMPAIGN, "data": {**CAMPAIGN["data"], **failing}, "segment": PRO}
    campaign = service.create("crm", body)
    assert service.post("crm", f"/v1/campaigns/{campaign['id']}/start").status_code == 200

    def samples(who: str) -> list[dict[str, Any]]:
        answer = service.get(who, "/v1/dlq?type=marketing&samples=20")
        assert answer.status_code == 200, answer.text
        found: list[dict[str, Any]] = answer.json()["samples"]
        return found if len(found) >= len(PRO_IDS) else []

    eventually(lambda: samples("crm"), what="the campaign's dead letters")
    assert sorted(s["recipient_id"] for s in samples("crm")) == PRO_IDS
    assert [s["recipient_id"] for s in samples("mkt")] == [None] * len(PRO_IDS)
