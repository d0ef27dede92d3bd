"""The suppression list's admin API: admin keys only; an address added (by its channel's shape,
a push target typed), shown masked and by digest, found by address, listed page by page and
by channel or reason, and removed by digest; every mistake a 4xx naming the field, and no
answer holding an address in clear."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from tests.conftest import DIGEST, JSON, OPS, ORDERS, PROFILES

Client = httpx.AsyncClient
EMAIL = {"channel": "EMAIL", "address": "anna@example.com", "reason": "complaint"}


async def add(client: Client, body: dict[str, Any], headers: dict[str, str] = OPS) -> Any:
    return await client.post("/v1/suppressions", json=body, headers=headers)


async def test_only_an_admin_key_may_see_or_change_the_list(client: Client) -> None:
    assert (await client.get("/v1/suppressions")).status_code == 401
    for key in (ORDERS, PROFILES):
        assert (await add(client, EMAIL, key)).status_code == 403
        assert (await client.get("/v1/suppressions", headers=key)).status_code == 403
    assert (await client.get("/v1/suppressions")).status_code == 401


async def test_an_address_is_added_found_listed_and_removed(client: Client) -> None:
    until = (datetime.now(UTC) + timedelta(days=30)).isoformat()
    added = await add(client, {**EMAIL, "until": until})
    assert added.status_code == 201
    view = added.json()
    digest = DIGEST("anna@example.com")
    assert view | {"at": None} == {
        "channel": "EMAIL", "address_digest": digest, "address": "a***@example.com",
        "reason": "complaint", "source": "admin:ops", "at": None,
        "until": view["until"], "active": True,
    }  # fmt: skip
    shown_until = datetime.fromisoformat(view["until"])  # kept to the millisecond
    assert abs(shown_until - datetime.fromisoformat(until)) < timedelta(milliseconds=1)
    target = {"platform": "apns", "token": "ab" * 32}
    pushed = await add(
        client, {"channel": "PUSH", "push_target": target, "reason": "invalid_token"}
    )
    assert pushed.json()["address"] == "apns ababab***"
    await add(client, {"channel": "SMS", "address": "+4915112345678", "reason": "stop"})

    found = await client.post("/v1/suppressions/lookup", json={"channel": "EMAIL",
                              "address": "anna@example.com"}, headers=OPS)  # fmt: skip
    assert found.status_code == 200
    assert found.json()["address_digest"] == digest

    listed = (await client.get("/v1/suppressions", headers=OPS)).json()
    assert sorted(e["channel"] for e in listed["suppressions"]) == ["EMAIL", "PUSH", "SMS"]
    assert listed["next_cursor"] is None
    only = await client.get("/v1/suppressions?channel=SMS", headers=OPS)
    assert [e["reason"] for e in only.json()["suppressions"]] == ["stop"]
    by_reason = await client.get("/v1/suppressions?reason=complaint", headers=OPS)
    assert [e["channel"] for e in by_reason.json()["suppressions"]] == ["EMAIL"]

    removed = await client.delete(f"/v1/suppressions/EMAIL/{digest}", headers=OPS)
    assert removed.status_code == 204
    again = await client.delete(f"/v1/suppressions/EMAIL/{digest}", headers=OPS)
    assert again.status_code == 404
    gone = await client.post("/v1/suppressions/lookup", json={"channel": "EMAIL",
                             "address": "anna@example.com"}, headers=OPS)  # fmt: skip
    assert gone.status_code == 404
    listing = (await client.get("/v1/suppressions", headers=OPS)).text
    for text in (added.text, pushed.text, found.text, listing):
        assert "anna@" not in text
        assert "+4915112345678" not in text


async def test_pages_follow_the_cursor_to_every_entry(client: Client) -> None:
    for n in range(30):
        await add(client, {**EMAIL, "address": f"user{n}@example.com"})
    seen: set[str] = set()
    cursor = ""
    while True:
        page = (await client.get(f"/v1/suppressions?limit=7&cursor={cursor}", headers=OPS)).json()
        seen |= {entry["address_digest"] for entry in page["suppressions"]}
        if page["next_cursor"] is None:
            break
        cursor = page["next_cursor"]
    assert seen == {DIGEST(f"user{n}@example.com") for n in range(30)}


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        ({**EMAIL, "address": "not an address"}, "address: not a valid EMAIL address"),
        ({**EMAIL, "channel": "SMS"}, "address: not a valid SMS address"),
        ({**EMAIL, "channel": "IN_APP"}, "channel: IN_APP has no addresses"),
        ({**EMAIL, "reason": "spam"}, "reason"),
        ({**EMAIL, "until": "2020-01-01T00:00:00Z"}, "until: must be in the future"),
        ({**EMAIL, "until": "2999-01-01T00:00:00"}, "until: give a time zone offset"),
        ({"channel": "EMAIL", "reason": "complaint"}, "address: required"),
        ({**EMAIL, "push_target": {"platform": "fcm", "token": "t"}}, "push_target: only for"),
        ({"channel": "PUSH", "address": "t", "push_target": {"platform": "fcm", "token": "t"},
          "reason": "invalid_token"}, "address: give either address or push_target"),
        ({**EMAIL, "colour": "red"}, "colour"),
    ],
)  # fmt: skip
async def test_a_wrong_entry_is_refused_naming_the_field(
    client: Client, body: dict[str, Any], detail: str
) -> None:
    answer = await add(client, body)
    assert answer.status_code == 422
    assert detail in answer.json()["detail"]


async def test_wrong_cursors_limits_channels_and_digests_are_refused(client: Client) -> None:
    for query, detail in [
        ("limit=0", "limit: from 1 to 500"),
        ("limit=501", "limit: from 1 to 500"),
        ("cursor=abc", "cursor"),
        ("reason=spam", "reason: one of"),
    ]:
        answer = await client.get(f"/v1/suppressions?{query}", headers=OPS)
        assert (answer.status_code, detail in answer.json()["detail"]) == (422, True), query
    bad_digest = await client.delete("/v1/suppressions/EMAIL/xyz", headers=OPS)
    assert (bad_digest.status_code, "digest" in bad_digest.json()["detail"]) == (422, True)
    bad_channel = await client.delete(f"/v1/suppressions/FAX/{'0' * 32}", headers=OPS)
    assert bad_channel.status_code == 422
    empty = await client.post("/v1/suppressions", content=b"", headers={**OPS, **JSON})
    assert empty.status_code == 400


async def test_options_names_every_method_of_the_list(client: Client) -> None:
    answer = await client.options("/v1/suppressions")
    assert set(answer.headers["allow"].split(", ")) == {"GET", "OPTIONS", "POST"}
