"""Recipient profiles over HTTP: kept, read, devices added and removed, each change an event
naming what changed (never a value); a notification naming only the recipient's id reaches
the profile's addresses in its locale, addresses in a request win for that notification;
every mistake a 4xx naming the field; only keys with the ``recipients`` scope."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from redis.asyncio import Redis

from streams.core import codec
from streams.core.events import RecipientProfileChanged
from streams.core.keys import KeySpace
from streams.core.vocabulary import Priority
from streams.delivery import address_waits
from streams.delivery.delayed import delayed_member
from tests.conftest import JSON, ORDERS, PROFILES, stream_events
from tests.integration.api_support import post

Client = httpx.AsyncClient
APNS = {"platform": "apns", "token": "ab" * 32}
FCM = {"platform": "fcm", "token": "fcm-token-1"}
PROFILE = {
    "email": "anna@example.com",
    "phone": "+4915112345678",
    "push_targets": [APNS],
    "locale": "de",
    "timezone": "Europe/Berlin",
    "attributes": {"plan": "pro", "country": "DE", "seats": 5, "beta": True},
}
ORDER = {"recipient": {"id": "user-42"}, "type": "order_confirmed", "data": {"order_id": "A-1"}}


async def put(client: Client, body: Any, recipient: str = "user-42") -> httpx.Response:
    return await client.put(f"/v1/recipients/{recipient}", json=body, headers=PROFILES)


async def test_a_profile_is_kept_read_and_changed_with_an_event_per_change(
    client: Client, redis: Redis, key_prefix: str
) -> None:
    answer = await put(client, PROFILE)
    assert answer.status_code == 200
    assert answer.json() == {**PROFILE, "push_tokens": [], "webhook_url": None,
                             "id": "user-42", "version": 1}  # fmt: skip
    read = await client.get("/v1/recipients/user-42", headers=PROFILES)
    assert read.json() == answer.json()
    changed = await put(client, {**PROFILE, "email": "anna@example.org", "attributes": {}})
    assert changed.json()["version"] == 2
    patched = await client.patch(
        "/v1/recipients/user-42/push-targets",
        json={"add": [FCM, APNS], "remove": [{"platform": "apns", "token": "AB" * 32}]},
        headers=PROFILES,
    )
    assert patched.status_code == 200
    # Devices are matched as given: the token in upper case is another one, none is removed.
    assert patched.json()["push_targets"] == [APNS, FCM]
    removed = await client.patch(
        "/v1/recipients/user-42/push-targets", json={"remove": [APNS]}, headers=PROFILES
    )
    assert removed.json()["push_targets"] == [FCM]

    events = [e for e in await stream_events(redis, KeySpace(key_prefix).shard(0).events)
              if isinstance(e, RecipientProfileChanged)]  # fmt: skip
    assert [(e.settings_version, e.changed) for e in events] == [
        (1, ["email", "phone", "push_targets", "locale", "timezone", "attributes"]),
        (2, ["email", "attributes"]),
        (3, ["push_targets"]),
        (4, ["push_targets"]),
    ]
    raw = b"".join(
        fields[b"e"] for _, fields in await redis.xrange(KeySpace(key_prefix).shard(0).events)
    )
    for value in (b"anna@", b"+4915112345678", b"fcm-token-1", b"Europe/Berlin", b"pro"):
        assert value not in raw


async def test_a_notification_naming_only_the_id_reaches_the_profile(client: Client) -> None:
    await put(client, PROFILE)
    answer = (await post(client, ORDER, key="o-1")).json()
    assert [(d["channel"], d["status"]) for d in answer["deliveries"]] == [
        ("EMAIL", "QUEUED"), ("PUSH", "QUEUED"), ("IN_APP", "QUEUED"),
    ]  # fmt: skip
    # Addresses in the request win for that notification: this one has no push target.
    own = {**ORDER, "recipient": {"id": "user-42", "email": "other@example.com"}}
    answer = (await post(client, own, key="o-2")).json()
    assert [d["status"] for d in answer["deliveries"]] == ["QUEUED", "QUEUED", "QUEUED"]
    # A recipient without a profile: nowhere to send but the inbox.
    unknown = {**ORDER, "recipient": {"id": "nobody"}}
    answer = (await post(client, unknown, key="o-3")).json()
    assert [d.get("reason") for d in answer["deliveries"]] == ["no_address", "no_address", None]


async def test_the_profile_s_address_and_locale_are_what_the_worker_gets(
    client: Client, redis: Redis, key_prefix: str
) -> None:
    await put(client, PROFILE)
    await post(client, ORDER, key="o-1")
    shard = KeySpace(key_prefix).shard(0)
    items = [codec.decode_work_item(fields[b"w"])
             for _, fields in await redis.xrange(shard.work(Priority.NORMAL))]  # fmt: skip
    assert {(item.channel, item.address, item.locale) for item in items} == {
        ("EMAIL", "anna@example.com", "de"), ("PUSH", f"apns {'ab' * 32}", "de"),
        ("IN_APP", "user-42", "de"),
    }  # fmt: skip


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        ({"email": "nope"}, "email"),
        ({"timezone": "Mars/Olympus"}, "timezone: unknown time zone"),
        ({"attributes": {"1bad": "x"}}, "attributes"),
        ({"attributes": {"a": "x" * 257}}, "attributes"),
        ({"attributes": {"a": [1, 2]}}, "attributes"),
        ({"attributes": {f"k{n}": n for n in range(51)}}, "attributes: at most 50"),
        ({"push_tokens": ["t"] * 11, "push_targets": [FCM] * 10}, "at most 20"),
        ({"nickname": "anna"}, "nickname"),
    ],
)
async def test_a_wrong_profile_is_refused_naming_the_field(
    client: Client, body: dict[str, Any], detail: str
) -> None:
    answer = await put(client, body)
    assert answer.status_code == 422
    assert detail in answer.json()["detail"]


async def test_who_may_and_what_is_missing(client: Client) -> None:
    assert (await client.put("/v1/recipients/u", json=PROFILE, headers=ORDERS)).status_code == 403
    assert (await client.get("/v1/recipients/u")).status_code == 401
    missing = await client.get("/v1/recipients/u", headers=PROFILES)
    assert (missing.status_code, missing.json()["detail"]) == (
        404, "recipient 'u' has no profile",
    )  # fmt: skip
    too_long = await put(client, PROFILE, recipient="x" * 256)
    assert too_long.status_code == 422
    empty = await client.put("/v1/recipients/u", content=b"", headers={**PROFILES, **JSON})
    assert empty.status_code == 400
    options = await client.options("/v1/recipients/u")
    assert set(options.headers["allow"].split(", ")) >= {"DELETE", "GET", "PUT"}
    # Without the read model an erasure is refused before anything is erased.
    await put(client, PROFILE, recipient="u")
    refused = await client.delete("/v1/recipients/u", headers=PROFILES)
    assert refused.status_code == 503
    assert (await client.get("/v1/recipients/u", headers=PROFILES)).status_code == 200


@pytest.mark.parametrize("change", ["put", "patch"])
async def test_a_profile_change_makes_the_recipients_deliveries_waiting_for_an_address_due(
    client: Client, redis: Redis, key_prefix: str, change: str
) -> None:
    shard = KeySpace(key_prefix).shard(0)
    seconds, micros = await redis.time()
    now_ms = int(seconds) * 1000 + int(micros) // 1000
    member = delayed_member(Priority.NORMAL, b'["waits for an address"]')
    await redis.zadd(shard.delayed, {member: now_ms + 30_000})
    assert not await address_waits.wait(
        redis, shard, recipient_id="user-42", member=member, until_ms=now_ms + 60_000,
        settings_version=0,
    )  # fmt: skip
    if change == "put":
        answer = await put(client, {"email": "anna@example.com"})
    else:
        answer = await client.patch(
            "/v1/recipients/user-42/push-targets", json={"add": [FCM]}, headers=PROFILES
        )
    assert answer.status_code == 200
    due = await redis.zscore(shard.delayed, member)
    assert due is not None
    assert due <= now_ms + 1_000
    assert not await redis.exists(shard.awaiting("user-42"))
