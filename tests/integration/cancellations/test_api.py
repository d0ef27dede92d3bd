"""``POST /v1/notifications/{id}/cancel`` and ``POST /v1/cancellations`` over HTTP: the send
scope, only the caller's own notifications, idempotent answers, and the 4xx a producer gets
for what it can get wrong (an unknown or foreign id, a bad key, a send time too far ahead or
malformed)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from tests.conftest import AUTH, JSON, ORDERS, VIEWER, Clock
from tests.integration.api_support import post

LATER = {
    "recipient": {"id": "u-1", "email": "anna@example.com", "push_tokens": ["tok-1"]},
    "type": "order_confirmed",
    "channels": ["EMAIL", "PUSH"],
    "data": {"order_id": "A-1"},
    "delay": "PT1H",
}


async def accepted(client: httpx.AsyncClient, body: dict[str, Any], key: str) -> dict[str, Any]:
    answer = await post(client, body, key)
    assert answer.status_code == 202, answer.text
    found: dict[str, Any] = answer.json()
    return found


async def cancel(
    client: httpx.AsyncClient, notification_id: str, headers: dict[str, str] = ORDERS
) -> httpx.Response:
    return await client.post(f"/v1/notifications/{notification_id}/cancel", headers=headers)


async def test_a_notification_sent_later_is_scheduled_then_cancelled_idempotently(
    client: httpx.AsyncClient, clock: Clock
) -> None:
    answer = await accepted(client, LATER, "k-1")
    due_ms = int((clock.now + timedelta(hours=1)).timestamp() * 1000)
    assert [(d["status"], d["reason"], d["due_ms"]) for d in answer["deliveries"]] == [
        ("SCHEDULED", "scheduled", due_ms)
    ] * 2
    first = await cancel(client, answer["id"])
    assert first.status_code == 200, first.text
    assert first.json() == {
        "id": answer["id"],
        "deliveries": [
            {"id": d["id"], "channel": d["channel"], "status": "CANCELLED"}
            for d in answer["deliveries"]
        ],
    }
    again = await cancel(client, answer["id"])
    assert again.json() == first.json()
    status = await client.get(f"/v1/notifications/{answer['id']}", headers=ORDERS)
    assert [d["status"] for d in status.json()["deliveries"]] == ["CANCELLED", "CANCELLED"]


async def test_only_the_producer_who_sent_it_may_cancel_it(client: httpx.AsyncClient) -> None:
    answer = await accepted(client, LATER, "k-2")
    other = await cancel(client, answer["id"], AUTH)  # another producer with "send"
    assert other.status_code == 404
    reader = await cancel(client, answer["id"], VIEWER)  # "read" only
    assert reader.status_code == 403
    assert (await cancel(client, "not-a-uuid")).status_code == 404
    unknown = await cancel(client, "019bc123-4567-7abc-8def-0123456789ab")
    assert unknown.status_code in (404, 503)  # 503 only without a read model to ask
    assert (await cancel(client, answer["id"])).status_code == 200


async def test_cancel_by_key_cancels_the_callers_notifications_with_it(
    client: httpx.AsyncClient, clock: Clock
) -> None:
    clock.now = datetime.now(UTC)  # the index expires by the Redis clock
    keyed = {**LATER, "cancellation_key": "order-7"}
    ids = [(await accepted(client, keyed, f"k-{i}"))["id"] for i in range(3)]
    other = await accepted(client, {**LATER, "cancellation_key": "order-8"}, "k-other")
    response = await client.post(
        "/v1/cancellations", content=json.dumps({"key": "order-7"}), headers={**JSON, **ORDERS}
    )
    assert response.status_code == 200, response.text
    assert response.json() == {
        "key": "order-7", "notifications": 3, "cancelled": 6, "sent": 0, "sending": 0,
        "ended": 0,
    }  # fmt: skip
    for notification_id in ids:
        status = await client.get(f"/v1/notifications/{notification_id}", headers=ORDERS)
        assert {d["status"] for d in status.json()["deliveries"]} == {"CANCELLED"}
    status = await client.get(f"/v1/notifications/{other['id']}", headers=ORDERS)
    assert {d["status"] for d in status.json()["deliveries"]} == {"SCHEDULED"}
    # Again: nothing pending under the key any more.
    response = await client.post(
        "/v1/cancellations", content=json.dumps({"key": "order-7"}), headers={**JSON, **ORDERS}
    )
    assert response.json()["notifications"] == 0
    # Another producer's key of the same name reaches nothing of this one's.
    response = await client.post(
        "/v1/cancellations", content=json.dumps({"key": "order-8"}), headers={**JSON, **AUTH}
    )
    assert response.json()["notifications"] == 0


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({}, "key"),
        ({"key": ""}, "key"),
        ({"key": "has space"}, "key"),
        ({"key": "k" * 129}, "key"),
        ({"key": "k", "extra": 1}, "extra"),
    ],
)
async def test_a_bad_cancellation_body_is_a_422_naming_the_field(
    client: httpx.AsyncClient, body: dict[str, Any], named: str
) -> None:
    response = await client.post(
        "/v1/cancellations", content=json.dumps(body), headers={**JSON, **ORDERS}
    )
    assert response.status_code in (400, 422), response.text
    assert named in response.text


@pytest.mark.parametrize(
    ("when", "named"),
    [
        ({"delay": "P1M"}, "fixed length"),
        ({"delay": "PT"}, "delay"),
        ({"delay": -5}, "delay"),
        ({"delay": 31 * 86400}, "at most 30 days"),
        ({"send_at": "2026-06-01T12:00:00"}, "send_at"),
        ({"send_at": "2027-06-01T12:00:00Z"}, "at most 30 days"),
        ({"send_at": "2026-06-01T13:00:00Z", "delay": 60}, "one of them"),
        ({"cancellation_key": "two words"}, "cancellation_key"),
    ],
)
async def test_a_send_time_a_producer_gets_wrong_is_a_422_naming_it(
    client: httpx.AsyncClient, when: dict[str, Any], named: str
) -> None:
    body = {k: v for k, v in LATER.items() if k != "delay"}
    response = await post(client, {**body, **when}, "k-bad")
    assert response.status_code == 422, response.text
    assert named in response.text
