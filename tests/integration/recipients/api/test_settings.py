"""Preferences and quiet hours: stored per recipient, applied at fan-out, recorded as events;
only a key with the ``recipients`` scope reads or changes them."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis

from streams.core import codec
from streams.core.events import PreferenceChanged
from streams.core.keys import KeySpace
from streams.delivery.delayed import work_item_of_member
from tests.conftest import AUTH, JSON, ORDERS, PROFILES, VIEWER, Clock, http_client, stream_events
from tests.integration.api_support import post

Client = httpx.AsyncClient
MARKETING = {
    "recipient": {"id": "user-9", "email": "eva@example.com", "push_tokens": ["tok-9"]},
    "type": "marketing",
    "data": {"subject": "Sale", "body": "Everything must go"},
}
ORDER = {
    "recipient": {"id": "user-9", "email": "eva@example.com", "push_tokens": ["tok-9"]},
    "type": "order_confirmed",
    "data": {"order_id": "A-1"},
}
OTP = {
    "recipient": {"id": "user-9", "phone": "+4915112345678"},
    "type": "otp",
    "data": {"code": "1"},
}
BERLIN_NIGHT = {"start": "22:00", "end": "08:00", "timezone": "Europe/Berlin"}


async def put(client: Client, path: str, body: Any, headers: dict[str, str] = PROFILES) -> Any:
    return await client.put(path, content=json.dumps(body).encode(), headers={**JSON, **headers})


def statuses(response: Any) -> dict[str, str]:
    return {d["channel"]: d["status"] for d in response.json()["deliveries"]}


async def test_opt_out_suppresses_that_channel_only(client: Client) -> None:
    response = await put(
        client,
        "/v1/recipients/user-9/preferences",
        {"preferences": [{"type": "marketing", "channel": "EMAIL", "enabled": False}]},
    )
    assert response.status_code == 200
    assert response.json()["preferences"] == [
        {"type": "marketing", "channel": "EMAIL", "enabled": False}
    ]
    accepted = await post(client, MARKETING)
    assert statuses(accepted) == {"EMAIL": "SUPPRESSED", "PUSH": "QUEUED"}
    # Other types are not affected.
    assert statuses(await post(client, ORDER, key="o-1"))["EMAIL"] == "QUEUED"


async def test_preferences_put_replaces_the_previous_ones(client: Client) -> None:
    off = {"preferences": [{"type": "marketing", "channel": "EMAIL", "enabled": False}]}
    await put(client, "/v1/recipients/user-9/preferences", off)
    response = await put(client, "/v1/recipients/user-9/preferences", {"preferences": []})
    assert response.json()["preferences"] == []
    assert statuses(await post(client, MARKETING))["EMAIL"] == "QUEUED"


async def test_otp_cannot_be_switched_off(client: Client, redis: Redis, key_prefix: str) -> None:
    response = await put(
        client,
        "/v1/recipients/user-9/preferences",
        {"preferences": [{"type": "otp", "channel": "SMS", "enabled": False}]},
    )
    assert response.status_code == 422
    assert "preferences[0].enabled" in response.json()["detail"]
    assert await redis.xlen(KeySpace(key_prefix).shard(0).events) == 0
    assert statuses(await post(client, OTP)) == {"SMS": "QUEUED"}


@pytest.mark.parametrize(
    ("body", "names"),
    [
        ({"preferences": [{"type": "nope", "channel": "EMAIL", "enabled": False}]}, "type"),
        ({"preferences": [{"type": "marketing", "channel": "FAX", "enabled": False}]}, "channel"),
        ({"preferences": [{"type": "marketing", "channel": "EMAIL"}]}, "enabled"),
        ({"prefs": []}, "prefs"),
    ],
)
async def test_invalid_preferences_are_422(client: Client, body: Any, names: str) -> None:
    response = await put(client, "/v1/recipients/user-9/preferences", body)
    assert response.status_code == 422
    assert names in response.json()["detail"]


async def test_preference_changes_are_events(client: Client, redis: Redis, key_prefix: str) -> None:
    off = {"preferences": [{"type": "marketing", "channel": "PUSH", "enabled": False}]}
    await put(client, "/v1/recipients/user-9/preferences", off)
    await put(client, "/v1/recipients/user-9/quiet-hours", BERLIN_NIGHT)
    changes = await stream_events(redis, KeySpace(key_prefix).shard(0).events)
    assert all(isinstance(c, PreferenceChanged) for c in changes)
    assert [c.settings_version for c in changes] == [1, 2]  # type: ignore[union-attr]
    assert changes[1].quiet_hours is not None  # type: ignore[union-attr]
    # A producer's backend made them: the events say so.
    assert [c.source for c in changes] == ["api", "api"]  # type: ignore[union-attr]


async def test_quiet_hours_defer_normal_but_not_high(client: Client, clock: Clock) -> None:
    clock.now = datetime(2026, 6, 1, 21, 30, tzinfo=UTC)  # 23:30 in Berlin (CEST)
    assert (await put(client, "/v1/recipients/user-9/quiet-hours", BERLIN_NIGHT)).status_code == 200
    order = await post(client, ORDER, key="order")
    assert statuses(order) == {"EMAIL": "SCHEDULED", "PUSH": "SCHEDULED", "IN_APP": "QUEUED"}
    assert statuses(await post(client, OTP, key="otp")) == {"SMS": "QUEUED"}


async def test_quiet_hours_end_in_the_recipients_zone_across_dst(
    client: Client, clock: Clock, redis: Redis, key_prefix: str
) -> None:
    # Saturday 2026-03-28 23:00 CET; clocks go forward that night, so the window ends at
    # 08:00 CEST = 06:00 UTC, not 07:00 UTC.
    clock.now = datetime(2026, 3, 28, 22, 0, tzinfo=UTC)
    await put(client, "/v1/recipients/user-9/quiet-hours", BERLIN_NIGHT)
    response = await post(client, ORDER, key="order")
    scheduled = [d for d in response.json()["deliveries"] if d["status"] == "SCHEDULED"]
    assert len(scheduled) == 2
    delayed = await redis.zrange(KeySpace(key_prefix).shard(0).delayed, 0, -1, withscores=True)
    due = {
        codec.decode_work_item(work_item_of_member(member)).channel: score
        for member, score in delayed
    }
    expected = datetime(2026, 3, 29, 6, 0, tzinfo=UTC).timestamp() * 1000
    assert due == {"EMAIL": expected, "PUSH": expected}


async def test_quiet_hours_past_the_ttl_expire_instead(client: Client, clock: Clock) -> None:
    clock.now = datetime(2026, 6, 1, 21, 0, tzinfo=UTC)  # 23:00 Berlin, window ends in 9 h
    await put(client, "/v1/recipients/user-9/quiet-hours", BERLIN_NIGHT)
    response = await post(client, {**MARKETING, "ttl_seconds": 3600})
    assert statuses(response) == {"EMAIL": "EXPIRED", "PUSH": "EXPIRED"}


async def test_quiet_hours_outside_the_window_change_nothing(client: Client, clock: Clock) -> None:
    clock.now = datetime(2026, 6, 1, 10, 0, tzinfo=UTC)  # noon in Berlin
    await put(client, "/v1/recipients/user-9/quiet-hours", BERLIN_NIGHT)
    assert set(statuses(await post(client, ORDER)).values()) == {"QUEUED"}


async def test_removing_quiet_hours(client: Client, clock: Clock) -> None:
    clock.now = datetime(2026, 6, 1, 21, 30, tzinfo=UTC)
    await put(client, "/v1/recipients/user-9/quiet-hours", BERLIN_NIGHT)
    response = await client.delete("/v1/recipients/user-9/quiet-hours", headers=PROFILES)
    assert response.status_code == 200
    assert response.json()["quiet_hours"] is None
    assert set(statuses(await post(client, ORDER)).values()) == {"QUEUED"}


@pytest.mark.parametrize(
    ("body", "names"),
    [
        ({**BERLIN_NIGHT, "start": "25:00"}, "start"),
        ({**BERLIN_NIGHT, "end": "8"}, "end"),
        ({**BERLIN_NIGHT, "end": "22:00"}, "end"),
        ({**BERLIN_NIGHT, "timezone": "Mars/Olympus"}, "timezone"),
        ({"start": "22:00", "end": "08:00"}, "timezone"),
    ],
)
async def test_invalid_quiet_hours_are_422(client: Client, body: Any, names: str) -> None:
    response = await put(client, "/v1/recipients/user-9/quiet-hours", body)
    assert response.status_code == 422
    assert names in response.json()["detail"]


async def test_settings_need_keys_and_scopes(client: Client) -> None:
    assert (await put(client, "/v1/recipients/u/quiet-hours", BERLIN_NIGHT, {})).status_code == 401
    assert (
        await put(client, "/v1/recipients/u/quiet-hours", BERLIN_NIGHT, VIEWER)
    ).status_code == 403
    response = await client.get("/v1/recipients/u/settings", headers=PROFILES)
    assert response.status_code == 200
    assert response.json()["version"] == 0


async def test_a_producer_can_neither_change_nor_read_a_recipient(client: Client) -> None:
    """A ``send`` key of another producer once switched off every channel of orders' user
    and set 24-hour quiet hours; a ``read`` key read anyone's settings."""
    off = {"preferences": [{"type": "order_confirmed", "channel": "EMAIL", "enabled": False}]}
    day_long = {"start": "00:00", "end": "23:59", "timezone": "UTC"}
    changes = [
        await put(client, "/v1/recipients/user-9/preferences", off, AUTH),
        await put(client, "/v1/recipients/user-9/quiet-hours", day_long, AUTH),
        await client.delete("/v1/recipients/user-9/quiet-hours", headers=ORDERS),
    ]
    assert [r.status_code for r in changes] == [403, 403, 403]
    assert "'recipients' scope" in changes[0].json()["detail"]
    for headers in (VIEWER, ORDERS):
        assert (
            await client.get("/v1/recipients/user-9/settings", headers=headers)
        ).status_code == 403
    assert statuses(await post(client, ORDER, key="o-1")) == {
        "EMAIL": "QUEUED", "PUSH": "QUEUED", "IN_APP": "QUEUED",
    }  # fmt: skip


async def test_settings_reach_every_shard(make_app: Any, redis: Redis, key_prefix: str) -> None:
    from tests.conftest import http_client  # noqa: PLC0415

    async with http_client(make_app(shards=4)) as client:
        off = {"preferences": [{"type": "marketing", "channel": "EMAIL", "enabled": False}]}
        await put(client, "/v1/recipients/user-9/preferences", off)
        # Different keys land on different shards; every one sees the preference.
        results = [await post(client, MARKETING, key=f"m-{n}") for n in range(12)]
    assert {statuses(r)["EMAIL"] for r in results} == {"SUPPRESSED"}
    shards = {int(r.json()["id"][-4:], 16) for r in results}
    assert len(shards) > 1
    for shard in KeySpace(key_prefix, 4).all_shards():
        assert await redis.hget(shard.recipient("user-9"), "p:marketing:EMAIL") == b"0"


async def test_options_on_quiet_hours_lists_every_method(client: Client) -> None:
    response = await client.options("/v1/recipients/user-9/quiet-hours")
    assert response.status_code == 204
    assert set(response.headers["allow"].split(", ")) == {"DELETE", "OPTIONS", "PUT"}


async def test_settings_bodies_over_the_limit_are_413(make_app: Any) -> None:
    entry = {"type": "marketing", "channel": "EMAIL", "enabled": False}
    quiet = {**BERLIN_NIGHT, "padding": "x" * 4096}
    async with http_client(make_app(max_body_bytes=2048)) as client:
        preferences = await put(client, "/v1/recipients/user-9/preferences", {
            "preferences": [entry] * 100
        })  # fmt: skip
        quiet_hours = await put(client, "/v1/recipients/user-9/quiet-hours", quiet)
        settings = await client.get("/v1/recipients/user-9/settings", headers=PROFILES)
    assert (preferences.status_code, quiet_hours.status_code) == (413, 413)
    assert settings.json()["preferences"] == []  # nothing of either body was applied
