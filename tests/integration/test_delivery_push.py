"""PUSH end to end, through the delivery worker against real Redis and the local push peers:
each of a recipient's targets reaches its own platform, a target the platform reports gone is
suppressed for the next notification while the others still get theirs, the TTL a push
service is told is the time left at each attempt, and a TTL that runs out during retries is
never sent."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from redis.asyncio import Redis

from app.catalog import Catalog, parse_catalog
from streams.core.keys import KeySpace
from tests.integration.delivery_support import accept, running_worker, state, wait_until
from tests.peers.apns import PEER_KEY_ID, PEER_TEAM_ID, PEER_TOPIC, ApnsPeer
from tests.peers.fcm import FcmPeer
from tests.peers.http2_serving import Fields, Served, serve
from tests.peers.webpush import Fault, Subscription, WebPushPeer

VAPID_KEY = (
    ec.generate_private_key(ec.SECP256R1())
    .private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    .decode()
)

CATALOG = """
[providers.webpush]
kind = "webpush"
vapid_private_key_env = "TEST_VAPID_KEY"
subject = "mailto:ops@clarion.test"
allow_networks = ["127.0.0.0/8"]
ca_file = "{ca_file}"

[channels.PUSH]
platforms = {{ webpush = ["webpush"] }}
retry = {{ base_seconds = 0.05, max_seconds = 0.1, max_attempts = 6 }}

[types.order_shipped]
channels = ["PUSH"]
priority = "HIGH"
ttl_seconds = {ttl}
opt_out = true

[types.order_shipped.templates.en.PUSH]
title = "Order {{{{ order }}}} shipped"
body = "It is on its way."
link = "https://shop.example/orders/{{{{ order }}}}"
data = {{ order = "{{{{ order }}}}" }}
"""


class RecordingPeer(WebPushPeer):
    """The push service, also noting the TTL header of every request, refused ones too."""

    def __init__(self) -> None:
        super().__init__()
        self.ttls: list[int] = []

    def received(self, fields: Fields) -> str | None:
        headers = dict(fields)
        if headers.get(":path", "").startswith("/push/"):
            self.ttls.append(int(headers["ttl"]))
        return super().received(fields)


@pytest.fixture(autouse=True)
def _vapid_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_VAPID_KEY", VAPID_KEY)


@pytest.fixture
def ca_file(tmp_path: Path) -> Path:
    path = tmp_path / "peers-ca.pem"  # the authority of every local HTTP/2 peer
    WebPushPeer().ca.cert_pem.write_to_path(str(path))
    return path


@pytest.fixture
def push_service() -> Iterator[tuple[RecordingPeer, Served]]:
    peer = RecordingPeer()
    with serve(peer) as served:
        peer.origin = served.base_url
        yield peer, served


def catalog(ca_file: Path, ttl: int = 300) -> Catalog:
    return parse_catalog(CATALOG.format(ttl=ttl, ca_file=ca_file))


def target(subscription: Subscription) -> dict[str, Any]:
    """The subscription as a browser's ``PushSubscription.toJSON()`` gives it."""
    return {
        "platform": "webpush",
        "endpoint": subscription.endpoint,
        "expirationTime": None,
        "keys": {"p256dh": subscription.p256dh, "auth": subscription.auth},
    }


def shipped(*subscriptions: Subscription, order: str = "A-17") -> dict[str, Any]:
    return {
        "recipient": {"id": "u-1", "push_targets": [target(s) for s in subscriptions]},
        "type": "order_shipped",
        "data": {"order": order},
    }


async def status_of(redis: Redis, keys: KeySpace, delivery_id: str) -> str:
    return (await state(redis, keys, delivery_id)).get("status", "")


async def test_a_web_push_arrives_as_the_browser_would_decrypt_it(
    real_redis: Redis,
    key_prefix: str,
    push_service: tuple[RecordingPeer, Served],
    ca_file: Path,
) -> None:
    peer, _ = push_service
    keys, push = KeySpace(key_prefix), catalog(ca_file)
    browser = peer.subscribe()
    async with running_worker(real_redis, keys, push):
        answer = await accept(real_redis, keys, push, shipped(browser), "p1")
        [delivery] = answer["deliveries"]

        async def sent() -> bool:
            return await status_of(real_redis, keys, delivery["id"]) == "SENT"

        await wait_until(sent)
    [message] = peer.accepted
    assert json.loads(message.plaintext) == {
        "web_push": 8030,
        "notification": {
            "title": "Order A-17 shipped",
            "body": "It is on its way.",
            "navigate": "https://shop.example/orders/A-17",
            "data": {"order": "A-17"},
        },
    }
    assert message.headers["urgency"] == "high"
    recorded = await state(real_redis, keys, delivery["id"])
    assert (recorded["provider"], recorded["provider_message_id"]) == ("webpush", message.location)


async def test_a_gone_subscription_is_suppressed_next_time_and_the_others_still_get_theirs(
    real_redis: Redis,
    key_prefix: str,
    push_service: tuple[RecordingPeer, Served],
    ca_file: Path,
) -> None:
    peer, _ = push_service
    keys, push = KeySpace(key_prefix), catalog(ca_file)
    laptop, phone = peer.subscribe(), peer.subscribe()
    peer.gone(laptop, 410)
    async with running_worker(real_redis, keys, push):
        first = await accept(real_redis, keys, push, shipped(laptop, phone), "p2")
        gone, kept = (delivery["id"] for delivery in first["deliveries"])

        async def ended() -> bool:
            return (
                await status_of(real_redis, keys, gone),
                await status_of(real_redis, keys, kept),
            ) == ("FAILED", "SENT")

        await wait_until(ended)
        later = await accept(real_redis, keys, push, shipped(laptop, phone, order="A-18"), "p3")
        skipped, again = later["deliveries"]

        async def sent_again() -> bool:
            return await status_of(real_redis, keys, again["id"]) == "SENT"

        await wait_until(sent_again)
    failed = await state(real_redis, keys, gone)
    assert (failed["error_class"], failed["attempts"]) == ("PERMANENT", "1")
    assert failed["last_error"].startswith("invalid_address: ")
    assert (skipped["status"], skipped["reason"]) == ("SUPPRESSED", "invalid_address")
    assert [push.number for push in peer.accepted] == [phone.number, phone.number]
    # The gone subscription was tried once, the first time only.
    assert [status for status, _ in peer.refusals] == [410]


async def test_each_attempt_is_told_the_time_left_not_the_original_ttl(
    real_redis: Redis,
    key_prefix: str,
    push_service: tuple[RecordingPeer, Served],
    ca_file: Path,
) -> None:
    peer, _ = push_service
    keys, push = KeySpace(key_prefix), catalog(ca_file, ttl=30)
    browser = peer.subscribe()
    # The push service is busy once and asks for two seconds.
    peer.fail(Fault.UNAVAILABLE, times=1, retry_after="2")
    async with running_worker(real_redis, keys, push):
        answer = await accept(real_redis, keys, push, shipped(browser), "p4")
        [delivery] = answer["deliveries"]

        async def sent() -> bool:
            return await status_of(real_redis, keys, delivery["id"]) == "SENT"

        await wait_until(sent)
    first, second = peer.ttls
    assert 28 <= first <= 30
    assert second <= first - 2
    assert peer.accepted[0].headers["ttl"] == str(second)


async def test_a_ttl_that_runs_out_during_retries_is_never_sent(
    real_redis: Redis,
    key_prefix: str,
    push_service: tuple[RecordingPeer, Served],
    ca_file: Path,
) -> None:
    peer, _ = push_service
    keys, push = KeySpace(key_prefix), catalog(ca_file, ttl=3)
    browser = peer.subscribe()
    peer.fail(Fault.UNAVAILABLE, retry_after="1")  # busy for good
    async with running_worker(real_redis, keys, push):
        answer = await accept(real_redis, keys, push, shipped(browser), "p5")
        [delivery] = answer["deliveries"]

        async def expired() -> bool:
            return await status_of(real_redis, keys, delivery["id"]) == "EXPIRED"

        await wait_until(expired)
        peer.heal()
    assert peer.accepted == []
    assert len(peer.ttls) >= 2
    # Each attempt was told less time than the one before, and none more than the TTL.
    assert peer.ttls == sorted(peer.ttls, reverse=True)
    assert peer.ttls[0] <= 3
    assert peer.ttls[-1] < peer.ttls[0]


ALL_PLATFORMS = """
[providers.fcm]
kind = "fcm"
project_id = "clarion-peer"
service_account_env = "TEST_FCM_ACCOUNT"
base_url = "{fcm_url}"
ca_file = "{ca_file}"

[providers.apns]
kind = "apns"
team_id = "{team_id}"
key_id = "{key_id}"
key_env = "TEST_APNS_KEY"
topic = "{topic}"
base_url = "{apns_url}"
ca_file = "{ca_file}"
"""
APNS_TOKEN = "ab" * 32


@pytest.fixture
def platforms(
    monkeypatch: pytest.MonkeyPatch,
    ca_file: Path,
    push_service: tuple[RecordingPeer, Served],
) -> Iterator[tuple[Catalog, FcmPeer, ApnsPeer, RecordingPeer]]:
    web, _ = push_service
    fcm, apns = FcmPeer(), ApnsPeer()
    with serve(fcm) as fcm_served, serve(apns) as apns_served:
        fcm.origin = fcm_served.base_url
        monkeypatch.setenv("TEST_FCM_ACCOUNT", fcm.service_account_json())
        monkeypatch.setenv("TEST_APNS_KEY", apns.key_pem)
        providers = ALL_PLATFORMS.format(
            fcm_url=fcm_served.base_url, apns_url=apns_served.base_url, ca_file=ca_file,
            team_id=PEER_TEAM_ID, key_id=PEER_KEY_ID, topic=PEER_TOPIC,
        )  # fmt: skip
        text = providers + CATALOG.format(ttl=300, ca_file=ca_file).replace(
            '{ webpush = ["webpush"] }',
            '{ fcm = ["fcm"], apns = ["apns"], webpush = ["webpush"] }',
        )
        yield parse_catalog(text), fcm, apns, web


def devices(web: Subscription) -> dict[str, Any]:
    body = shipped(web)
    body["recipient"]["push_targets"] = [
        {"platform": "fcm", "token": "fcm-device:APA91b"},
        {"platform": "apns", "token": APNS_TOKEN},
        target(web),
    ]
    return body


async def test_each_target_reaches_its_own_platform(
    real_redis: Redis,
    key_prefix: str,
    platforms: tuple[Catalog, FcmPeer, ApnsPeer, RecordingPeer],
) -> None:
    push, fcm, apns, web = platforms
    keys = KeySpace(key_prefix)
    browser = web.subscribe()
    async with running_worker(real_redis, keys, push):
        answer = await accept(real_redis, keys, push, devices(browser), "p6")
        ids = [delivery["id"] for delivery in answer["deliveries"]]

        async def all_sent() -> bool:
            return [await status_of(real_redis, keys, i) for i in ids] == ["SENT"] * 3

        await wait_until(all_sent)
    [to_fcm], [to_apns], [to_web] = fcm.accepted, apns.accepted, web.accepted
    assert to_fcm.message["token"] == "fcm-device:APA91b"
    assert to_fcm.message["notification"]["title"] == "Order A-17 shipped"
    assert to_apns.token == APNS_TOKEN
    assert to_apns.headers["apns-id"] == ids[1]
    assert to_apns.headers["apns-priority"] == "10"
    assert to_apns.payload["aps"]["alert"] == {
        "title": "Order A-17 shipped", "body": "It is on its way."
    }  # fmt: skip
    assert json.loads(to_web.plaintext)["notification"]["title"] == "Order A-17 shipped"
    providers = [(await state(real_redis, keys, i))["provider"] for i in ids]
    assert providers == ["fcm", "apns", "webpush"]


async def test_after_a_410_from_apns_that_device_is_suppressed_and_the_others_are_not(
    real_redis: Redis,
    key_prefix: str,
    platforms: tuple[Catalog, FcmPeer, ApnsPeer, RecordingPeer],
) -> None:
    push, fcm, apns, web = platforms
    keys = KeySpace(key_prefix)
    browser = web.subscribe()
    apns.unregister(APNS_TOKEN)
    async with running_worker(real_redis, keys, push):
        first = await accept(real_redis, keys, push, devices(browser), "p7")
        ids = [delivery["id"] for delivery in first["deliveries"]]
        apns_delivery = ids[1]

        async def ended() -> bool:
            fates = [await status_of(real_redis, keys, i) for i in ids]
            return fates == ["SENT", "FAILED", "SENT"]

        await wait_until(ended)
        later = await accept(real_redis, keys, push, devices(browser), "p8")
    fates = [(d["status"], d.get("reason", "")) for d in later["deliveries"]]
    assert fates == [("QUEUED", ""), ("SUPPRESSED", "invalid_address"), ("QUEUED", "")]
    recorded = await state(real_redis, keys, apns_delivery)
    assert recorded["last_error"].startswith("invalid_address: apns: HTTP 410")
    assert apns.accepted == []
    assert fcm.accepted[0].message["token"] == "fcm-device:APA91b"
