"""The campaigns API: a campaign is created, filled, started, paused, resumed and cancelled
by its producer alone; every mistake a 4xx naming the problem."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from tests.conftest import AUTH, ORDERS, ORDERS_CRM, PROFILES

Client = httpx.AsyncClient
CAMPAIGN = {"type": "marketing", "name": "Spring", "data": {"subject": "Sale", "body": "Now"}}


async def create(
    client: Client, body: dict[str, Any] | None = None, headers: dict[str, str] = ORDERS
) -> dict[str, Any]:
    answer = await client.post("/v1/campaigns", json=body or CAMPAIGN, headers=headers)
    assert answer.status_code == 201, answer.text
    created: dict[str, Any] = answer.json()
    return created


async def act(
    client: Client, campaign_id: str, action: str, headers: dict[str, str] = ORDERS
) -> httpx.Response:
    return await client.post(f"/v1/campaigns/{campaign_id}/{action}", headers=headers)


async def test_a_campaign_goes_from_draft_to_cancelled(client: Client) -> None:
    campaign = await create(client)
    assert campaign["state"] == "draft"
    assert (campaign["name"], campaign["type"], campaign["audience"]) == ("Spring", "marketing", 0)
    campaign_id = campaign["id"]
    upload = await client.post(
        f"/v1/campaigns/{campaign_id}/recipients",
        json={"recipients": [f"user-{i}" for i in range(2500)]},
        headers={**ORDERS, "Idempotency-Key": "part-1"},
    )
    assert upload.json() == {"added": 2500, "audience": 2500}
    again = await client.post(
        f"/v1/campaigns/{campaign_id}/recipients",
        json={"recipients": [f"user-{i}" for i in range(2500)]},
        headers={**ORDERS, "Idempotency-Key": "part-1"},
    )
    assert again.json() == {"added": 2500, "audience": 2500}  # a retry adds nothing

    started = await act(client, campaign_id, "start")
    assert started.json()["state"] == "running"
    assert started.json()["remaining"] == 2500
    assert (await act(client, campaign_id, "start")).status_code == 409
    late = await client.post(
        f"/v1/campaigns/{campaign_id}/recipients", json={"recipients": ["x"]}, headers=ORDERS
    )
    assert late.status_code == 409
    assert "before it starts" in late.json()["detail"]
    assert (await act(client, campaign_id, "pause")).json()["state"] == "paused"
    assert (await act(client, campaign_id, "resume")).json()["state"] == "running"
    cancelled = await act(client, campaign_id, "cancel")
    assert cancelled.json()["state"] == "cancelled"
    assert cancelled.json()["ended_at"] is not None
    assert (await act(client, campaign_id, "cancel")).status_code == 200  # again: marks again
    refused = await act(client, campaign_id, "resume")
    assert refused.status_code == 409
    assert refused.json()["detail"] == "campaign: cannot resume a campaign that is cancelled"

    shown = (await client.get(f"/v1/campaigns/{campaign_id}", headers=ORDERS)).json()
    assert (shown["state"], shown["audience"], shown["generated"]) == ("cancelled", 2500, 0)
    assert shown["deliveries"] is None  # no read model here


async def test_a_campaign_is_its_producers_alone(client: Client) -> None:
    campaign_id = (await create(client))["id"]
    assert (await client.get(f"/v1/campaigns/{campaign_id}", headers=AUTH)).status_code == 404
    assert (
        await client.post(f"/v1/campaigns/{campaign_id}/start", headers=AUTH)
    ).status_code == 404
    assert (await client.get("/v1/campaigns/nope", headers=ORDERS)).status_code == 404
    listed = (await client.get("/v1/campaigns", headers=ORDERS)).json()["campaigns"]
    assert [c["id"] for c in listed] == [campaign_id]
    assert (await client.get("/v1/campaigns", headers=AUTH)).json() == {"campaigns": []}
    assert (await client.get("/v1/campaigns")).status_code == 401
    assert (await client.get("/v1/campaigns", headers=PROFILES)).status_code == 403


async def test_mistakes_are_named(client: Client) -> None:
    async def refused(body: dict[str, Any]) -> tuple[int, str]:
        answer = await client.post("/v1/campaigns", json=body, headers=ORDERS)
        return answer.status_code, answer.json()["detail"]

    status, detail = await refused({**CAMPAIGN, "type": "nope"})
    assert (status, detail.startswith("type: unknown notification type 'nope'")) == (422, True)
    assert (await refused({**CAMPAIGN, "rate": 0}))[0] == 422
    naive = datetime.now().replace(tzinfo=None).isoformat()
    assert await refused({**CAMPAIGN, "start_at": naive}) == (
        422,
        "start_at: give a time zone offset",
    )
    assert (await refused({**CAMPAIGN, "segment": {"attributes": {}}}))[0] == 422
    assert (await refused({**CAMPAIGN, "surprise": 1}))[0] == 422
    campaign_id = (await create(client))["id"]
    empty = await act(client, campaign_id, "start")
    assert empty.status_code == 409
    assert empty.json()["detail"] == "campaign: upload its recipients before starting it"
    too_many = {"recipients": [f"u{i}" for i in range(10_001)]}
    upload = await client.post(
        f"/v1/campaigns/{campaign_id}/recipients", json=too_many, headers=ORDERS
    )
    assert upload.status_code == 422


async def test_a_segment_campaign_takes_no_uploads_and_may_wait_for_its_start(
    client: Client,
) -> None:
    later = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    segment = {"attributes": {"plan": "pro", "country": ["DE", "AT"]}}
    body = {**CAMPAIGN, "segment": segment, "start_at": later}
    campaign = await create(client, body, ORDERS_CRM)
    upload = await client.post(
        f"/v1/campaigns/{campaign['id']}/recipients", json={"recipients": ["a"]}, headers=ORDERS
    )
    assert upload.status_code == 409
    started = (await act(client, campaign["id"], "start", ORDERS_CRM)).json()
    assert started["state"] == "scheduled"
    assert started["start_at"] is not None
